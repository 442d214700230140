"""The config panel's Model, Parallel and Training groups: their keys as widgets, shown and read back.

Each group binds its keys to widgets built from core.config's field table
(ranges, choices, help) and says which rows the current choices make
relevant. The strategy's own rules (a fixed worker count, keys only it reads)
are asked of its class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import QComboBox, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QToolButton, QWidget

from app.panel.backbone_rows import BackboneRows
from app.panel.fields import Bindings, choice_combo, form_of, parse_list
from app.shell.tasks import BackgroundCalls
from core.config import STRATEGIES, Config
from core.services.runs.shape import strategy_facts


class ModelGroup(QGroupBox):
    """[model]: a built-in kind, a pretrained backbone or a custom file, and the shape of what it builds."""

    browse_requested = Signal(str)  # "custom" | "weights"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Model", parent)
        self.form = form = form_of(self)
        self.combo_model = choice_combo("model.kind", "combo_model", ("Linear", "MLP", "CNN"))
        self.combo_model.setToolTip("")
        form.addRow("Model", self.combo_model)
        self.bindings = b = Bindings()
        self.backbone = BackboneRows(form, self.combo_model, b, lambda: self.browse_requested.emit("weights"))
        self.combo_model.addItem("Custom (Python file)…", "custom")
        self.edit_timm_model, self.combo_weights = self.backbone.edit_timm_model, self.backbone.combo_weights
        self.edit_weights_file, self.button_browse_weights = (
            self.backbone.edit_weights_file,
            self.backbone.button_browse_weights,
        )
        self.combo_finetune, self.spin_backbone_lr_mult = (
            self.backbone.combo_finetune,
            self.backbone.spin_backbone_lr_mult,
        )
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
        self.edit_hidden = b.row(form, "model.hidden", "Hidden layers", name="edit_hidden")
        self.edit_channels = b.row(form, "model.channels", "Conv channels", name="edit_channels")
        self.combo_activation = b.row(form, "model.activation", "Activation", name="combo_activation")
        self.spin_dropout = b.row(form, "model.dropout", "Dropout", name="spin_dropout", decimals=2, step=0.05)
        self.label_model_params = QLabel(objectName="label_model_params")
        self.label_model_params.setWordWrap(True)  # a model's ⚠ line is long: it wraps inside the panel
        form.addRow(self.label_model_params)

    def show_config(self, cfg: Config) -> None:
        kind = cfg.model.kind
        custom = kind.startswith("custom:")
        choice = "custom" if custom else self.backbone.choice_of(kind) or kind
        self.combo_model.setCurrentIndex(self.combo_model.findData(choice))
        self.edit_custom_model.setText(kind[len("custom:") :] if custom else "")
        self.bindings.show(cfg)
        self.backbone.show_config(cfg)

    def take(self, raw: dict[str, dict[str, Any]]) -> None:
        kind = self.combo_model.currentData()
        raw["model"]["kind"] = (
            f"custom:{self.edit_custom_model.text().strip()}" if kind == "custom" else self.backbone.kind(kind) or kind
        )
        self.bindings.take(raw)
        self.backbone.take(raw)

    def choose_weights_file(self, path: str) -> None:
        self.backbone.choose_weights_file(path)

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
        self.backbone.update_visibility()


class TrainingGroup(QGroupBox):
    """[optim] and the main keys of [train]."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Training", parent)
        self.form = form = form_of(self)
        self.bindings = b = Bindings()
        self.combo_optimizer = b.row(
            form, "optim.name", "Optimizer", name="combo_optimizer", labels=("SGD", "Adam", "AdamW")
        )
        self.edit_lr = b.row(form, "optim.lr", "Learning rate", name="edit_lr")
        self.spin_momentum = b.row(form, "optim.momentum", "Momentum", name="spin_momentum", decimals=3, step=0.05)
        self.edit_weight_decay = b.row(form, "optim.weight_decay", "Weight decay", name="edit_weight_decay")
        self.spin_epochs = b.row(form, "train.epochs", "Epochs", name="spin_epochs")
        self.spin_batch_size = b.row(form, "train.batch_size", "Batch size", name="spin_batch_size")
        self.spin_seed = b.row(form, "train.seed", "Seed", name="spin_seed")

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
        self.bindings = b = Bindings()
        self.combo_strategy = b.row(form, "parallel.strategy", "Strategy", name="combo_strategy")
        for i, name in enumerate(STRATEGIES):
            self.combo_strategy.setItemData(i, strategy_facts(name).description, Qt.ItemDataRole.ToolTipRole)
        self.spin_workers = b.row(form, "parallel.workers", "Workers", name="spin_workers")
        self.spin_threads = b.row(form, "parallel.threads_per_worker", "Threads / worker", name="spin_threads")
        self.spin_threads.setSpecialValueText("automatic")
        self.combo_device = QComboBox(objectName="combo_device")
        self.combo_device.addItem("cpu", "cpu")
        self.devices: list[str] | None = None  # this machine's, once listed (torch knows them: off the GUI thread)
        form.addRow("Device", self.combo_device)
        self.edit_sweep_lr = b.row(form, "parallel.sweep_lr", "Sweep rates", name="edit_sweep_lr")
        self.edit_sweep_lr.setPlaceholderText("one per worker, e.g. 0.1, 0.05")

    def show_config(self, cfg: Config) -> None:
        self.bindings.show(cfg)
        self._select_device(cfg.parallel.device)

    def list_devices(self, calls: BackgroundCalls) -> None:
        """List this machine's devices on a thread of ``calls``; a torch that cannot leaves "cpu", which every
        machine has."""
        from core.services.machine import available_devices

        calls.call(available_devices, self.show_devices, lambda _exc: None, name="list-devices")

    def show_devices(self, devices: list[str]) -> None:
        """This machine's devices, listed: the choice stays (marked when this machine has it not)."""
        chosen = str(self.combo_device.currentData())
        self.devices = list(devices)
        with QSignalBlocker(self.combo_device):  # the chosen device stays: nothing changed
            self.combo_device.clear()
            for dev in self.devices:
                self.combo_device.addItem(dev, dev)
            self._select_device(chosen)

    def _select_device(self, device: str) -> None:
        index = self.combo_device.findData(device)
        if index < 0:
            # Keep a loaded config's device so Save writes it back; Start will say it is missing.
            missing = " (not on this machine)" if self.devices is not None else ""
            self.combo_device.addItem(device + missing, device)
            index = self.combo_device.count() - 1
        self.combo_device.setCurrentIndex(index)

    def _strategy(self) -> Any:
        name = self.combo_strategy.currentData()
        return strategy_facts(name) if name in STRATEGIES else None

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
