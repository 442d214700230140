"""Race… in the window against the real engine: the variants' curves branch from the parent's, a loser greys
with its reason, the winner is bold, the status bar follows the race; Pause, Resume and Stop act on the race."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from app.flows.race_dialog import RaceDialog
from app.plots.base import OUT_COLOR
from core.config import Config, apply_overrides, load_config
from core.services.race.race import RaceRecord, races_of
from core.services.runs.files import RunDir
from core.services.runs.start import new_run

pytestmark = pytest.mark.slow

DIGITS = [
    'data.source="builtin:digits"',
    "parallel.strategy=single",
    "parallel.workers=1",
    "model.hidden=[32]",
    "train.batch_size=64",
    "train.epochs=1",
]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-epoch run of digits (one worker), copied for each test: a race changes its run."""
    session = new_run(apply_overrides(Config(), DIGITS), tmp_path_factory.mktemp("template"))
    session.start()
    assert session.wait(300) == "finished", session.error
    assert session.run_dir is not None
    return Path(session.run_dir)


@pytest.fixture
def parent(template: Path, tmp_path: Path) -> Path:
    run = tmp_path / "runs" / template.name
    shutil.copytree(template, run)
    return run


def filled(specs: list[str], rungs: str) -> Callable[[RaceDialog], bool]:
    """The Race dialog filled in as a user would, then Race pressed (no modal loop in a test)."""

    def ask(dialog: RaceDialog) -> bool:
        dialog.set_vary(specs)
        dialog.edit_rungs.setText(rungs)
        return True

    return ask


def race_from_runs_tab(qtbot: Any, window: Any, run: Path, specs: list[str], rungs: str) -> None:
    """Select the run in Runs and choose Race… (the table's context menu holds the same action)."""
    window.show_tab(window.runs_view)
    qtbot.waitUntil(lambda: window.runs_view.model.row_for(run) >= 0, timeout=30_000)
    window.runs_view.select_runs([run])
    assert window.action_race in window.runs_view.menu_actions
    qtbot.waitUntil(window.action_race.isEnabled, timeout=10_000)
    window.ask_race = filled(specs, rungs)
    window.action_race.trigger()
    qtbot.waitUntil(lambda: window.race.active, timeout=30_000)


def spy_status(window: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text the status bar's run label was given."""
    said: list[str] = []
    show = window.run_status.set_run_dir

    def spy(text: str) -> None:
        said.append(text)
        show(text)

    monkeypatch.setattr(window.run_status, "set_run_dir", spy)
    return said


def legend(window: Any) -> list[str]:
    """The loss plot's legend rows as they read."""
    return [label.item.toPlainText() for _sample, label in window.plots.loss.legends[0].items]


def test_a_race_branches_from_the_parent_greys_its_losers_and_the_winner_goes_on(
    qtbot: Any, make_window: Any, parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = make_window()
    said = spy_status(window, monkeypatch)
    race_from_runs_tab(qtbot, window, parent, ["optim.lr=0.1x,1x,4x,20x"], "1,2")
    assert window.shown_tab() is window.plots
    assert window.action_stop.isEnabled() and window.action_pause.isEnabled()
    assert not window.action_start.isEnabled() and not window.action_race.isEnabled()
    assert not window.action_fork.isEnabled() and not window.action_export.isEnabled()
    assert window.label_state.text() in ("Racing", "Race paused", "Stopping the race…")
    race = window.race.race
    qtbot.waitUntil(lambda: not window.race.active, timeout=180_000)
    record = race.record
    assert record.state == "done" and record.winner is not None

    # one curve per variant plus the parent's; each variant starts where the parent's curve ends
    loss = window.plots.loss
    assert set(loss.smooth) == {0, 1, 2, 3, 4}
    parent_x = loss.raw[0].xData
    assert parent_x is not None and len(parent_x) > 1
    branch = float(parent_x[-1])
    assert branch == record.start_step
    for key in (1, 2, 3, 4):
        x = loss.raw[key].xData
        assert x is not None and len(x) > 1 and float(x[0]) == branch and float(x[1]) > branch
    assert window.plots.val.loss_curves.keys() == {0, 1, 2, 3, 4}
    assert legend(window)[0] == parent.name

    # the losers are grey and dashed, their legend rows and tooltips say why; the winner is bold
    losers = [v for v in record.variants if v.out]
    assert len(losers) == 3
    for v in losers:
        pen = loss.smooth[v.index + 1].opts["pen"]
        assert pen.color().name() == OUT_COLOR and pen.style() == Qt.PenStyle.DashLine and pen.width() <= 1
        assert any(v.label in text and v.out in text for text in legend(window)), (v, legend(window))
        assert v.out in loss.smooth[v.index + 1].curve.toolTip()
    assert any(v.out.startswith("rung 2: ") for v in losers)
    winner = record.variants[record.winner]
    assert loss.smooth[winner.index + 1].opts["pen"].width() == 3
    assert window.plots.val.loss_curves[winner.index + 1].opts["pen"].width() == 3

    # the status bar followed the race, the log says the marker, Runs shows the run gone on
    assert said[0] == "race: rung 1 of 2, 4 → 4 variants"
    assert said[-1].startswith(f"race: won by {winner.label} (val_accuracy ")
    assert window.progress_run.value() == window.progress_run.maximum()
    marker = f"race: 4 variants from step {record.start_step:,}, won by {winner.label}"
    assert marker in window.log_pane.toPlainText()
    model = window.runs_view.model
    qtbot.waitUntil(lambda: model.rows[model.row_for(parent)].epochs_done == 3, timeout=30_000)
    tip = model.data(model.index(model.row_for(parent), 0), Qt.ItemDataRole.ToolTipRole)
    assert marker in tip and all(f"  {v.label}: " in tip for v in record.variants), tip  # the race, variant by variant
    assert window.viewing_run == parent
    for key, value in winner.changes.items():
        assert load_config(RunDir(parent).config).value(key) == value
    assert window.action_race.isEnabled() and window.action_export.isEnabled()  # the run that went on


def test_pause_resume_and_stop_act_on_the_whole_race(
    qtbot: Any, make_window: Any, parent: Path, live_children: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = make_window()
    before = RunDir(parent).last.read_bytes()
    said = spy_status(window, monkeypatch)
    race_from_runs_tab(qtbot, window, parent, ["optim.lr=0.5x,2x"], "200")
    loss = window.plots.loss

    def training() -> bool:
        """A variant trains (on a machine of one core the variants take turns, elsewhere they train at once)."""
        return bool(window.race.race.sessions()) and max(loss.point_count(1), loss.point_count(2)) > 2

    qtbot.waitUntil(training, timeout=60_000)

    window.action_pause.trigger()
    assert window.race.state == "paused" and window.label_state.text() == "Race paused"
    assert window.action_resume.isEnabled() and not window.action_pause.isEnabled()
    qtbot.waitUntil(lambda: all(s.state == "paused" for s in window.race.race.sessions()), timeout=30_000)
    window.action_resume.trigger()
    assert window.race.state == "running" and window.action_pause.isEnabled()
    qtbot.waitUntil(lambda: all(s.state == "running" for s in window.race.race.sessions()), timeout=30_000)

    window.action_stop.trigger()
    assert window.label_state.text() == "Stopping the race…" and not window.action_stop.isEnabled()
    qtbot.waitUntil(lambda: not window.race.active, timeout=120_000)
    qtbot.waitUntil(lambda: not live_children(), timeout=20_000)
    [folder] = races_of(parent)
    record = RaceRecord.load(folder)
    assert record.state == "stopped" and not any(v.out for v in record.variants)
    started = [v for v in record.variants if v.run]  # one core: the second waits its turn, and never starts
    assert started and all((RunDir(folder / v.run).read_summary() or {}).get("status") == "stopped" for v in started)
    assert RunDir(parent).last.read_bytes() == before, "a stopped race leaves the run as it was"
    assert said[-1] == "race: stopped at rung 1 of 1, 2 → 2 variants"
    assert "race stopped at rung 1" in window.log_pane.toPlainText()
    assert window.label_state.text() != "Racing" and window.action_race.isEnabled()


def test_the_dialog_stays_open_on_a_bad_value_with_its_one_line(qtbot: Any, parent: Path) -> None:
    dialog = RaceDialog(parent, load_config(RunDir(parent).config))
    qtbot.addWidget(dialog)
    dialog.open()
    race = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    dialog.set_vary(["optim.lr=-1,0.1"])
    qtbot.mouseClick(race, Qt.MouseButton.LeftButton)
    assert dialog.isVisible() and dialog.plan is None
    assert dialog.label_error.isVisible() and dialog.error().startswith("race: --vary optim.lr: optim.lr must be")
    assert "\n" not in dialog.error()
    dialog.rows[0].edit_values.setText("0.5x,2x")
    dialog.edit_rungs.setText("1,x")
    qtbot.mouseClick(race, Qt.MouseButton.LeftButton)
    assert dialog.isVisible() and dialog.error() == "race: rungs must be epoch counts like 1,2,4, got '1,x'"
    dialog.edit_rungs.setText("")
    dialog.add_row("train.batch_size", "32,64")
    qtbot.mouseClick(race, Qt.MouseButton.LeftButton)
    assert not dialog.isVisible() and not dialog.label_error.isVisible()
    assert dialog.plan is not None
    assert [v.label for v in dialog.plan.variants] == ["lr 0.025 × batch 32", "lr 0.025", "lr 0.1 × batch 32", "lr 0.1"]
    assert dialog.plan.rungs == [1, 2]  # automatic: two halvings bring four variants to one


def test_race_is_off_for_a_search_and_says_why(qtbot: Any, make_window: Any, parent: Path) -> None:
    window = make_window()
    window.show_tab(window.runs_view)
    qtbot.waitUntil(lambda: window.runs_view.model.row_for(parent) >= 0, timeout=30_000)
    window.runs_view.select_runs([parent])
    qtbot.waitUntil(window.action_race.isEnabled, timeout=10_000)
    summary_file = RunDir(parent).path / "summary.json"
    summary = json.loads(summary_file.read_text())
    summary_file.write_text(json.dumps({**summary, "strategy": "search"}))  # as a search's summary says
    window.update_actions()
    assert not window.action_race.isEnabled()
    assert "trials differ in more than a fork may change" in window.action_race.toolTip()
    window.runs_view.select_runs([])
    window.update_actions()
    assert not window.action_race.isEnabled() and "trials differ" not in window.action_race.toolTip()
