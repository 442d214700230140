"""Config panel <-> Config <-> TOML round trips (the CLI reads what the GUI saves)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QLineEdit,
    QSpinBox,
    QWidget,
)

from app.panel.fields import Bindings, key_widget
from app.panel.panel import ConfigPanel, live_bindings
from core.config import FIELDS, LIVE_KEYS, Config, from_dict, load_config, to_dict, to_toml

CONFIG_WIDGETS = [
    "combo_dataset",
    "combo_model",
    "combo_strategy",
    "spin_workers",
    "spin_epochs",
    "spin_batch_size",
    "edit_lr",
]


def _wait_idle(qtbot: Any, panel: ConfigPanel) -> None:
    """Let the background dataset description finish (threads must not outlive the test)."""
    qtbot.waitUntil(lambda: not panel._refresh_timer.isActive() and not panel._calls.busy, timeout=20_000)


@pytest.fixture
def panel(qtbot: Any) -> Any:
    p = ConfigPanel()
    qtbot.addWidget(p)
    yield p
    p.shutdown()


def _non_default() -> Config:
    raw = to_dict(Config())
    raw["data"].update(source="builtin:wine", val_fraction=0.123456, standardize=False)
    raw["model"].update(kind="cnn", hidden=[64], activation="gelu", dropout=0.1, channels=[8, 16, 32])
    raw["optim"].update(name="adamw", lr=0.00123, momentum=0.5, weight_decay=1e-7)
    raw["train"].update(epochs=7, batch_size=33, seed=42)
    raw["parallel"].update(strategy="sweep", workers=3, threads_per_worker=2, sweep_lr=[0.1, 0.01, 0.001])
    return from_dict(raw)


def test_contract_object_names_exist(panel: ConfigPanel) -> None:
    for name in CONFIG_WIDGETS:
        assert isinstance(panel.findChild(QWidget, name), (QComboBox, QSpinBox, QLineEdit)), name


def test_default_panel_is_the_default_config(qtbot: Any, panel: ConfigPanel) -> None:
    assert panel.config() == Config()
    _wait_idle(qtbot, panel)


def test_set_config_round_trips_every_key(qtbot: Any, panel: ConfigPanel) -> None:
    cfg = _non_default()
    panel.set_config(cfg)
    assert panel.config() == cfg  # exact, although spin boxes show val_fraction rounded
    _wait_idle(qtbot, panel)


def test_widgets_write_the_config(qtbot: Any, panel: ConfigPanel) -> None:
    panel.combo_dataset.setCurrentIndex(panel.combo_dataset.findData("builtin:iris"))
    panel.combo_model.setCurrentIndex(panel.combo_model.findData("linear"))
    panel.combo_strategy.setCurrentIndex(panel.combo_strategy.findData("ddp"))
    panel.spin_workers.setValue(3)
    panel.spin_epochs.setValue(4)
    panel.spin_batch_size.setValue(16)
    panel.edit_lr.setText("1e-3")
    panel.spin_val_fraction.setValue(0.3)
    cfg = panel.config()
    assert cfg.data.source == "builtin:iris"
    assert cfg.data.val_fraction == pytest.approx(0.3)
    assert cfg.model.kind == "linear"
    assert (cfg.parallel.strategy, cfg.parallel.workers) == ("ddp", 3)
    assert (cfg.train.epochs, cfg.train.batch_size) == (4, 16)
    assert cfg.optim.lr == pytest.approx(0.001)
    _wait_idle(qtbot, panel)


def test_single_strategy_means_one_worker(qtbot: Any, panel: ConfigPanel) -> None:
    panel.spin_workers.setValue(4)
    panel.combo_strategy.setCurrentIndex(panel.combo_strategy.findData("single"))
    assert panel.spin_workers.value() == 1
    assert not panel.spin_workers.isEnabled()
    assert panel.config().parallel.workers == 1
    _wait_idle(qtbot, panel)


@pytest.mark.parametrize(
    "widget, text, key",
    [
        ("edit_lr", "fast", "optim.lr"),
        ("edit_lr", "-1", "optim.lr"),
        ("edit_hidden", "64, x", "model.hidden"),
    ],
)
def test_bad_values_name_the_key(qtbot: Any, panel: ConfigPanel, widget: str, text: str, key: str) -> None:
    getattr(panel, widget).setText(text)
    assert panel.try_config() is None
    assert panel.label_config_error.isVisibleTo(panel)
    assert key in panel.label_config_error.text()
    getattr(panel, widget).setText("0.1" if widget == "edit_lr" else "64")
    assert not panel.label_config_error.isVisibleTo(panel)  # editing clears the message
    _wait_idle(qtbot, panel)


def test_unknown_device_of_a_loaded_config_is_kept(qtbot: Any, panel: ConfigPanel) -> None:
    cfg = Config().replace("parallel", device="cuda:7", strategy="ddp")
    panel.set_config(cfg)
    assert panel.config().parallel.device == "cuda:7"
    _wait_idle(qtbot, panel)


def test_dataset_summary_and_parameter_count(qtbot: Any, panel: ConfigPanel) -> None:
    qtbot.waitUntil(
        lambda: re.fullmatch(r"[\d,]+ parameters", panel.label_model_params.text()) is not None, timeout=20_000
    )
    assert "1,797 samples" in panel.label_dataset_summary.text()
    assert "10 classes" in panel.label_dataset_summary.text()
    assert panel.label_model_params.text() == "85,002 parameters"
    assert panel.preview.currentWidget() is panel.preview_images  # digits are images
    panel.combo_dataset.setCurrentIndex(panel.combo_dataset.findData("builtin:iris"))
    qtbot.waitUntil(lambda: "150 samples" in panel.label_dataset_summary.text(), timeout=20_000)
    assert panel.preview.currentWidget() is panel.table_preview  # iris is a table
    assert panel.table_preview.rowCount() > 0
    _wait_idle(qtbot, panel)


def test_missing_file_shows_in_the_summary(qtbot: Any, panel: ConfigPanel, tmp_path: Path) -> None:
    panel.add_source(f"csv:{tmp_path / 'missing.csv'}")
    qtbot.waitUntil(lambda: "⚠" in panel.label_dataset_summary.text(), timeout=20_000)
    assert "missing.csv" in panel.label_dataset_summary.text()
    _wait_idle(qtbot, panel)


def test_window_save_writes_toml_the_cli_loads(make_window: Any, tmp_path: Path) -> None:
    window = make_window()
    cfg = _non_default()
    window.panel.set_config(cfg)
    path = tmp_path / "saved.toml"
    assert window.save_config(path)
    assert load_config(path) == window.panel.config() == cfg
    assert path.read_text(encoding="utf-8") == to_toml(cfg)
    # and back: opening it shows the same config
    window.panel.set_config(Config())
    assert window.open_config(path)
    assert window.panel.config() == cfg


def test_window_refuses_to_save_a_bad_config(make_window: Any, tmp_path: Path) -> None:
    window = make_window()
    window.panel.edit_lr.setText("zero")
    assert not window.save_config(tmp_path / "bad.toml")
    assert not (tmp_path / "bad.toml").exists()
    assert "optim.lr" in window.banner.text


def test_window_open_bad_toml_shows_the_error(make_window: Any, tmp_path: Path) -> None:
    window = make_window()
    bad = tmp_path / "bad.toml"
    bad.write_text('[parallel]\nworkers = "two"\n', encoding="utf-8")
    before = window.panel.config()
    assert not window.open_config(bad)
    assert "parallel.workers" in window.panel.label_config_error.text()
    assert window.panel.config() == before


def test_spin_boxes_take_their_ranges_from_the_config_bounds(panel: ConfigPanel) -> None:
    from core.config import BOUNDS

    spins = {
        "data.image_size": panel.spin_image_size,
        "data.val_fraction": panel.spin_val_fraction,
        "data.loader_workers": panel.spin_loader_workers,
        "model.dropout": panel.spin_dropout,
        "optim.momentum": panel.spin_momentum,
        "train.epochs": panel.spin_epochs,
        "train.batch_size": panel.spin_batch_size,
        "train.seed": panel.spin_seed,
        "parallel.workers": panel.spin_workers,
        "parallel.threads_per_worker": panel.spin_threads,
    }
    for key, spin in spins.items():
        assert (spin.minimum(), spin.maximum()) == BOUNDS[key][:2], key


# every bound key: its widget's object name (a contract) and its row's label
PANEL_ROWS = {
    "model.hidden": ("edit_hidden", "Hidden layers"),
    "model.channels": ("edit_channels", "Conv channels"),
    "model.activation": ("combo_activation", "Activation"),
    "model.dropout": ("spin_dropout", "Dropout"),
    "optim.name": ("combo_optimizer", "Optimizer"),
    "optim.lr": ("edit_lr", "Learning rate"),
    "optim.momentum": ("spin_momentum", "Momentum"),
    "optim.weight_decay": ("edit_weight_decay", "Weight decay"),
    "train.epochs": ("spin_epochs", "Epochs"),
    "train.batch_size": ("spin_batch_size", "Batch size"),
    "train.seed": ("spin_seed", "Seed"),
    "model.finetune": ("combo_finetune", "Train"),
    "optim.backbone_lr_mult": ("spin_backbone_lr_mult", "Backbone rate ×"),
    "parallel.strategy": ("combo_strategy", "Strategy"),
    "parallel.workers": ("spin_workers", "Workers"),
    "parallel.threads_per_worker": ("spin_threads", "Threads / worker"),
    "parallel.sweep_lr": ("edit_sweep_lr", "Sweep rates"),
    "schedule.kind": ("combo_schedule", "LR schedule"),
    "schedule.warmup_steps": ("spin_warmup_steps", "Warm-up steps"),
    "schedule.min_lr": ("edit_min_lr", "Minimum rate"),
    "train.early_stop_patience": ("spin_early_stop_patience", "Early stop after"),
    "train.monitor": ("combo_monitor", "Monitor"),
    "parallel.precision": ("combo_precision", "Precision"),
    "augment.crop_scale": ("spin_crop_scale", "Crop scale"),
    "augment.hflip": ("check_hflip", ""),
    "augment.rotation": ("spin_rotation", "Rotation"),
    "augment.jitter": ("spin_jitter", "Colour jitter"),
    "data.target": ("combo_target", "Target column"),
    "data.image_size": ("spin_image_size", "Image size"),
    "data.val_fraction": ("spin_val_fraction", "Validation share"),
    "data.loader_workers": ("spin_loader_workers", "Loader processes"),
    "data.standardize": ("check_standardize", ""),
}


def _label_of(widget: QWidget) -> str | None:
    """The text of the form row's label that ``widget`` is the field of (None: in no form row)."""
    form = widget.parentWidget().layout()
    if not isinstance(form, QFormLayout) or form.getWidgetPosition(widget)[0] < 0:
        return None
    label = form.labelForField(widget)
    return label.text() if isinstance(label, QLabel) else ""


def test_every_shown_key_has_one_binding_and_its_label(panel: ConfigPanel) -> None:
    bound = [(key, w) for group in panel._groups for key, w in group.bindings.widgets.items()]
    keys = [key for key, _ in bound]
    assert sorted(keys) == sorted(PANEL_ROWS), "each key is bound once, and only the keys the panel shows"
    assert all(key in FIELDS for key in keys)
    for key, w in bound:
        name, label = PANEL_ROWS[key]
        assert w.objectName() == name, key
        assert _label_of(w) == label, key
    assert len({id(w) for _, w in bound}) == len(bound), "no widget shows two keys"


def test_key_widget_follows_the_declaration(qtbot: Any) -> None:
    spin = key_widget("train.epochs", "spin")
    assert isinstance(spin, QSpinBox) and spin.minimum() == int(FIELDS["train.epochs"].bounds.lo)
    combo = key_widget("optim.name", "combo", labels=("SGD",))
    assert isinstance(combo, QComboBox)
    assert [combo.itemData(i) for i in range(combo.count())] == list(FIELDS["optim.name"].choices)
    assert combo.itemText(0) == "SGD"
    assert isinstance(key_widget("augment.hflip", "check"), QCheckBox)
    assert isinstance(key_widget("augment.jitter", "jitter", decimals=2), QDoubleSpinBox)
    assert isinstance(key_widget("optim.lr", "lr"), QLineEdit)
    with pytest.raises(ValueError, match=r"train\.nonsense"):
        key_widget("train.nonsense", "x")


def test_row_refuses_an_unknown_key_and_a_second_binding(qtbot: Any) -> None:
    box = QGroupBox()
    qtbot.addWidget(box)
    form = QFormLayout(box)
    b = Bindings()
    spin = b.row(form, "train.epochs", "Epochs", name="spin_epochs")
    assert b.widgets == {"train.epochs": spin} and form.rowCount() == 1
    assert _label_of(spin) == "Epochs"
    with pytest.raises(ValueError, match=r"train\.nonsense"):
        b.row(form, "train.nonsense", "Nonsense", name="spin_nonsense")
    with pytest.raises(ValueError, match=r"train\.epochs"):
        b.row(form, "train.epochs", "Epochs again", name="spin_epochs_2")
    with pytest.raises(ValueError, match=r"train\.epochs"):
        b.row(form, "train.epochs", "Epochs again", QSpinBox())
    assert form.rowCount() == 1, "a refused row is not added"


def test_a_live_key_without_a_widget_is_named(panel: ConfigPanel) -> None:
    assert set(live_bindings(panel._groups)) == set(LIVE_KEYS)
    dropped = next(g for g in panel._groups if "optim.lr" in g.bindings.widgets)
    widgets = dict(dropped.bindings.widgets)
    del widgets["optim.lr"]
    others = [g for g in panel._groups if g is not dropped]
    with pytest.raises(ValueError, match=r"optim\.lr"):
        live_bindings([*others, SimpleNamespace(bindings=Bindings(widgets))])


def test_an_image_folders_preview_shows_every_class(qtbot: Any, panel: ConfigPanel, tmp_path: Path) -> None:
    """Ten classes of 12 images each: the strip shows one of each (it showed 8 images spread over the folder)."""
    import numpy as np
    from PIL import Image

    root = tmp_path / "pets"
    for k in range(10):
        (root / f"class{k}").mkdir(parents=True)
        for i in range(12):
            Image.fromarray(np.full((8, 8, 3), 20 * k + i, np.uint8)).save(root / f"class{k}" / f"{i}.png")
    panel.set_config(Config().replace("data", source=f"images:{root}", image_size=8).replace("model", kind="cnn"))
    qtbot.waitUntil(lambda: "10 classes" in panel.label_dataset_summary.text(), timeout=30_000)
    layout = panel.data.thumbs_layout
    thumbs = [layout.itemAt(i).widget() for i in range(layout.count())]
    classes = sorted({t.toolTip() for t in thumbs if t is not None})
    assert classes == [f"class{k}" for k in range(10)]
    panel.resize(320, 900)  # the panel's width in the window
    panel.show()
    qtbot.waitExposed(panel)
    qtbot.waitUntil(lambda: all(t.isVisible() for t in thumbs if t is not None), timeout=5_000)
    inside = panel.data.preview_images.rect()
    assert all(inside.contains(t.geometry()) for t in thumbs if t is not None)  # two rows, none cut off
    _wait_idle(qtbot, panel)
