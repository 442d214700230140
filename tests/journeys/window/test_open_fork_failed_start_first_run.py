"""More flows of the window walked as a user would: opening and forking from Runs, a Start that fails,
the first run of a new user."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLineEdit

from app.views.runs import COL
from core.config import LIVE_KEYS, Config
from tests.journeys.window.test_edit_compare_fork_reopen import write_run


def parent_config() -> Config:
    return (
        Config()
        .replace("data", source="builtin:iris")
        .replace("optim", lr=0.01, weight_decay=0.001)
        .replace("train", epochs=20, batch_size=48)
    )


def run_with_weights(runs: Path, name: str, cfg: Config) -> Path:
    run = write_run(runs, name, cfg)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.pt").write_bytes(b"weights")  # enough to be forkable; never loaded here
    return run


def show_runs(qtbot: Any, window: Any, n: int) -> Any:
    window.tabs.setCurrentWidget(window.runs_view)
    view = window.runs_view
    qtbot.waitUntil(lambda: view.proxy.rowCount() == n and not view.busy, timeout=20_000)
    return view


def double_click(qtbot: Any, view: Any, attr: str) -> None:
    """As a mouse does it: a press and release, then the double-click (QTest sends only the latter)."""
    pos = view.table.visualRect(view.proxy.index(0, COL[attr])).center()
    qtbot.mouseClick(view.table.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    qtbot.mouseDClick(view.table.viewport(), Qt.MouseButton.LeftButton, pos=pos)


def editor_of(view: Any) -> QLineEdit | None:
    editor = view.table.viewport().findChild(QLineEdit)
    return editor if editor is not None and editor.isVisible() else None


# -- Runs: a double-click opens, F2 and Rename edit ---------------------------------------------
@pytest.mark.parametrize("attr", ["name", "tags", "status"])
def test_a_double_click_anywhere_on_a_run_opens_its_curves(
    qtbot: Any, make_window: Any, tmp_path: Path, attr: str
) -> None:
    run = write_run(tmp_path / "runs", "20261201-100000-hogwild-mlp", parent_config())
    window = make_window()
    view = show_runs(qtbot, window, 1)
    double_click(qtbot, view, attr)
    qtbot.waitUntil(lambda: window.viewing_run == run and not window.calls.busy, timeout=20_000)
    assert editor_of(view) is None  # opened, not renamed
    assert window.tabs.currentWidget() is window.plots  # the run's curves, not the table
    assert window.plots.loss.point_count(0) > 0


def test_open_from_the_button_shows_the_runs_curves(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs", "20261201-100000-hogwild-mlp", parent_config())
    window = make_window()
    view = show_runs(qtbot, window, 1)
    view.select_runs([run])
    view.action_open.trigger()
    qtbot.waitUntil(lambda: window.viewing_run == run and not window.calls.busy, timeout=20_000)
    assert window.tabs.currentWidget() is window.plots


def test_f2_and_rename_edit_the_name_in_place(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    import json

    run = write_run(tmp_path / "runs", "20261201-100000-hogwild-mlp", parent_config())
    window = make_window()
    view = show_runs(qtbot, window, 1)
    view.table.setCurrentIndex(view.proxy.index(0, COL["status"]))  # a cell that cannot be edited
    view.table.setFocus()
    qtbot.keyClick(view.table, Qt.Key.Key_F2)
    qtbot.waitUntil(lambda: editor_of(view) is not None, timeout=5_000)
    assert view.table.currentIndex().column() == COL["name"]  # F2 renames the run
    editor = editor_of(view)
    editor.selectAll()
    qtbot.keyClicks(editor, "baseline")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: (run / "notes.json").is_file(), timeout=5_000)
    assert json.loads((run / "notes.json").read_text())["name"] == "baseline"
    assert window.viewing_run is None  # renaming opened nothing

    view.table.setCurrentIndex(view.proxy.index(0, COL["notes"]))
    qtbot.keyClick(view.table, Qt.Key.Key_F2)  # F2 on notes edits the notes
    qtbot.waitUntil(lambda: editor_of(view) is not None, timeout=5_000)
    assert view.table.currentIndex().column() == COL["notes"]
    qtbot.keyClick(editor_of(view), Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: editor_of(view) is None, timeout=5_000)

    view.select_runs([run])
    view.action_rename.trigger()  # the context menu's Rename…
    qtbot.waitUntil(lambda: editor_of(view) is not None, timeout=5_000)
    assert view.table.currentIndex().column() == COL["name"] and editor_of(view).text() == "baseline"
    qtbot.keyClick(editor_of(view), Qt.Key.Key_Escape)


# -- Fork: the parent's own settings, and only what is edited --------------------------------------
def test_fork_dialog_shows_the_parents_live_keys_and_returns_only_the_edited_ones(qtbot: Any) -> None:
    from PySide6.QtWidgets import QDialogButtonBox

    from app.flows.fork_dialog import ForkDialog

    parent = parent_config()
    dialog = ForkDialog("parent", parent)
    qtbot.addWidget(dialog)
    assert set(dialog.widgets) == set(LIVE_KEYS) and len(LIVE_KEYS) >= 4
    assert dialog.widgets["optim.lr"].text() == "0.01"
    assert dialog.widgets["optim.weight_decay"].text() == "0.001"
    assert dialog.widgets["train.batch_size"].value() == 48 and dialog.widgets["train.epochs"].value() == 20
    assert dialog.changes() == {}
    dialog.set_value("train.batch_size", 32)
    assert dialog.changes() == {"train.batch_size": 32}
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    dialog.widgets["optim.lr"].setText("fast")
    assert not ok.isEnabled() and "optim.lr" in dialog.label_error.text()
    dialog.widgets["optim.lr"].setText("0.02")
    assert ok.isEnabled() and dialog.changes() == {"train.batch_size": 32, "optim.lr": 0.02}


def test_fork_from_runs_starts_from_the_parents_settings_not_the_panels(
    qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = parent_config()
    run = run_with_weights(tmp_path / "runs", "20261201-100000-hogwild-mlp", parent)
    window = make_window()
    window.panel.set_config(Config().replace("optim", lr=0.3).replace("train", epochs=5, batch_size=128))
    view = show_runs(qtbot, window, 1)
    view.select_runs([run])
    assert window.action_fork.isEnabled()
    shown: dict[str, Any] = {}

    def answer(dialog: Any) -> bool:
        shown.update({k: w.value() if hasattr(w, "value") else w.text() for k, w in dialog.widgets.items()})
        dialog.set_value("train.batch_size", 32)  # the one edit
        return True

    forked: list[tuple[Path, dict[str, Any]]] = []
    monkeypatch.setattr(window, "ask_fork", answer)
    monkeypatch.setattr(window.controller, "fork", lambda run_dir, changes: forked.append((run_dir, changes)))
    window.action_fork.trigger()
    qtbot.waitUntil(lambda: bool(forked) and not window.calls.busy, timeout=20_000)
    # the parent's own values were offered (finished all 20 epochs: the fork offers to go on to 40)
    assert shown == {"optim.lr": "0.01", "optim.weight_decay": "0.001", "train.batch_size": 48, "train.epochs": 40}
    assert forked == [(run, {"train.batch_size": 32, "train.epochs": 40})]  # never the panel's lr 0.3
    fork_cfg = parent.with_changes(forked[0][1])
    assert fork_cfg.optim.lr == 0.01 and fork_cfg.data.source == "builtin:iris"
    assert window.panel.config() == fork_cfg  # the panel shows the fork's settings


def test_fork_cancelled_starts_nothing(
    qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_with_weights(tmp_path / "runs", "20261201-100000-hogwild-mlp", parent_config())
    window = make_window()
    view = show_runs(qtbot, window, 1)
    view.select_runs([run])
    forked: list[Any] = []
    monkeypatch.setattr(window, "ask_fork", lambda dialog: False)
    monkeypatch.setattr(window.controller, "fork", lambda *a: forked.append(a))
    window.action_fork.trigger()
    assert forked == [] and not window.state.preparing and window.action_fork.isEnabled()


def test_a_fork_whose_settings_cannot_run_says_why_and_starts_nothing(
    qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent's config with the fork's changes is checked once more as the fork starts: an error there is
    the window's input error (the banner and the panel's error line), and the fork does not start."""
    from app.flows.fork_dialog import ForkDialog

    run = run_with_weights(tmp_path / "runs", "20261201-100000-hogwild-mlp", parent_config())
    window = make_window()
    view = show_runs(qtbot, window, 1)
    view.select_runs([run])
    forked: list[Any] = []
    monkeypatch.setattr(window, "ask_fork", lambda dialog: True)
    monkeypatch.setattr(ForkDialog, "changes", lambda self: {"optim.lr": -1.0})  # past the dialog's own check
    monkeypatch.setattr(window.controller, "fork", lambda *a: forked.append(a))
    window.action_fork.trigger()
    qtbot.waitUntil(lambda: not window.state.preparing and not window.calls.busy, timeout=20_000)
    assert forked == []
    assert window.banner.isVisible() and "optim.lr" in window.banner.text
    assert window.banner.property("cause") == "input"  # it goes once the settings change
    assert "optim.lr" in window.panel.label_config_error.text()
    assert window.action_fork.isEnabled()


def test_a_continue_whose_settings_cannot_run_says_why_and_starts_nothing(
    qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run without its config.toml continues with the panel's settings: when those cannot run, the window
    says why as an input error and nothing continues."""
    run = write_run(tmp_path / "runs", "20261201-100000-hogwild-mlp", parent_config(), status="stopped")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.pt").write_bytes(b"weights")
    (run / "config.toml").unlink()
    window = make_window()
    continued: list[Any] = []
    monkeypatch.setattr(window.controller, "continue_run", lambda *a: continued.append(a))
    window.state.update(viewing_run=run)  # the run on screen
    window.panel.edit_lr.setText("fast")
    assert window.continue_fork.continuable_run() == run
    window.continue_fork.continue_run()
    qtbot.waitUntil(lambda: not window.state.preparing and not window.calls.busy, timeout=20_000)
    assert continued == []
    assert window.banner.isVisible() and "optim.lr" in window.banner.text
    assert window.banner.property("cause") == "input"


# -- Start: disabled while the settings cannot run, and a failed start clears nothing ----------------
def test_start_is_disabled_while_the_config_is_invalid_and_says_why(
    qtbot: Any, make_window: Any, tmp_path: Path
) -> None:
    window = make_window()
    assert window.action_start.isEnabled()
    window.panel.edit_lr.setText("fast")
    assert not window.action_start.isEnabled()
    assert "optim.lr" in window.action_start.toolTip()
    assert "optim.lr" in window.panel.label_config_error.text()  # the panel's error line, as typed
    assert window.label_state.text().startswith("Cannot start: ") and "optim.lr" in window.label_state.text()
    window.action_start.trigger()  # Ctrl+R on a disabled action does nothing
    assert window.controller.state == "idle" and not (tmp_path / "runs").exists()
    window.panel.edit_lr.setText("0.05")
    assert window.action_start.isEnabled() and "optim.lr" not in window.action_start.toolTip()
    assert window.label_state.text() == "Ready"
    assert not window.panel.label_config_error.isVisibleTo(window.panel)


def test_start_is_disabled_while_the_dataset_cannot_be_read(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    window = make_window()
    panel = window.panel
    qtbot.waitUntil(lambda: "parameters" in panel.label_model_params.text(), timeout=30_000)
    assert window.action_start.isEnabled()
    panel.add_source(f"csv:{tmp_path / 'missing.csv'}")
    qtbot.waitUntil(lambda: panel.label_dataset_summary.text().startswith("⚠"), timeout=30_000)
    assert not window.action_start.isEnabled() and "missing.csv" in window.action_start.toolTip()
    panel.combo_dataset.setCurrentIndex(panel.combo_dataset.findData("builtin:digits"))
    qtbot.waitUntil(lambda: window.action_start.isEnabled(), timeout=30_000)
    qtbot.waitUntil(lambda: not panel.describer.calls.busy, timeout=30_000)


def test_a_start_that_fails_keeps_the_run_on_screen(qtbot: Any, make_window: Any) -> None:
    from core.session import RecordBuffer
    from tests.app.flows.test_metrics_path import FakeSession

    window = make_window()
    window.panel.set_config(
        Config()
        .replace("data", source="builtin:iris")
        .replace("train", epochs=2)
        .replace("parallel", strategy="single", workers=1)
    )
    window.action_start.trigger()
    qtbot.waitUntil(lambda: window.controller.ended, timeout=120_000)
    run_dir = window.controller.run_dir
    assert window.controller.state == "finished" and window.action_export.isEnabled()
    points = window.plots.loss.point_count(0)
    assert points > 0
    progress = window.progress_run.format()

    class BrokenSession(FakeSession):  # its start raises, as a broken engine's would
        attached = False

    def broken(cfg: Config, runs_dir: str, name: str | None) -> tuple[Any, Any]:
        return BrokenSession(cfg, fail=RuntimeError("the engine broke")), RecordBuffer()

    window.controller._factory = broken
    with qtbot.waitSignal(window.controller.start_failed, timeout=20_000):
        window.action_start.trigger()
    assert "the engine broke" in window.banner.text
    assert window.plots.loss.point_count(0) == points  # the finished run's curves stay
    assert window.controller.run_dir == run_dir and window.controller.state == "finished"
    assert window.action_export.isEnabled() and run_dir.name in window.action_export.toolTip()
    assert window.label_run_dir.text() == str(run_dir) and window.progress_run.format() == progress
    assert window.action_start.isEnabled() and window.action_continue_run.isEnabled() is False


# -- the first run: long enough to watch, pause and edit ----------------------------------------------
def test_a_new_users_window_starts_from_the_first_run_config(
    qtbot: Any, make_window: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.shell.settings import FIRST_RUN_CONFIG, AppSettings
    from core.config import load_config
    from core.training.augment import active

    first = load_config(FIRST_RUN_CONFIG)  # it validates
    assert first.model.kind == "cnn" and first.data.source == "builtin:digits" and first.train.epochs >= 30
    assert first.parallel.workers >= 2 and active(first.augment)
    assert Config().model.kind == "mlp"  # the command line's defaults are untouched
    assert make_window().panel.config() == Config()  # the tests' windows start from the defaults

    monkeypatch.setattr(AppSettings, "first_run_config", FIRST_RUN_CONFIG)
    window = make_window()  # no saved settings: a new user
    assert window.panel.config() == first
    assert window.controller.state == "idle"  # nothing runs before Start
    window.panel.spin_epochs.setValue(7)
    window.close()
    assert make_window().panel.config().train.epochs == 7  # once saved, the user's own settings
