"""The config panel's "Tuning" group: schedule, early stopping, precision and image augmentation.

``button_augment_preview`` asks (``augment_preview_requested``) for a grid of
augmented samples; it is enabled while augmentation is on and the chosen
data set has images (``set_images_available``).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFormLayout, QGroupBox, QPushButton, QWidget

from app.panel.fields import Bindings
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
        self.bindings = b = Bindings()
        self.combo_schedule = b.row(form, "schedule.kind", "LR schedule", name="combo_schedule")
        for i, name in enumerate(FIELDS["schedule.kind"].choices):
            self.combo_schedule.setItemData(i, SCHEDULE_HELP[name], Qt.ItemDataRole.ToolTipRole)
        self.spin_warmup_steps = b.row(form, "schedule.warmup_steps", "Warm-up steps", name="spin_warmup_steps")
        self.edit_min_lr = b.row(form, "schedule.min_lr", "Minimum rate", name="edit_min_lr")
        self.spin_early_stop = b.row(
            form, "train.early_stop_patience", "Early stop after", name="spin_early_stop_patience"
        )
        self.spin_early_stop.setSpecialValueText("auto")  # -1: on a table only; 0 never
        monitored = [n.replace("_", " ") for n in FIELDS["train.monitor"].choices]
        self.combo_monitor = b.row(form, "train.monitor", "Monitor", name="combo_monitor", labels=monitored)
        self.combo_precision = b.row(form, "parallel.precision", "Precision", name="combo_precision")
        self.spin_crop_scale = b.row(
            form, "augment.crop_scale", "Crop scale", name="spin_crop_scale", decimals=2, step=0.05
        )
        self.check_hflip = b.row(form, "augment.hflip", "", name="check_hflip")
        self.spin_rotation = b.row(form, "augment.rotation", "Rotation", name="spin_rotation", decimals=1, step=5.0)
        self.spin_rotation.setSuffix("°")
        self.spin_jitter = b.row(form, "augment.jitter", "Colour jitter", name="spin_jitter", decimals=2, step=0.05)
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

    @property
    def augment_on(self) -> bool:
        return (
            self.spin_crop_scale.value() < 1.0
            or self.check_hflip.isChecked()
            or self.spin_rotation.value() > 0
            or self.spin_jitter.value() > 0
        )

    def show_augment_for(self, data: Any, model: Any) -> None:
        """Augmentation on only where it changes what trains: images (``data``, the data group), through a network
        that sees them (``model``, the model group: not a head on cached features)."""
        source = str(data.combo_dataset.currentData() or "")
        backbone = model.backbone.kind(model.combo_model.currentData())
        if not (data.images or source.startswith("images:")):
            why = "augmentation changes images: this data set has none"
        elif backbone is not None and model.combo_finetune.currentData() == "head":
            why = 'a head on cached features never sees the images again: augmentation needs model.finetune = "full"'
        else:
            why = ""
        self.set_augment_applies(why)

    def set_augment_applies(self, why_not: str) -> None:
        """The augmentation widgets on, or off with ``why_not`` as their tooltip ("": they apply)."""
        for w in (self.spin_crop_scale, self.check_hflip, self.spin_rotation, self.spin_jitter):
            if w.property("help") is None:
                w.setProperty("help", w.toolTip())
            w.setEnabled(not why_not)
            w.setToolTip(why_not or str(w.property("help")))

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
