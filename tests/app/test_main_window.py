"""The window without training: layout contract, actions, settings, themes, past runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtGui import QAction, QPalette
from PySide6.QtWidgets import QApplication, QProgressBar, QWidget

from app.shell.settings import AppSettings
from core.config import Config

ACTIONS = [
    "action_start",
    "action_pause",
    "action_resume",
    "action_stop",
    "action_export",
    "action_open_config",
    "action_save_config",
]
PLOTS = ["plot_loss", "plot_val", "plot_throughput"]
CONFIG_WIDGETS = [
    "combo_dataset",
    "combo_model",
    "combo_strategy",
    "spin_workers",
    "spin_epochs",
    "spin_batch_size",
    "edit_lr",
]


def test_object_names_are_the_contract(make_window: Any) -> None:
    window = make_window()
    for name in ACTIONS:
        action = window.findChild(QAction, name)
        assert action is not None, name
        assert action.shortcut().toString(), f"{name} has no keyboard shortcut"
        assert not action.icon().isNull(), f"{name} has no icon"
    for name in PLOTS + CONFIG_WIDGETS:
        assert window.findChild(QWidget, name) is not None, name
    assert isinstance(window.findChild(QProgressBar, "progress_run"), QProgressBar)
    assert window.findChild(QWidget, "log_pane") is not None


def test_actions_enabled_only_when_they_make_sense(make_window: Any) -> None:
    window = make_window()
    enabled = {name: window.findChild(QAction, name).isEnabled() for name in ACTIONS}
    assert enabled == {
        "action_start": True,
        "action_pause": False,
        "action_resume": False,
        "action_stop": False,
        "action_export": False,
        "action_open_config": True,
        "action_save_config": True,
    }
    assert "Export" in window.action_export.toolTip()  # says why it is off


def test_default_is_one_click_training(make_window: Any) -> None:
    window = make_window()
    cfg = window.panel.config()
    assert cfg == Config()
    assert (cfg.data.source, cfg.model.kind, cfg.parallel.strategy, cfg.parallel.workers) == (
        "builtin:digits",
        "mlp",
        "hogwild",
        2,
    )
    assert window.width() >= 1000 and window.height() >= 700


def test_settings_persist_geometry_config_theme_and_view(make_window: Any, qtbot: Any, _private_settings: Path) -> None:
    first = make_window()
    # the offscreen screen is 800x800 and restoreGeometry clamps to it: use the narrowest window
    size = (first.minimumSizeHint().width(), 650)
    first.resize(*size)
    first.panel.spin_epochs.setValue(7)
    first.action_dark.trigger()
    first.plots.set_x_mode("time")
    first.plots.check_log_y.setChecked(True)
    first.close()
    assert (_private_settings / "TrainDesk" / "TrainDesk.ini").is_file()  # in tmp, not the user's

    second = make_window()
    assert second.panel.config().train.epochs == 7
    assert second.action_dark.isChecked()
    assert second.plots.x_mode == "time" and second.plots.check_log_y.isChecked()
    assert (second.width(), second.height()) == size
    second.action_dark.trigger()  # back to light for the next tests
    assert AppSettings().theme == "light"


def test_dark_and_light_themes_change_the_palette_and_plots(make_window: Any) -> None:
    window = make_window()
    app = QApplication.instance()
    light = app.palette().color(QPalette.ColorRole.Window).lightness()
    window.action_dark.trigger()
    dark = app.palette().color(QPalette.ColorRole.Window).lightness()
    assert dark < 100 < light
    assert window.plots.loss.backgroundBrush().color().lightness() < 100
    window.action_dark.trigger()
    assert app.palette().color(QPalette.ColorRole.Window).lightness() == light


def _fake_run(runs: Path, name: str, status: str = "finished") -> Path:
    run = runs / name
    run.mkdir(parents=True)
    (run / "config.toml").write_text(Config().to_toml())
    recs = [{"kind": "state", "t": 100.0, "worker": None, "state": "starting", "detail": ""}]
    for i in range(50):
        for w in range(2):
            recs.append(
                {
                    "kind": "step",
                    "t": 100.0 + i * 0.02,
                    "worker": w,
                    "epoch": 1,
                    "step": i + 1,
                    "samples": (i + 1) * 64,
                    "loss": 1.0 / (i + 1),
                    "lr": 0.05,
                }
            )
    recs.append({"kind": "eval", "t": 101.0, "worker": 0, "epoch": 1, "val_loss": 0.3, "val_accuracy": 0.9})
    recs.append({"kind": "log", "t": 101.0, "worker": 1, "level": "warning", "message": "a worker note"})
    text = "\n".join(json.dumps(r) for r in recs) + '\n{"kind": "step", "t"'  # torn last line
    (run / "metrics.jsonl").write_text(text)
    (run / "summary.json").write_text(json.dumps({"status": status, "epochs_done": 1}))
    return run


def test_recent_runs_and_open_run(make_window: Any, qtbot: Any, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    older = _fake_run(runs, "20250101-100000-hogwild-mlp", "stopped")
    newer = _fake_run(runs, "20250102-100000-hogwild-mlp")
    window = make_window(runs_dir=str(runs))
    window.menu_recent.aboutToShow.emit()
    labels = [a.text() for a in window.menu_recent.actions()]
    assert labels[0].startswith(newer.name) and labels[1].startswith(older.name)
    assert "stopped" in labels[1]
    window.open_run(older)
    qtbot.waitUntil(lambda: window.viewing_run == older, timeout=30_000)
    assert window.plots.loss.point_count(0) == 50 and window.plots.loss.point_count(1) == 50
    assert "a worker note" in window.log_pane.toPlainText()
    assert "stopped" in window.progress_run.text()


def test_open_run_rejects_a_folder_without_metrics(make_window: Any, tmp_path: Path) -> None:
    window = make_window()
    window.open_run(tmp_path)
    assert window.banner.isVisible() and "metrics.jsonl" in window.banner.text
    assert window.viewing_run is None


def test_runs_go_to_the_runs_setting_by_default(make_window: Any) -> None:
    window = make_window(runs_dir=None)
    assert window.runs_dir == "runs"  # ./runs, relative to where the GUI was started
    window.settings.runs_dir = "elsewhere"
    assert window.runs_dir == "elsewhere"
    assert AppSettings().runs_dir == "elsewhere"


def test_main_opens_the_window_with_a_config_and_exits_cleanly(qapp: Any, tmp_path: Path, monkeypatch: Any) -> None:
    import signal

    from app import main as main_module
    from app.main_window import MainWindow

    cfg_path = tmp_path / "small.toml"
    cfg_path.write_text(Config().replace("train", epochs=3).to_toml())
    seen: list[Any] = []

    def fake_exec(self: Any) -> int:  # the user looks, then closes the window
        windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()]
        seen.extend(windows)
        for w in windows:
            w.close()
        return 0

    monkeypatch.setattr(QApplication, "exec", fake_exec)
    before = signal.getsignal(signal.SIGINT)
    assert main_module.main([str(cfg_path), "--runs-dir", str(tmp_path / "r"), "--theme", "dark"]) == 0
    assert len(seen) == 1
    window = seen[0]
    assert window.panel.config().train.epochs == 3
    assert window.runs_dir == str(tmp_path / "r")
    assert window.action_dark.isChecked()
    window.action_dark.trigger()  # leave the shared QApplication light
    assert signal.getsignal(signal.SIGINT) is before


def test_the_window_has_every_member_its_flows_ask_for(make_window: Any) -> None:
    """The flows see the window through WindowPort; the main window is one (mypy checks the types)."""
    from app.flows.window_port import WindowPort

    window = make_window()
    members = set(WindowPort.__annotations__) | {name for name in vars(WindowPort) if not name.startswith("_")}
    assert {"panel", "run_status", "show_input_error", "hide_error", "show_tab"} <= members
    assert [name for name in sorted(members) if not hasattr(window, name)] == []


def test_the_flows_know_the_window_only_as_a_window_port() -> None:
    """No flow names the main window or reaches for one of its raw widgets."""
    import re

    flows = Path(__file__).resolve().parents[2] / "app" / "flows"
    raw = re.compile(
        r"MainWindow|app\.main_window|\b(w|window)\.(banner|tabs|menu_recent|progress_\w+|label_\w+|button_\w+)\b"
    )
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(flows.glob("*.py"))
        if path.name != "window_port.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if raw.search(line)
    ]
    assert found == []


WINDOW_START = """
import sys
from PySide6.QtWidgets import QApplication
app = QApplication([])
from app.main_window import MainWindow
window = MainWindow(runs_dir=sys.argv[1])
window.show()
print(sorted(m for m in ("torch", "timm", "torchvision") if m in sys.modules))
"""


def test_the_window_starts_without_torch(tmp_path: Path) -> None:
    """Building and showing the window imports neither torch nor timm (seconds of its start): what needs them
    (the data's description, the device list) runs on background threads once the window is up."""
    import subprocess
    import sys

    from tests.cli_run import core_env

    env = core_env(QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=str(tmp_path / "config"), HOME=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", WINDOW_START, str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


def test_the_device_combo_lists_this_machines_devices_once_the_window_is_up(make_window: Any, qtbot: Any) -> None:
    from core.services.machine import available_devices

    window = make_window()
    parallel = window.panel.parallel
    qtbot.waitUntil(lambda: parallel.devices is not None, timeout=30_000)
    combo = parallel.combo_device
    assert [combo.itemData(i) for i in range(combo.count())] == available_devices() == parallel.devices
    assert combo.currentData() == "cpu"


def test_closing_a_window_whose_dataset_is_still_being_described_is_prompt(
    make_window: Any, qtbot: Any, monkeypatch: Any
) -> None:
    """A description (or a parameter count) that takes seconds is waited for after the window has gone: the
    window leaves the screen at once, not when the reading returns."""
    import threading
    import time

    from PySide6.QtCore import QEvent, QObject

    import core.services.data as data_service

    reading = threading.Event()
    release = threading.Event()
    real = data_service.describe_source

    def slow_describe(*args: Any, **kwargs: Any) -> Any:
        reading.set()
        release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(data_service, "describe_source", slow_describe)
    window = make_window()
    qtbot.waitUntil(reading.is_set, timeout=10_000)  # the window's dataset, being read

    hidden_at: list[float] = []

    class HideWatch(QObject):
        def eventFilter(self, watched: QObject, event: QEvent) -> bool:
            if event.type() == QEvent.Type.Hide and watched is window:
                hidden_at.append(time.monotonic())
            return False

    watch = HideWatch()
    window.installEventFilter(watch)
    threading.Timer(2.0, release.set).start()  # the reading returns 2 s on
    start = time.monotonic()
    window.close()
    took = time.monotonic() - start
    assert not window.isVisible()
    assert hidden_at and hidden_at[0] - start < 0.5, (hidden_at, start, took)
