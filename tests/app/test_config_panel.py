"""Config panel <-> Config <-> TOML round trips (the CLI reads what the GUI saves)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QComboBox, QLineEdit, QSpinBox, QWidget

from app.panel.panel import ConfigPanel
from core.config import Config, from_dict, load_config, to_dict, to_toml

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
