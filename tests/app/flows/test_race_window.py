"""Race… from the window's own run (paused: it stops first, the race starts where it paused), Resume race for a
race that stopped before its end, and every worker's curve of a variant of several workers."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from app.plots.base import OUT_COLOR
from app.viewmodels.race_progress import curve_key, curve_of
from core.config import Config, apply_overrides
from core.services.race.race import RaceRecord, races_of
from core.services.runs.files import RunDir
from core.services.runs.start import new_run
from tests.app.flows.test_race import DIGITS, filled, legend, parent, race_from_runs_tab, template

pytestmark = pytest.mark.slow

__all__ = ["parent", "template"]  # the fixtures of test_race.py, used here too


def test_race_on_a_run_paused_in_the_window_stops_it_and_races_from_where_it_paused(
    qtbot: Any, make_window: Any, live_children: Any
) -> None:
    window = make_window()
    paused_at: dict[int, str] = {}
    window.controller.records.connect(
        lambda batch: paused_at.update(
            {
                int(r["worker"]): str(r.get("detail", ""))
                for r in batch
                if r.get("kind") == "state" and r.get("state") == "paused" and r.get("worker") is not None
            }
        )
    )
    window.panel.set_config(apply_overrides(Config(), DIGITS).replace("train", epochs=200))
    window.action_start.trigger()
    qtbot.waitUntil(
        lambda: window.controller.state == "running" and window.plots.loss.point_count(0) > 3, timeout=60_000
    )
    window.action_pause.trigger()
    qtbot.waitUntil(lambda: 0 in paused_at, timeout=30_000)
    run_dir = window.controller.run_dir
    assert run_dir is not None
    paused_step = int(paused_at[0].split("step ")[1])  # "epoch E step S"

    # Race… is on for the paused run; its dialog says the run stops first; cancelled, the run stays paused
    qtbot.waitUntil(window.action_race.isEnabled, timeout=10_000)
    shown: list[Any] = []

    def cancel(dialog: Any) -> bool:
        shown.append((dialog.stops_run, not dialog.label_note.isHidden(), dialog.label_note.text()))
        return False

    window.ask_race = cancel
    window.action_race.trigger()
    assert shown and shown[0][0] and shown[0][1] and "stops the run first" in shown[0][2]
    assert window.controller.state == "paused" and window.controller.active and not window.race.active
    assert window.action_race.isEnabled() and window.action_resume.isEnabled()
    assert not races_of(run_dir)

    # Race: the run stops (its checkpoint at the pause point), then the race starts from it, with no question
    window.ask_race = filled(["optim.lr=0.5x,2x"], "1")
    window.action_race.trigger()
    assert not window.action_race.isEnabled()  # the run is stopping
    qtbot.waitUntil(lambda: window.race.active, timeout=60_000)
    race = window.race.race
    assert race.plan.run == run_dir and race.plan.start_step == paused_step
    assert (RunDir(run_dir).read_summary() or {}).get("status") == "stopped"
    assert f"stopping {run_dir.name} to race it" in window.log_pane.toPlainText()
    qtbot.waitUntil(lambda: not window.race.active, timeout=180_000)
    assert race.record.state == "done" and race.record.winner is not None
    assert race.record.start_step == paused_step
    branch = float(window.plots.loss.raw[0].xData[-1])  # the variants branch from the parent's curve
    assert all(float(window.plots.loss.raw[curve_of(i)].xData[0]) == branch for i in (0, 1))
    qtbot.waitUntil(lambda: not live_children(), timeout=20_000)


def test_a_stopped_race_resumes_from_the_window_and_finishes_with_a_winner(
    qtbot: Any, make_window: Any, parent: Path, live_children: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = make_window()
    flow = window.race
    listen = flow._listen

    def stop_at_rung_two(entry: Any, session: Any) -> None:
        """A stop arrives just as the second rung's first variant starts (the race's own stop path)."""
        if entry.figures and flow.race is not None:
            flow.race.request_stop()
        listen(entry, session)

    monkeypatch.setattr(flow, "_listen", stop_at_rung_two)
    race_from_runs_tab(qtbot, window, parent, ["optim.lr=0.1x,1x,4x,20x"], "1,2")
    qtbot.waitUntil(lambda: not flow.active, timeout=180_000)
    [folder] = races_of(parent)
    stopped = RaceRecord.load(folder)
    assert stopped.state == "stopped" and stopped.rung == 1 and stopped.winner is None
    losers = [v for v in stopped.variants if v.out]
    assert len(losers) == 2 and all(v.out.startswith("rung 1: ") for v in losers)
    text = window.log_pane.toPlainText()
    assert "Resume race in the window" in text and "--resume" in text

    # Resume race: in the Run menu and the Runs table's menu, on for the run with the stopped race
    monkeypatch.setattr(flow, "_listen", listen)
    assert window.action_resume_race in window.runs_view.menu_actions
    qtbot.waitUntil(window.action_resume_race.isEnabled, timeout=10_000)
    window.action_resume_race.trigger()
    qtbot.waitUntil(lambda: flow.active, timeout=30_000)
    race = flow.race
    assert race.folder == folder and not window.action_resume_race.isEnabled()
    loss = window.plots.loss
    for v in losers:  # grey at once, with their reason, their first rung's curve drawn from their records
        pen = loss.smooth[curve_of(v.index)].opts["pen"]
        assert pen.color().name() == OUT_COLOR and pen.style() == Qt.PenStyle.DashLine
        assert any(v.label in row and v.out in row for row in legend(window))
        window.plots.flush()
        assert loss.point_count(curve_of(v.index)) >= 2  # the branch point and at least one of its own
    qtbot.waitUntil(lambda: not flow.active, timeout=180_000)
    record = RaceRecord.load(folder)
    assert record.state == "done" and record.winner is not None
    assert record.variants[record.winner].out == "" and len(record.variants[record.winner].figures) == 2
    assert races_of(parent) == [folder]  # the same race went on, no new one
    assert loss.smooth[curve_of(record.winner)].opts["pen"].width() == 3
    assert window.viewing_run == parent and not window.action_resume_race.isEnabled()
    qtbot.waitUntil(lambda: not live_children(), timeout=20_000)


@pytest.fixture(scope="module")
def hogwild_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-epoch hogwild run of digits with two workers."""
    cfg = apply_overrides(Config(), [*DIGITS, "parallel.strategy=hogwild", "parallel.workers=2"])
    session = new_run(cfg, tmp_path_factory.mktemp("hogwild"))
    session.start()
    assert session.wait(300) == "finished", session.error
    assert session.run_dir is not None
    return Path(session.run_dir)


def test_a_race_of_two_worker_variants_draws_every_worker_in_its_variant_colour(
    qtbot: Any, make_window: Any, hogwild_template: Path, tmp_path: Path
) -> None:
    run = tmp_path / "runs" / hogwild_template.name
    shutil.copytree(hogwild_template, run)
    window = make_window()
    race_from_runs_tab(qtbot, window, run, ["optim.lr=0.5x,2x"], "1")
    race = window.race.race
    qtbot.waitUntil(lambda: not window.race.active, timeout=180_000)
    record = race.record
    assert record.state == "done" and record.winner is not None
    loss = window.plots.loss
    for curve in (0, curve_of(0), curve_of(1)):  # the parent and each variant: both workers' curves
        first, second = loss.smooth[curve], loss.smooth[curve_key(curve, 1)]
        least = 1 if curve == 0 else 2  # a variant's: its worker's point in the parent, then its own
        assert loss.point_count(curve) >= least and loss.point_count(curve_key(curve, 1)) >= least
        assert first.opts["pen"].color().name() == second.opts["pen"].color().name()
        assert first.opts["pen"].width() == second.opts["pen"].width()
    winner, loser = curve_of(record.winner), curve_of(1 - record.winner)
    for key in (winner, curve_key(winner, 1)):
        assert loss.smooth[key].opts["pen"].width() == 3
    for key in (loser, curve_key(loser, 1)):
        pen = loss.smooth[key].opts["pen"]
        assert pen.color().name() == OUT_COLOR and pen.style() == Qt.PenStyle.DashLine
    rows = legend(window)
    assert len(rows) == 3 and rows[0] == run.name  # one row per variant, not per worker
    # each worker's curve of a variant branches from that worker's curve in the parent
    for w in (0, 1):
        branch = float(loss.raw[curve_key(0, w)].xData[-1])
        assert float(loss.raw[curve_key(winner, w)].xData[0]) == branch
    # one step count: the plot's marker, the log and the step axis count one worker's steps
    step = race.plan.branch_step
    assert step == float(loss.raw[curve_key(0, 0)].xData[-1]) and step < race.plan.start_step
    assert [m.text for m in window.plots.data.markers if m.kind == "fork"] == [f"race of 2 from step {step:,}"]
    assert f"race: 2 variants from step {step:,}, won by" in window.log_pane.toPlainText()
