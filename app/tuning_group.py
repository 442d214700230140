"""The config panel's "Tuning" group: schedule, early stopping and precision."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QFormLayout, QGroupBox, QLineEdit, QSpinBox, QWidget

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


class TuningGroup(QGroupBox):
    """Widgets for [schedule] kind/warm-up/min lr, early stopping and parallel.precision."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Tuning", parent)
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

    def show_config(self, cfg: Config) -> None:
        self.combo_schedule.setCurrentIndex(max(0, self.combo_schedule.findData(cfg.schedule.kind)))
        self.spin_warmup_steps.setValue(cfg.schedule.warmup_steps)
        self.edit_min_lr.setText(repr(cfg.schedule.min_lr))
        self.spin_early_stop.setValue(cfg.train.early_stop_patience)
        self.combo_monitor.setCurrentIndex(max(0, self.combo_monitor.findData(cfg.train.monitor)))
        self.combo_precision.setCurrentIndex(max(0, self.combo_precision.findData(cfg.parallel.precision)))

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
