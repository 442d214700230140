"""The config panel's "Tuning" group: schedule, early stopping, precision and image augmentation.

``button_augment_preview`` asks (``augment_preview_requested``) for a grid of
augmented samples; it is enabled while augmentation is on and the chosen
data set has images (``set_images_available``).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QGroupBox, QLineEdit, QPushButton, QSpinBox, QWidget,
)

from core.config import BOUNDS, MONITORED, PRECISIONS, SCHEDULES, Config

SCHEDULE_HELP = {
    "constant": "The same learning rate throughout",
    "step": "Multiply the rate by gamma every few epochs",
    "cosine": "Fall along a cosine to the minimum rate at the last step",
    "one-cycle": "Rise to the rate, then fall to the minimum (super-convergence)",
    "plateau": "Lower the rate when the monitored metric stops improving",
}


def _int_spin(key: str, name: str, tip: str) -> QSpinBox:
    lo, hi, _ = BOUNDS[key]
    spin = QSpinBox(objectName=name)
    spin.setRange(int(lo), int(min(hi, 2**31 - 1)))
    spin.setToolTip(tip)
    return spin


def _float_spin(key: str, name: str, decimals: int, step: float, tip: str) -> QDoubleSpinBox:
    lo, hi, _ = BOUNDS[key]
    spin = QDoubleSpinBox(objectName=name)
    spin.setRange(lo, hi)
    spin.setDecimals(decimals)
    spin.setSingleStep(step)
    spin.setToolTip(tip)
    return spin


class TuningGroup(QGroupBox):
    """Widgets for [schedule] kind/warm-up/min lr, early stopping, parallel.precision and [augment]."""

    augment_preview_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Tuning", parent)
        self._images = False
        self._shown: dict[str, float] = {}  # augment spin values as displayed for the loaded config
        form = QFormLayout(self)
        self.combo_schedule = QComboBox(objectName="combo_schedule")
        for name in SCHEDULES:
            self.combo_schedule.addItem(name, name)
            self.combo_schedule.setItemData(self.combo_schedule.count() - 1, SCHEDULE_HELP[name],
                                             Qt.ItemDataRole.ToolTipRole)
        form.addRow("LR schedule", self.combo_schedule)
        self.spin_warmup_steps = _int_spin("schedule.warmup_steps", "spin_warmup_steps",
                                           "Steps over which the rate rises linearly from 0")
        form.addRow("Warm-up steps", self.spin_warmup_steps)
        self.edit_min_lr = QLineEdit(objectName="edit_min_lr")
        self.edit_min_lr.setToolTip("Cosine and one-cycle: the rate at the last step")
        form.addRow("Minimum rate", self.edit_min_lr)
        self.spin_early_stop = _int_spin("train.early_stop_patience", "spin_early_stop_patience",
                                         "Stop after this many epochs without improvement; 0 = never")
        self.spin_early_stop.setSpecialValueText("never")
        form.addRow("Early stop after", self.spin_early_stop)
        self.combo_monitor = QComboBox(objectName="combo_monitor")
        for name in MONITORED:
            self.combo_monitor.addItem(name.replace("_", " "), name)
        self.combo_monitor.setToolTip("What the best checkpoint and early stopping watch")
        form.addRow("Monitor", self.combo_monitor)
        self.combo_precision = QComboBox(objectName="combo_precision")
        for name in PRECISIONS:
            self.combo_precision.addItem(name, name)
        self.combo_precision.setToolTip("bf16-mixed: autocast in the training step; 16-mixed needs CUDA")
        form.addRow("Precision", self.combo_precision)
        self.spin_crop_scale = _float_spin("augment.crop_scale", "spin_crop_scale", 2, 0.05,
                                           "Augment: random resized crop keeping at least this share of the area; "
                                           "1 = off")
        form.addRow("Crop scale", self.spin_crop_scale)
        self.check_hflip = QCheckBox("Random horizontal flip", objectName="check_hflip")
        form.addRow("", self.check_hflip)
        self.spin_rotation = _float_spin("augment.rotation", "spin_rotation", 1, 5.0,
                                         "Augment: random rotation up to this many degrees; 0 = off")
        self.spin_rotation.setSuffix("°")
        form.addRow("Rotation", self.spin_rotation)
        self.spin_jitter = _float_spin("augment.jitter", "spin_jitter", 2, 0.05,
                                       "Augment: brightness, contrast and saturation jitter strength; 0 = off")
        form.addRow("Colour jitter", self.spin_jitter)
        self.button_augment_preview = QPushButton("Preview augmentation…", objectName="button_augment_preview")
        self.button_augment_preview.setToolTip("a grid of augmented samples of the chosen data set "
                                               "(training images only are augmented)")
        form.addRow("", self.button_augment_preview)
        for spin in (self.spin_crop_scale, self.spin_rotation, self.spin_jitter):
            spin.valueChanged.connect(self._update_preview_button)
        self.check_hflip.toggled.connect(self._update_preview_button)
        self.button_augment_preview.clicked.connect(self.augment_preview_requested)
        self._update_preview_button()

    @property
    def augment_on(self) -> bool:
        return (self.spin_crop_scale.value() < 1.0 or self.check_hflip.isChecked()
                or self.spin_rotation.value() > 0 or self.spin_jitter.value() > 0)

    def set_images_available(self, available: bool) -> None:
        """Whether the chosen data set has sample images to augment."""
        self._images = available
        self._update_preview_button()

    def _update_preview_button(self, *_args: Any) -> None:
        self.button_augment_preview.setEnabled(self.augment_on and self._images)

    def show_config(self, cfg: Config) -> None:
        self.combo_schedule.setCurrentIndex(max(0, self.combo_schedule.findData(cfg.schedule.kind)))
        self.spin_warmup_steps.setValue(cfg.schedule.warmup_steps)
        self.edit_min_lr.setText(repr(cfg.schedule.min_lr))
        self.spin_early_stop.setValue(cfg.train.early_stop_patience)
        self.combo_monitor.setCurrentIndex(max(0, self.combo_monitor.findData(cfg.train.monitor)))
        self.combo_precision.setCurrentIndex(max(0, self.combo_precision.findData(cfg.parallel.precision)))
        a = cfg.augment
        self.spin_crop_scale.setValue(a.crop_scale)
        self.check_hflip.setChecked(a.hflip)
        self.spin_rotation.setValue(a.rotation)
        self.spin_jitter.setValue(a.jitter)
        self._shown = {"crop_scale": self.spin_crop_scale.value(), "rotation": self.spin_rotation.value(),
                       "jitter": self.spin_jitter.value()}

    def take(self, raw: dict[str, dict[str, Any]]) -> None:
        """Write the widgets' values into a config dict (validated by the caller's from_dict)."""
        raw["schedule"]["kind"] = self.combo_schedule.currentData()
        raw["schedule"]["warmup_steps"] = self.spin_warmup_steps.value()
        text = self.edit_min_lr.text().strip()
        try:
            raw["schedule"]["min_lr"] = float(text)
        except ValueError:
            raw["schedule"]["min_lr"] = text  # the config error quotes what was typed
        raw["train"]["early_stop_patience"] = self.spin_early_stop.value()
        raw["train"]["monitor"] = self.combo_monitor.currentData()
        raw["parallel"]["precision"] = self.combo_precision.currentData()
        aug = raw["augment"]
        aug["hflip"] = self.check_hflip.isChecked()
        for key, spin in (("crop_scale", self.spin_crop_scale), ("rotation", self.spin_rotation),
                          ("jitter", self.spin_jitter)):
            if spin.value() != self._shown.get(key):  # a spin box rounds: keep the loaded value unless moved
                aug[key] = spin.value()
