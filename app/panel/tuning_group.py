"""The config panel's "Tuning" group: schedule, early stopping, precision and image augmentation.

``button_augment_preview`` asks (``augment_preview_requested``) for a grid of
augmented samples; it is enabled while augmentation is on and the chosen
data set has images (``set_images_available``).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QFormLayout, QGroupBox, QPushButton, QWidget

from app.panel.fields import Bindings, choice_combo, float_spin, int_spin, line_edit
from core.config import FIELDS, Config

SCHEDULE_HELP = {
    "constant": "The same learning rate throughout",
    "step": "Multiply the rate by gamma every few epochs",
    "cosine": "Fall along a cosine to the minimum rate at the last step",
    "one-cycle": "Rise to the rate, then fall to the minimum (super-convergence)",
    "plateau": "Lower the rate when the monitored metric stops improving",
}


class TuningGroup(QGroupBox):
    """Widgets for [schedule] kind/warm-up/min lr, early stopping, parallel.precision and [augment]."""

    augment_preview_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Tuning", parent)
        self._images = False
        form = QFormLayout(self)
        self.combo_schedule = choice_combo("schedule.kind", "combo_schedule")
        for i, name in enumerate(FIELDS["schedule.kind"].choices):
            self.combo_schedule.setItemData(i, SCHEDULE_HELP[name], Qt.ItemDataRole.ToolTipRole)
        form.addRow("LR schedule", self.combo_schedule)
        self.spin_warmup_steps = int_spin("schedule.warmup_steps", "spin_warmup_steps")
        form.addRow("Warm-up steps", self.spin_warmup_steps)
        self.edit_min_lr = line_edit("schedule.min_lr", "edit_min_lr")
        form.addRow("Minimum rate", self.edit_min_lr)
        self.spin_early_stop = int_spin("train.early_stop_patience", "spin_early_stop_patience")
        self.spin_early_stop.setSpecialValueText("never")
        form.addRow("Early stop after", self.spin_early_stop)
        monitored = FIELDS["train.monitor"].choices
        self.combo_monitor = choice_combo("train.monitor", "combo_monitor", [n.replace("_", " ") for n in monitored])
        form.addRow("Monitor", self.combo_monitor)
        self.combo_precision = choice_combo("parallel.precision", "combo_precision")
        form.addRow("Precision", self.combo_precision)
        self.spin_crop_scale = float_spin("augment.crop_scale", 2, 0.05, "spin_crop_scale")
        form.addRow("Crop scale", self.spin_crop_scale)
        self.check_hflip = QCheckBox(FIELDS["augment.hflip"].help, objectName="check_hflip")
        form.addRow("", self.check_hflip)
        self.spin_rotation = float_spin("augment.rotation", 1, 5.0, "spin_rotation")
        self.spin_rotation.setSuffix("°")
        form.addRow("Rotation", self.spin_rotation)
        self.spin_jitter = float_spin("augment.jitter", 2, 0.05, "spin_jitter")
        form.addRow("Colour jitter", self.spin_jitter)
        self.button_augment_preview = QPushButton("Preview augmentation…", objectName="button_augment_preview")
        self.button_augment_preview.setToolTip(
            "a grid of augmented samples of the chosen data set (training images only are augmented)"
        )
        form.addRow("", self.button_augment_preview)
        for spin in (self.spin_crop_scale, self.spin_rotation, self.spin_jitter):
            spin.valueChanged.connect(self._update_preview_button)
        self.check_hflip.toggled.connect(self._update_preview_button)
        self.button_augment_preview.clicked.connect(self.augment_preview_requested)
        self._update_preview_button()
        self.bindings = Bindings(
            {
                "schedule.kind": self.combo_schedule,
                "schedule.warmup_steps": self.spin_warmup_steps,
                "schedule.min_lr": self.edit_min_lr,
                "train.early_stop_patience": self.spin_early_stop,
                "train.monitor": self.combo_monitor,
                "parallel.precision": self.combo_precision,
                "augment.crop_scale": self.spin_crop_scale,
                "augment.hflip": self.check_hflip,
                "augment.rotation": self.spin_rotation,
                "augment.jitter": self.spin_jitter,
            }
        )

    @property
    def augment_on(self) -> bool:
        return (
            self.spin_crop_scale.value() < 1.0
            or self.check_hflip.isChecked()
            or self.spin_rotation.value() > 0
            or self.spin_jitter.value() > 0
        )

    def set_images_available(self, available: bool) -> None:
        """Whether the chosen data set has sample images to augment."""
        self._images = available
        self._update_preview_button()

    def _update_preview_button(self, *_args: Any) -> None:
        self.button_augment_preview.setEnabled(self.augment_on and self._images)

    def show_config(self, cfg: Config) -> None:
        self.bindings.show(cfg)

    def take(self, raw: dict[str, dict[str, Any]]) -> None:
        """Write the widgets' values into a config dict (validated by the caller's from_dict)."""
        self.bindings.take(raw)
