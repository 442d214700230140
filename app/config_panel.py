"""The configuration panel: every Config key as a widget, and back.

``config()`` builds a validated :class:`core.config.Config` (it raises
ConfigError with the engine's own one-line message), ``set_config()`` shows
one. Values the widgets cannot show exactly (a spin box rounds) are kept
from the loaded config unless the user changes them, so Open then Save
writes the same TOML.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QIcon, QImage, QPixmap
from PySide6.QtWidgets import (
    QAbstractSpinBox, QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QGroupBox,
    QHBoxLayout, QHeaderView, QLabel, QLineEdit, QMenu, QPushButton, QSizePolicy, QSpinBox, QStackedWidget,
    QTableWidget, QTableWidgetItem, QToolButton, QVBoxLayout, QWidget,
)

from app.tasks import BackgroundCalls
from app.tuning_group import TuningGroup
from core.config import (
    ACTIVATIONS, BOUNDS, COLUMN_KINDS, MODEL_KINDS, OPTIMIZERS, STRATEGIES, Config, ConfigError, from_dict, to_dict,
)
from core.data import BUILTIN_DATASETS
from core.strategies import strategy_class

THUMB = 32  # preview thumbnail size in pixels
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


def _float_text(value: float) -> str:
    return repr(float(value))


def _parse_number(text: str) -> Any:
    """A float from the text, or the text itself so the config error quotes what was typed."""
    try:
        value = float(text.strip())
    except ValueError:
        return text.strip()
    return value if math.isfinite(value) else text.strip()


def _parse_list(text: str, kind: Callable[[str], Any]) -> Any:
    parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    try:
        return [kind(p) for p in parts]
    except ValueError:
        return text.strip()


def _list_text(values: tuple[Any, ...]) -> str:
    return ", ".join(_float_text(v) if isinstance(v, float) else str(v) for v in values)


def _spin(key: str, name: str, tip: str = "") -> QSpinBox:
    """A spin box for the integer config key ("section.key"), with the engine's range."""
    lo, hi, _ = BOUNDS[key]
    w = QSpinBox(objectName=name)
    w.setRange(int(lo), int(hi))
    w.setGroupSeparatorShown(True)
    w.setToolTip(tip)
    w.setStepType(QAbstractSpinBox.StepType.AdaptiveDecimalStepType)
    return w


def _dspin(key: str, decimals: int, step: float, name: str, tip: str = "") -> QDoubleSpinBox:
    """A spin box for the number config key ("section.key"), with the engine's range."""
    lo, hi, _ = BOUNDS[key]  # the keys shown this way have a closed range
    w = QDoubleSpinBox(objectName=name)
    w.setRange(lo, hi)
    w.setDecimals(decimals)
    w.setSingleStep(step)
    w.setToolTip(tip)
    return w


# The keys a paused run accepts (core.workers.LIVE_KEYS) and a fork may change (optim.*, train.*).
LIVE_KEYS = ("optim.lr", "optim.weight_decay", "train.batch_size", "train.epochs")
MODES = ("edit", "locked", "live", "view")


class ConfigPanel(QWidget):
    """All settings of a run. Emits ``changed`` on every edit.

    Modes: ``edit`` (everything editable), ``locked`` (a run is starting or
    running), ``live`` (a paused run: only LIVE_KEYS), ``view`` (a past run's
    settings, read-only except what Fork and Continue run may change, until
    "Use these settings").
    """

    changed = Signal()
    browse_requested = Signal(str)  # "csv" | "npz" | "images" | "custom" (the window owns file dialogs)
    mode_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._base = Config()
        self._shown: dict[str, Any] = {}  # spin values as displayed for the loaded config
        self._loading = False
        self._calls = BackgroundCalls(self)
        self._info_cache: dict[tuple[str, str, int], Any] = {}
        self._describe_key: tuple[str, str, int] | None = None
        self._params_key: Any = None
        self._refresh_timer = QTimer(self, singleShot=True, interval=150)  # debounce typing
        self._refresh_timer.timeout.connect(self._on_refresh_info)

        self.mode = "edit"
        self._own_config: Config | None = None  # the user's settings while a run's are shown
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(8)
        layout.addWidget(self._build_view_header())
        layout.addWidget(self._build_data_group())
        layout.addWidget(self._build_model_group())
        # The order of the decisions: what data, what model, how many processes, then details.
        layout.addWidget(self._build_parallel_group())
        layout.addWidget(self._build_training_group())
        self.tuning = TuningGroup()
        self.tuning.augment_preview_requested.connect(self.show_augment_preview)
        self.augment_preview: Any = None  # the open AugmentPreviewDialog, if any
        self._images: tuple[Any, ...] = ()  # the chosen data set's sample images, as described
        layout.addWidget(self.tuning)
        self.label_config_error = QLabel(objectName="label_config_error")
        self.label_config_error.setWordWrap(True)
        self.label_config_error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label_config_error.hide()
        layout.addWidget(self.label_config_error)
        layout.addStretch(1)

        for w in self.findChildren(QWidget):
            self._connect_change(w)
        self.combo_dataset.currentIndexChanged.connect(self._on_source_changed)
        self.set_config(Config())

    def _build_view_header(self) -> QWidget:
        self.frame_view = QGroupBox(objectName="frame_run_settings")
        row = QVBoxLayout(self.frame_view)
        row.setContentsMargins(6, 4, 6, 4)
        self.label_view = QLabel(objectName="label_run_settings")
        self.label_view.setWordWrap(True)
        buttons = QHBoxLayout()
        self.button_use_settings = QPushButton("Use these settings", objectName="button_use_settings")
        self.button_use_settings.setToolTip("Make the shown run's settings yours, to edit and Start")
        self.button_use_settings.clicked.connect(self.use_shown_config)
        self.button_my_settings = QPushButton("Back to mine", objectName="button_my_settings")
        self.button_my_settings.setToolTip("Show your own settings again")
        self.button_my_settings.clicked.connect(self.restore_own_config)
        buttons.addWidget(self.button_use_settings)
        buttons.addWidget(self.button_my_settings)
        buttons.addStretch(1)
        row.addWidget(self.label_view)
        row.addLayout(buttons)
        self.frame_view.hide()
        return self.frame_view

    # -- modes -------------------------------------------------------------------
    def _inputs(self) -> list[QWidget]:
        kinds = (QComboBox, QSpinBox, QDoubleSpinBox, QCheckBox, QToolButton)
        out = []
        for w in self.findChildren(QWidget):
            if isinstance(w, kinds) or (isinstance(w, QLineEdit)
                                        and not isinstance(w.parent(), (QSpinBox, QDoubleSpinBox, QComboBox))):
                out.append(w)
        return out

    def live_widgets(self) -> dict[str, QWidget]:
        return {"optim.lr": self.edit_lr, "optim.weight_decay": self.edit_weight_decay,
                "train.batch_size": self.spin_batch_size, "train.epochs": self.spin_epochs}

    def set_mode(self, mode: str) -> None:
        """See the class docstring."""
        assert mode in MODES, mode
        self.mode = mode
        super().setEnabled(mode != "locked")
        if mode == "live":
            allowed = set(self.live_widgets().values())
        elif mode == "view":
            allowed = set(self.live_widgets().values())
        else:
            allowed = None
        for w in self._inputs():
            if w.parent() is self.frame_view or w in (self.button_use_settings, self.button_my_settings):
                continue
            w.setEnabled(allowed is None or w in allowed)
        self.frame_view.setVisible(mode == "view")
        if mode == "edit":
            self._update_visibility()
        self.mode_changed.emit(mode)

    def show_run_config(self, cfg: Config, run_name: str) -> None:
        """Show a past run's settings, read-only (until use_shown_config); the user's are kept aside."""
        if self.mode != "view":
            try:
                self._own_config = self.config()
            except ConfigError:
                self._own_config = self._base
        self.set_config(cfg)
        self.label_view.setText(f"Settings of <b>{run_name}</b>. Fork and Continue run use the learning rate, "
                                "weight decay, batch size and epochs shown here.")
        self.set_mode("view")

    @property
    def showing_run_config(self) -> bool:
        """The panel shows a run's settings; the user's own are kept aside (``own_config``)."""
        return self._own_config is not None

    def own_config(self) -> Config | None:
        """The user's own settings: those kept aside while a run's are shown, else those shown."""
        if self._own_config is not None:
            return self._own_config
        try:
            return self.config()
        except ConfigError:
            return None

    def use_shown_config(self) -> None:
        self._own_config = None
        self.set_mode("edit")

    def restore_own_config(self) -> None:
        own, self._own_config = self._own_config, None
        if own is not None:
            self.set_config(own)
        self.set_mode("edit")

    def live_changes(self, current: Config) -> dict[str, Any]:
        """The LIVE_KEYS whose shown values differ from ``current`` (raises ConfigError on a bad value)."""
        shown = self.config()
        out = {}
        for key in LIVE_KEYS:
            section, name = key.split(".")
            new, old = getattr(getattr(shown, section), name), getattr(getattr(current, section), name)
            if new != old:
                out[key] = new
        return out

    # -- building --------------------------------------------------------------
    def _form(self, title: str) -> tuple[QGroupBox, QFormLayout]:
        box = QGroupBox(title)
        form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setHorizontalSpacing(10)
        form.setVerticalSpacing(4)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return box, form

    def _build_data_group(self) -> QGroupBox:
        box, form = self._form("Data")
        self.combo_dataset = QComboBox(objectName="combo_dataset")
        self.combo_dataset.setToolTip("A built-in dataset, or a CSV/NPZ file or image folder (…)")
        for name in BUILTIN_DATASETS:
            self.combo_dataset.addItem(name, f"builtin:{name}")
        self.combo_dataset.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        browse = QToolButton(objectName="button_browse_data")
        browse.setText("…")
        self.button_browse_data = browse
        browse.setToolTip("Use a CSV file, an NPZ file or a folder of images (one sub-folder per class)")
        browse.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(browse)
        menu.addAction("CSV file…", lambda: self.browse_requested.emit("csv"))
        menu.addAction("NPZ file…", lambda: self.browse_requested.emit("npz"))
        menu.addAction("Image folder…", lambda: self.browse_requested.emit("images"))
        menu.addSeparator()
        self.action_remove_source = menu.addAction("Remove this source from the list", self.remove_current_source)
        self.action_remove_source.setObjectName("action_remove_source")
        menu.aboutToShow.connect(lambda: self.action_remove_source.setEnabled(
            not str(self.combo_dataset.currentData() or "").startswith("builtin:")))
        browse.setMenu(menu)
        row = QHBoxLayout()
        row.setSpacing(4)
        row.addWidget(self.combo_dataset, 1)
        row.addWidget(browse)
        form.addRow("Dataset", row)

        self.label_dataset_summary = QLabel(objectName="label_dataset_summary")
        self.label_dataset_summary.setWordWrap(True)
        form.addRow(self.label_dataset_summary)
        self.preview = QStackedWidget(objectName="preview")
        self.preview_images = QWidget(objectName="preview_images")
        self._thumbs_layout = QHBoxLayout(self.preview_images)
        self._thumbs_layout.setContentsMargins(0, 0, 0, 0)
        self._thumbs_layout.setSpacing(3)
        self.table_preview = QTableWidget(objectName="table_preview")
        self.table_preview.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table_preview.verticalHeader().hide()
        self.table_preview.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table_preview.setFixedHeight(118)
        self.preview.addWidget(self.preview_images)
        self.preview.addWidget(self.table_preview)
        form.addRow(self.preview)

        # A table's columns as the engine's schema sees them; the kind combo writes data.columns.
        self.table_columns = QTableWidget(0, 4, objectName="table_columns")
        self.table_columns.setHorizontalHeaderLabels(["Column", "Kind", "Missing", "Levels / why"])
        self.table_columns.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table_columns.verticalHeader().hide()
        self.table_columns.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table_columns.horizontalHeader().setStretchLastSection(True)
        self.table_columns.setFixedHeight(140)
        self.table_columns.setToolTip("Each column's kind as inferred; pick another to set it in data.columns")
        self.table_columns.hide()
        form.addRow(self.table_columns)
        self._column_overrides: dict[str, str] = {}  # data.columns as the panel will write it
        self._columns_of: tuple[str, str] | None = None  # (source, target) the column list shows

        self.edit_target = QLineEdit(objectName="edit_target")
        self.edit_target.setToolTip("The table column holding the target: class labels or numbers")
        self.label_target_task = QLabel(objectName="label_target_task")
        self.label_target_task.setToolTip("The task the target implies (train.task = \"auto\")")
        target_row = QHBoxLayout()
        target_row.setSpacing(6)
        target_row.addWidget(self.edit_target, 1)
        target_row.addWidget(self.label_target_task)
        self._target_row = QWidget()
        self._target_row.setLayout(target_row)
        target_row.setContentsMargins(0, 0, 0, 0)
        form.addRow("Target column", self._target_row)
        self.spin_image_size = _spin("data.image_size", "spin_image_size", "Resize images to SIZE×SIZE; 0 keeps the first image's size")
        self.spin_image_size.setSpecialValueText("original")
        form.addRow("Image size", self.spin_image_size)
        self.spin_val_fraction = _dspin("data.val_fraction", 2, 0.05, "spin_val_fraction", "Share of samples held out for validation")
        form.addRow("Validation share", self.spin_val_fraction)
        self.spin_loader_workers = _spin("data.loader_workers", "spin_loader_workers", "DataLoader processes per worker decoding images (0 = in the worker)")
        form.addRow("Loader processes", self.spin_loader_workers)
        self.check_standardize = QCheckBox("Standardize features", objectName="check_standardize")
        form.addRow("", self.check_standardize)
        self._data_form = form
        return box

    def _build_model_group(self) -> QGroupBox:
        box, form = self._form("Model")
        self.combo_model = QComboBox(objectName="combo_model")
        for kind, label in zip(MODEL_KINDS, ("Linear", "MLP", "CNN")):
            self.combo_model.addItem(label, kind)
        self.combo_model.addItem("Custom (Python file)…", "custom")
        form.addRow("Model", self.combo_model)
        self.edit_custom_model = QLineEdit(objectName="edit_custom_model")
        self.edit_custom_model.setPlaceholderText("path/to/model.py:build")
        self.edit_custom_model.setToolTip("A Python file and a function (input_shape, num_classes) -> nn.Module")
        custom_browse = QToolButton(objectName="button_browse_model")
        custom_browse.setText("…")
        custom_browse.setToolTip("Choose the Python file")
        self.button_browse_model = custom_browse
        custom_browse.clicked.connect(lambda: self.browse_requested.emit("custom"))
        row = QHBoxLayout()
        row.setSpacing(4)
        row.addWidget(self.edit_custom_model, 1)
        row.addWidget(custom_browse)
        form.addRow("File:function", row)
        self._custom_row = row
        self.edit_hidden = QLineEdit(objectName="edit_hidden")
        self.edit_hidden.setToolTip("Widths of the hidden layers, e.g. 256, 256")
        form.addRow("Hidden layers", self.edit_hidden)
        self.edit_channels = QLineEdit(objectName="edit_channels")
        self.edit_channels.setToolTip("Channels of the convolution blocks, e.g. 16, 32")
        form.addRow("Conv channels", self.edit_channels)
        self.combo_activation = QComboBox(objectName="combo_activation")
        self.combo_activation.addItems(list(ACTIVATIONS))
        form.addRow("Activation", self.combo_activation)
        self.spin_dropout = _dspin("model.dropout", 2, 0.05, "spin_dropout")
        form.addRow("Dropout", self.spin_dropout)
        self.label_model_params = QLabel(objectName="label_model_params")
        form.addRow(self.label_model_params)
        self._model_form = form
        return box

    def _build_training_group(self) -> QGroupBox:
        box, form = self._form("Training")
        self.combo_optimizer = QComboBox(objectName="combo_optimizer")
        for name, label in zip(OPTIMIZERS, ("SGD", "Adam", "AdamW")):
            self.combo_optimizer.addItem(label, name)
        form.addRow("Optimizer", self.combo_optimizer)
        self.edit_lr = QLineEdit(objectName="edit_lr")
        self.edit_lr.setToolTip("Learning rate, e.g. 0.05 or 1e-3")
        form.addRow("Learning rate", self.edit_lr)
        self.spin_momentum = _dspin("optim.momentum", 3, 0.05, "spin_momentum", "SGD momentum")
        form.addRow("Momentum", self.spin_momentum)
        self.edit_weight_decay = QLineEdit(objectName="edit_weight_decay")
        form.addRow("Weight decay", self.edit_weight_decay)
        self.spin_epochs = _spin("train.epochs", "spin_epochs", "Passes over the training data")
        form.addRow("Epochs", self.spin_epochs)
        self.spin_batch_size = _spin("train.batch_size", "spin_batch_size", "Samples per optimizer step, per worker")
        form.addRow("Batch size", self.spin_batch_size)
        self.spin_seed = _spin("train.seed", "spin_seed", "Random seed (worker i uses seed + i)")
        form.addRow("Seed", self.spin_seed)
        self._train_form = form
        return box

    def _build_parallel_group(self) -> QGroupBox:
        box, form = self._form("Parallel")
        self.combo_strategy = QComboBox(objectName="combo_strategy")
        for name in STRATEGIES:
            self.combo_strategy.addItem(name, name)
            self.combo_strategy.setItemData(self.combo_strategy.count() - 1, strategy_class(name).description,
                                            Qt.ItemDataRole.ToolTipRole)
        form.addRow("Strategy", self.combo_strategy)
        self.spin_workers = _spin("parallel.workers", "spin_workers", "Training processes")
        form.addRow("Workers", self.spin_workers)
        self.spin_threads = _spin("parallel.threads_per_worker", "spin_threads", "Torch threads in each worker; automatic shares the cores")
        self.spin_threads.setSpecialValueText("automatic")
        form.addRow("Threads / worker", self.spin_threads)
        self.combo_device = QComboBox(objectName="combo_device")
        for dev in available_devices():
            self.combo_device.addItem(dev, dev)
        form.addRow("Device", self.combo_device)
        self.edit_sweep_lr = QLineEdit(objectName="edit_sweep_lr")
        self.edit_sweep_lr.setPlaceholderText("one per worker, e.g. 0.1, 0.05")
        self.edit_sweep_lr.setToolTip("Sweep: one learning rate per worker; empty = the same rate, different seeds")
        form.addRow("Sweep rates", self.edit_sweep_lr)
        self._parallel_form = form
        return box

    def _connect_change(self, w: QWidget) -> None:
        signal = None
        if isinstance(w, QComboBox):
            signal = w.currentIndexChanged
        elif isinstance(w, (QSpinBox, QDoubleSpinBox)):
            signal = w.valueChanged
        elif isinstance(w, QLineEdit) and not isinstance(w.parent(), (QSpinBox, QDoubleSpinBox, QComboBox)):
            signal = w.textChanged
        elif isinstance(w, QCheckBox):
            signal = w.toggled
        if signal is not None:
            signal.connect(self._on_widget_changed)

    # -- Config <-> widgets ------------------------------------------------------
    def set_config(self, cfg: Config) -> None:
        self._loading = True
        try:
            self._base = cfg
            d, m, o, t, p = cfg.data, cfg.model, cfg.optim, cfg.train, cfg.parallel
            self._select_source(d.source)
            self.edit_target.setText(d.target)
            self._column_overrides = dict(d.columns)
            self.spin_image_size.setValue(d.image_size)
            self.spin_val_fraction.setValue(d.val_fraction)
            self.spin_loader_workers.setValue(d.loader_workers)
            self.check_standardize.setChecked(d.standardize)
            custom = m.kind.startswith("custom:")
            self.combo_model.setCurrentIndex(self.combo_model.findData("custom" if custom else m.kind))
            self.edit_custom_model.setText(m.kind[len("custom:"):] if custom else "")
            self.edit_hidden.setText(_list_text(m.hidden))
            self.edit_channels.setText(_list_text(m.channels))
            self.combo_activation.setCurrentText(m.activation)
            self.spin_dropout.setValue(m.dropout)
            self.combo_optimizer.setCurrentIndex(self.combo_optimizer.findData(o.name))
            self.edit_lr.setText(_float_text(o.lr))
            self.spin_momentum.setValue(o.momentum)
            self.edit_weight_decay.setText(_float_text(o.weight_decay))
            self.spin_epochs.setValue(t.epochs)
            self.spin_batch_size.setValue(t.batch_size)
            self.spin_seed.setValue(t.seed)
            self.combo_strategy.setCurrentIndex(self.combo_strategy.findData(p.strategy))
            self.spin_workers.setValue(p.workers)
            self.spin_threads.setValue(p.threads_per_worker)
            self._select_device(p.device)
            self.edit_sweep_lr.setText(_list_text(p.sweep_lr))
            self.tuning.show_config(cfg)
            self._shown = {"val_fraction": self.spin_val_fraction.value(), "dropout": self.spin_dropout.value(),
                           "momentum": self.spin_momentum.value()}
        finally:
            self._loading = False
        self._update_visibility()
        self.show_error("")
        self._refresh_timer.start()

    def _select_source(self, source: str) -> None:
        index = self.combo_dataset.findData(source)
        if index < 0:
            self.add_source(source, select=False)
            index = self.combo_dataset.findData(source)
        self.combo_dataset.setCurrentIndex(index)

    def add_source(self, source: str, select: bool = True) -> None:
        """Add a csv:/npz:/images: source to the dataset picker (once)."""
        if self.combo_dataset.findData(source) < 0:
            scheme, _, rest = source.partition(":")
            self.combo_dataset.addItem(f"{Path(rest).name or rest} ({scheme})", source)
            self.combo_dataset.setItemData(self.combo_dataset.count() - 1, source, Qt.ItemDataRole.ToolTipRole)
        if select:
            self.combo_dataset.setCurrentIndex(self.combo_dataset.findData(source))

    def remove_current_source(self) -> None:
        """Drop a file/folder source from the picker (e.g. one that failed); built-in ones stay."""
        index = self.combo_dataset.currentIndex()
        if index < 0 or str(self.combo_dataset.itemData(index)).startswith("builtin:"):
            return
        self.combo_dataset.setCurrentIndex(0)
        self.combo_dataset.removeItem(index)

    def _select_device(self, device: str) -> None:
        index = self.combo_device.findData(device)
        if index < 0:
            # Keep a loaded config's device so Save writes it back; Start will say it is missing.
            self.combo_device.addItem(f"{device} (not on this machine)", device)
            index = self.combo_device.count() - 1
        self.combo_device.setCurrentIndex(index)

    def config(self) -> Config:
        """The config the widgets show; raises ConfigError naming the bad key."""
        raw = to_dict(self._base)
        d, m, o, t, p = (raw[k] for k in ("data", "model", "optim", "train", "parallel"))
        d["source"] = self.combo_dataset.currentData()
        d["target"] = self.edit_target.text().strip()
        d["columns"] = {k: v for k, v in self._column_overrides.items() if k != d["target"]}
        d["image_size"] = self.spin_image_size.value()
        self._take_spin(d, "val_fraction", self.spin_val_fraction)
        d["loader_workers"] = self.spin_loader_workers.value()
        d["standardize"] = self.check_standardize.isChecked()
        kind = self.combo_model.currentData()
        m["kind"] = f"custom:{self.edit_custom_model.text().strip()}" if kind == "custom" else kind
        m["hidden"] = _parse_list(self.edit_hidden.text(), int)
        m["channels"] = _parse_list(self.edit_channels.text(), int)
        m["activation"] = self.combo_activation.currentText()
        self._take_spin(m, "dropout", self.spin_dropout)
        o["name"] = self.combo_optimizer.currentData()
        o["lr"] = _parse_number(self.edit_lr.text())
        self._take_spin(o, "momentum", self.spin_momentum)
        o["weight_decay"] = _parse_number(self.edit_weight_decay.text())
        t["epochs"] = self.spin_epochs.value()
        t["batch_size"] = self.spin_batch_size.value()
        t["seed"] = self.spin_seed.value()
        p["strategy"] = self.combo_strategy.currentData()
        p["workers"] = self.spin_workers.value()
        p["threads_per_worker"] = self.spin_threads.value()
        p["device"] = self.combo_device.currentData()
        reads_rates = "parallel.sweep_lr" in strategy_class(p["strategy"]).own_keys
        p["sweep_lr"] = _parse_list(self.edit_sweep_lr.text(), float) if reads_rates else []
        self.tuning.take(raw)
        return from_dict(raw)

    def _take_spin(self, section: dict[str, Any], key: str, spin: QDoubleSpinBox) -> None:
        # A spin box rounds to its decimals: keep the loaded exact value unless the user moved it.
        if spin.value() != self._shown.get(key):
            section[key] = spin.value()

    def try_config(self) -> Config | None:
        """The config, or None after showing its error under the panel."""
        try:
            cfg = self.config()
        except ConfigError as exc:
            self.show_error(str(exc))
            return None
        self.show_error("")
        return cfg

    def show_error(self, message: str) -> None:
        self.label_config_error.setText(message)
        self.label_config_error.setVisible(bool(message))

    # -- reactions -------------------------------------------------------------
    def _on_widget_changed(self, *_args: Any) -> None:
        if self._loading:
            return
        self._update_visibility()
        self.show_error("")
        self._refresh_timer.start()
        self.changed.emit()

    def _update_visibility(self) -> None:
        source = str(self.combo_dataset.currentData() or "")
        kind = self.combo_model.currentData()
        strategy = self.combo_strategy.currentData()
        table = source.startswith(("csv:", "parquet:"))
        self._data_form.setRowVisible(self._target_row, table)
        self._data_form.setRowVisible(self.table_columns, table and self.table_columns.rowCount() > 0)
        self._data_form.setRowVisible(self.spin_image_size, source.startswith("images:"))
        self._data_form.setRowVisible(self.spin_loader_workers, source.startswith("images:"))
        self._model_form.setRowVisible(self._custom_row, kind == "custom")
        self._model_form.setRowVisible(self.edit_hidden, kind == "mlp")
        self._model_form.setRowVisible(self.edit_channels, kind == "cnn")
        self._model_form.setRowVisible(self.combo_activation, kind in ("mlp", "cnn"))
        self._model_form.setRowVisible(self.spin_dropout, kind in ("mlp", "cnn"))
        self._train_form.setRowVisible(self.spin_momentum, self.combo_optimizer.currentData() == "sgd")
        cls = strategy_class(strategy) if strategy in STRATEGIES else None
        self._parallel_form.setRowVisible(self.edit_sweep_lr, cls is not None and "parallel.sweep_lr" in cls.own_keys)
        fixed = cls.fixed_workers if cls is not None else 0
        if fixed and self.spin_workers.value() != fixed:
            self.spin_workers.setValue(fixed)  # e.g. "single" means one worker; the config rejects more
        self.spin_workers.setEnabled(not fixed and self.isEnabled() and self.mode == "edit")
        self.combo_strategy.setToolTip(cls.description if cls is not None else "")

    def setEnabled(self, enabled: bool) -> None:  # noqa: N802 - Qt override
        super().setEnabled(enabled)
        if enabled and self.mode == "edit":
            self._update_visibility()

    # -- dataset description and parameter count (background) --------------------
    def _describe_key_now(self) -> tuple[Any, ...]:
        source = str(self.combo_dataset.currentData() or "")
        target = self.edit_target.text().strip() or "label"
        columns: tuple[tuple[str, str], ...] = ()
        if source.startswith(("csv:", "parquet:")):
            columns = tuple(sorted((k, v) for k, v in self._column_overrides.items() if k != target))
        return (source, target, self.spin_image_size.value(), self._base.train.task, columns)

    def _on_refresh_info(self) -> None:
        key = self._describe_key_now()
        info = self._info_cache.get(key)
        if info is not None:
            self._show_info(info)
            self._refresh_params(info)
            return
        if key == self._describe_key:
            return  # already being described
        self._describe_key = key
        self.label_dataset_summary.setText("Reading the dataset…")
        self.label_model_params.setText("")

        def describe() -> Any:
            from core.data import describe_source

            source, target, size, task, columns = key
            return describe_source(source, target, size, task=task, columns=dict(columns))

        self._calls.call(describe, lambda info: self._on_described(key, info),
                         lambda exc: self._on_describe_failed(key, exc), name="describe-source")

    def _on_described(self, key: tuple[Any, ...], info: Any) -> None:
        self._info_cache[key] = info
        if key == self._describe_key:
            self._describe_key = None
            self._on_refresh_info()

    def _on_describe_failed(self, key: tuple[Any, ...], exc: BaseException) -> None:
        if key != self._describe_key:
            return
        self._describe_key = None
        self._params_key = None  # a valid dataset picked again counts its parameters again
        self.label_dataset_summary.setText(f"⚠ {exc}")
        self.label_model_params.setText("")
        self._clear_preview()
        if key[:2] != self._columns_of:  # the same table with a kind the engine refuses: its list stays to undo it
            self._show_columns(None)

    def _show_info(self, info: Any) -> None:
        text, listed = info.summary, f"; columns: {info.columns_summary}"
        if info.columns_summary and text.endswith(listed):
            text = text[:-len(listed)]  # the column list below shows each column
        self.label_dataset_summary.setText(text)
        self._clear_preview()
        self._show_columns(info)
        self._images = tuple(info.preview_images)
        self.tuning.set_images_available(bool(self._images))
        if info.preview_images:
            for array, label in info.preview_images[:8]:
                thumb = QLabel()
                thumb.setPixmap(_pixmap(array, THUMB))
                thumb.setToolTip(str(label))
                thumb.setFixedSize(THUMB, THUMB)
                self._thumbs_layout.addWidget(thumb)
            self._thumbs_layout.addStretch(1)
            self.preview.setCurrentWidget(self.preview_images)
            self.preview.setFixedHeight(THUMB + 2)
        elif info.preview_rows:
            names = list(info.feature_names) or [f"x{i}" for i in range(len(info.preview_rows[0]) - 1)]
            shown = min(len(names), 6)
            headers = names[:shown] + (["…"] if len(names) > shown else []) + ["class"]
            self.table_preview.setColumnCount(len(headers))
            self.table_preview.setRowCount(len(info.preview_rows))
            self.table_preview.setHorizontalHeaderLabels(headers)
            for r, row in enumerate(info.preview_rows):
                cells = [f"{v:.3g}" if isinstance(v, (int, float)) else str(v) for v in row[:shown]] \
                    + (["…"] if len(names) > shown else []) + [str(row[-1])]  # a table's text cells as they are
                for c, text in enumerate(cells):
                    self.table_preview.setItem(r, c, QTableWidgetItem(text))
            self.preview.setCurrentWidget(self.table_preview)
            self.preview.setFixedHeight(self.table_preview.height())
        self.preview.setVisible(bool(info.preview_images or info.preview_rows))

    def _show_columns(self, info: Any) -> None:
        """One row per table column from the schema describe_source fitted: a kind combo, missing cells,
        levels (or why it is ignored); and the task the target implies beside the target chooser."""
        columns = list(((info.schema or {}).get("columns") or []) if info is not None else [])
        self._columns_of = self._describe_key_now()[:2] if columns else None
        self.table_columns.setRowCount(0)
        self.table_columns.setRowCount(len(columns))
        for r, col in enumerate(columns):
            name, kind = str(col["name"]), str(col["kind"])
            self.table_columns.setItem(r, 0, QTableWidgetItem(name))
            combo = QComboBox(objectName=f"combo_column_kind_{r}")
            combo.addItems(list(COLUMN_KINDS))
            combo.setCurrentText(kind)
            combo.setProperty("column", name)
            combo.setToolTip("set in data.columns" if name in self._column_overrides else "inferred")
            combo.setEnabled(self.mode == "edit")  # a run's settings, shown or running, are not edited here
            combo.currentTextChanged.connect(lambda k, n=name: self._on_column_kind(n, k))
            self.table_columns.setCellWidget(r, 1, combo)
            self.table_columns.setItem(r, 2, QTableWidgetItem(str(int(col.get("missing", 0)))))
            if kind == "category":
                detail = str(len(col.get("levels", [])))
            else:
                detail = str(col.get("reason", "")) if kind == "ignore" else ""
            self.table_columns.setItem(r, 3, QTableWidgetItem(detail))
        table = info is not None and info.schema is not None
        self._data_form.setRowVisible(self.table_columns, bool(columns))
        if not table:
            self.label_target_task.setText("")
        elif info.task == "regression":
            why = next((m for _lvl, m in info.notes if m.startswith("task: ")), "")
            reason = why.partition("(")[2].rstrip(")") if "(" in why else ""
            self.label_target_task.setText("regression" + (f": {reason}" if reason else ""))
        else:
            self.label_target_task.setText(f"classification: {info.num_classes} classes")

    def column_kinds(self) -> dict[str, str]:
        """Each listed column's kind as its combo shows it."""
        out = {}
        for r in range(self.table_columns.rowCount()):
            combo = self.table_columns.cellWidget(r, 1)
            out[str(combo.property("column"))] = combo.currentText()
        return out

    def _on_source_changed(self, *_args: Any) -> None:
        if not self._loading:
            self._column_overrides = {}  # another table's column names would not apply

    def _on_column_kind(self, name: str, kind: str) -> None:
        if self._loading or self.mode != "edit":
            return
        self._column_overrides[name] = kind
        self._on_widget_changed()

    def _clear_preview(self) -> None:
        self._images = ()
        self.tuning.set_images_available(False)
        while self._thumbs_layout.count():
            item = self._thumbs_layout.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        self.table_preview.clear()
        self.table_preview.setRowCount(0)
        self.preview.hide()

    def show_augment_preview(self) -> None:
        """A dialog with augmented copies of the data set's sample images, under the panel's [augment]."""
        cfg = self.try_config()
        if cfg is None or not self._images:
            return
        from app.augment_preview import AugmentPreviewDialog

        if self.augment_preview is not None:
            self.augment_preview.close()
        self.augment_preview = AugmentPreviewDialog(cfg.augment, self._images, self)
        self.augment_preview.show()

    def _refresh_params(self, info: Any) -> None:
        try:
            model_cfg = self.config().model
        except ConfigError:
            self.label_model_params.setText("")
            return
        key = (model_cfg, info.input_shape, info.num_classes, info.image_shape)
        if key == self._params_key:
            return
        self._params_key = key

        def count() -> int:
            from core.models import build_model, count_parameters

            return count_parameters(build_model(model_cfg, info.input_shape, info.num_classes, info.image_shape))

        def done(n: int) -> None:
            if key == self._params_key:
                self.label_model_params.setText(f"{n:,} parameters")

        def failed(exc: BaseException) -> None:
            if key == self._params_key:
                self.label_model_params.setText(f"⚠ {exc}")

        self.label_model_params.setText("Counting parameters…")
        self._calls.call(count, done, failed, name="count-parameters")

    def set_icons(self, folder: QIcon) -> None:
        for button in (self.button_browse_data, self.button_browse_model):
            button.setIcon(folder)
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonIconOnly)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Wait for background description jobs (at window close)."""
        self._refresh_timer.stop()
        self._calls.forget_all()
        self._calls.wait_all(timeout_s)
        if self.augment_preview is not None:
            self.augment_preview.wait(timeout_s)

    # -- what the window asks of the panel ---------------------------------------------------------
    def epochs(self) -> int:
        """The epochs shown: what a continued or forked run trains up to."""
        return self.spin_epochs.value()

    def watch_epochs(self, slot: Callable[[int], Any]) -> None:
        self.spin_epochs.valueChanged.connect(slot)

    def set_lr(self, lr: float) -> None:
        self.edit_lr.setText(f"{lr:.6g}")

    def config_error(self) -> str:
        """Why the shown settings are not a config ("" when they are)."""
        return self.label_config_error.text()

    def dataset_summary(self) -> str:
        return self.label_dataset_summary.text()

    def choose_custom_model_file(self, path: str) -> None:
        """Build the model with ``path``'s build_model, the function's name selected to edit."""
        self.edit_custom_model.setText(f"{path}:build_model")
        self.edit_custom_model.setFocus()
        self.edit_custom_model.setSelection(len(path) + 1, len("build_model"))


def _pixmap(array: np.ndarray, size: int) -> QPixmap:
    a = np.ascontiguousarray(array, dtype=np.uint8)
    if a.ndim == 2:
        image = QImage(a.data, a.shape[1], a.shape[0], a.strides[0], QImage.Format.Format_Grayscale8)
    else:
        image = QImage(a.data, a.shape[1], a.shape[0], a.strides[0], QImage.Format.Format_RGB888)
    # Small images (digits are 8x8) stay crisp scaled up without smoothing.
    return QPixmap.fromImage(image.copy()).scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio,
                                                  Qt.TransformationMode.FastTransformation)
