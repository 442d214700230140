"""The config panel's Model, Parallel and Training groups: their keys as widgets, shown and read back.

Each group binds its keys to widgets built from core.config's field table
(ranges, choices, help) and says which rows the current choices make
relevant. The strategy's own rules (a fixed worker count, keys only it reads)
are asked of its class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QToolButton, QWidget

from app.panel.fields import Bindings, choice_combo, float_spin, form_of, int_spin, line_edit, parse_list
from core.config import STRATEGIES, Config
from core.strategies import strategy_class


def available_devices() -> list[str]:
    """Devices this machine has, so the picker never offers one that cannot run."""
    import torch

    devices = ["cpu"]
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        devices.append("cuda")
        devices += [f"cuda:{i}" for i in range(n)] if n > 1 else []
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


class ModelGroup(QGroupBox):
    """[model]: a built-in kind or a custom file, and the shape of what it builds."""

    browse_requested = Signal(str)  # "custom"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Model", parent)
        self.form = form = form_of(self)
        self.combo_model = choice_combo("model.kind", "combo_model", ("Linear", "MLP", "CNN"))
        self.combo_model.setToolTip("")
        self.combo_model.addItem("Custom (Python file)…", "custom")
        form.addRow("Model", self.combo_model)
        self.edit_custom_model = QLineEdit(objectName="edit_custom_model")
        self.edit_custom_model.setPlaceholderText("path/to/model.py:build")
        self.edit_custom_model.setToolTip("A Python file and a function (input_shape, num_classes) -> nn.Module")
        self.button_browse_model = QToolButton(objectName="button_browse_model")
        self.button_browse_model.setText("…")
        self.button_browse_model.setToolTip("Choose the Python file")
        self.button_browse_model.clicked.connect(lambda: self.browse_requested.emit("custom"))
        self.custom_row = QHBoxLayout()
        self.custom_row.setSpacing(4)
        self.custom_row.addWidget(self.edit_custom_model, 1)
        self.custom_row.addWidget(self.button_browse_model)
        form.addRow("File:function", self.custom_row)
        self.edit_hidden = line_edit("model.hidden", "edit_hidden")
        form.addRow("Hidden layers", self.edit_hidden)
        self.edit_channels = line_edit("model.channels", "edit_channels")
        form.addRow("Conv channels", self.edit_channels)
        self.combo_activation = choice_combo("model.activation", "combo_activation")
        form.addRow("Activation", self.combo_activation)
        self.spin_dropout = float_spin("model.dropout", 2, 0.05, "spin_dropout")
        form.addRow("Dropout", self.spin_dropout)
        self.label_model_params = QLabel(objectName="label_model_params")
        form.addRow(self.label_model_params)
        self.bindings = Bindings(
            {
                "model.hidden": self.edit_hidden,
                "model.channels": self.edit_channels,
                "model.activation": self.combo_activation,
                "model.dropout": self.spin_dropout,
            }
        )

    def show_config(self, cfg: Config) -> None:
        kind = cfg.model.kind
        custom = kind.startswith("custom:")
        self.combo_model.setCurrentIndex(self.combo_model.findData("custom" if custom else kind))
        self.edit_custom_model.setText(kind[len("custom:") :] if custom else "")
        self.bindings.show(cfg)

    def take(self, raw: dict[str, dict[str, Any]]) -> None:
        kind = self.combo_model.currentData()
        raw["model"]["kind"] = f"custom:{self.edit_custom_model.text().strip()}" if kind == "custom" else kind
        self.bindings.take(raw)

    def choose_custom_model_file(self, path: str) -> None:
        """Build the model with ``path``'s build_model, the function's name selected to edit."""
        self.edit_custom_model.setText(f"{path}:build_model")
        self.edit_custom_model.setFocus()
        self.edit_custom_model.setSelection(len(path) + 1, len("build_model"))

    def update_visibility(self) -> None:
        kind = self.combo_model.currentData()
        self.form.setRowVisible(self.custom_row, kind == "custom")
        self.form.setRowVisible(self.edit_hidden, kind == "mlp")
        self.form.setRowVisible(self.edit_channels, kind == "cnn")
        self.form.setRowVisible(self.combo_activation, kind in ("mlp", "cnn"))
        self.form.setRowVisible(self.spin_dropout, kind in ("mlp", "cnn"))


class TrainingGroup(QGroupBox):
    """[optim] and the main keys of [train]."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Training", parent)
        self.form = form = form_of(self)
        self.combo_optimizer = choice_combo("optim.name", "combo_optimizer", ("SGD", "Adam", "AdamW"))
        form.addRow("Optimizer", self.combo_optimizer)
        self.edit_lr = line_edit("optim.lr", "edit_lr")
        form.addRow("Learning rate", self.edit_lr)
        self.spin_momentum = float_spin("optim.momentum", 3, 0.05, "spin_momentum")
        form.addRow("Momentum", self.spin_momentum)
        self.edit_weight_decay = line_edit("optim.weight_decay", "edit_weight_decay")
        form.addRow("Weight decay", self.edit_weight_decay)
        self.spin_epochs = int_spin("train.epochs", "spin_epochs")
        form.addRow("Epochs", self.spin_epochs)
        self.spin_batch_size = int_spin("train.batch_size", "spin_batch_size")
        form.addRow("Batch size", self.spin_batch_size)
        self.spin_seed = int_spin("train.seed", "spin_seed")
        form.addRow("Seed", self.spin_seed)
        self.bindings = Bindings(
            {
                "optim.name": self.combo_optimizer,
                "optim.lr": self.edit_lr,
                "optim.momentum": self.spin_momentum,
                "optim.weight_decay": self.edit_weight_decay,
                "train.epochs": self.spin_epochs,
                "train.batch_size": self.spin_batch_size,
                "train.seed": self.spin_seed,
            }
        )

    def show_config(self, cfg: Config) -> None:
        self.bindings.show(cfg)

    def take(self, raw: dict[str, dict[str, Any]]) -> None:
        self.bindings.take(raw)

    def epochs(self) -> int:
        """The epochs shown: what a continued or forked run trains up to."""
        return self.spin_epochs.value()

    def watch_epochs(self, slot: Callable[[int], Any]) -> None:
        self.spin_epochs.valueChanged.connect(slot)

    def set_lr(self, lr: float) -> None:
        self.edit_lr.setText(f"{lr:.6g}")

    def update_visibility(self) -> None:
        self.form.setRowVisible(self.spin_momentum, self.combo_optimizer.currentData() == "sgd")


class ParallelGroup(QGroupBox):
    """[parallel]: the strategy, its workers and where they run."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Parallel", parent)
        self.form = form = form_of(self)
        self.combo_strategy = choice_combo("parallel.strategy", "combo_strategy")
        for i, name in enumerate(STRATEGIES):
            self.combo_strategy.setItemData(i, strategy_class(name).description, Qt.ItemDataRole.ToolTipRole)
        form.addRow("Strategy", self.combo_strategy)
        self.spin_workers = int_spin("parallel.workers", "spin_workers")
        form.addRow("Workers", self.spin_workers)
        self.spin_threads = int_spin("parallel.threads_per_worker", "spin_threads")
        self.spin_threads.setSpecialValueText("automatic")
        form.addRow("Threads / worker", self.spin_threads)
        self.combo_device = QComboBox(objectName="combo_device")
        for dev in available_devices():
            self.combo_device.addItem(dev, dev)
        form.addRow("Device", self.combo_device)
        self.edit_sweep_lr = line_edit("parallel.sweep_lr", "edit_sweep_lr")
        self.edit_sweep_lr.setPlaceholderText("one per worker, e.g. 0.1, 0.05")
        form.addRow("Sweep rates", self.edit_sweep_lr)
        self.bindings = Bindings(
            {
                "parallel.strategy": self.combo_strategy,
                "parallel.workers": self.spin_workers,
                "parallel.threads_per_worker": self.spin_threads,
                "parallel.sweep_lr": self.edit_sweep_lr,
            }
        )

    def show_config(self, cfg: Config) -> None:
        self.bindings.show(cfg)
        self._select_device(cfg.parallel.device)

    def _select_device(self, device: str) -> None:
        index = self.combo_device.findData(device)
        if index < 0:
            # Keep a loaded config's device so Save writes it back; Start will say it is missing.
            self.combo_device.addItem(f"{device} (not on this machine)", device)
            index = self.combo_device.count() - 1
        self.combo_device.setCurrentIndex(index)

    def _strategy(self) -> Any:
        name = self.combo_strategy.currentData()
        return strategy_class(name) if name in STRATEGIES else None

    def take(self, raw: dict[str, dict[str, Any]]) -> None:
        self.bindings.take(raw)
        p = raw["parallel"]
        p["device"] = self.combo_device.currentData()
        cls = self._strategy()
        reads_rates = cls is not None and "parallel.sweep_lr" in cls.own_keys
        p["sweep_lr"] = parse_list(self.edit_sweep_lr.text(), float) if reads_rates else []

    def update_visibility(self, editable: bool) -> None:
        """Rows the strategy reads; a fixed worker count shown and not editable."""
        cls = self._strategy()
        self.form.setRowVisible(self.edit_sweep_lr, cls is not None and "parallel.sweep_lr" in cls.own_keys)
        fixed = cls.fixed_workers if cls is not None else 0
        if fixed and self.spin_workers.value() != fixed:
            self.spin_workers.setValue(fixed)  # e.g. "single" means one worker; the config rejects more
        self.spin_workers.setEnabled(not fixed and editable)
        self.combo_strategy.setToolTip(cls.description if cls is not None else "")
