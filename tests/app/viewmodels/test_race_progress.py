"""What the window shows of a race, from records and a race's record alone (no Qt, no processes)."""

from __future__ import annotations

from app.viewmodels.race_progress import (
    RaceCurves,
    done_fraction,
    groups,
    leader,
    out_reasons,
    planned_epochs,
    status_line,
)
from app.viewmodels.run_data import RunData
from app.viewmodels.window_state import WindowState, derive
from core.services.race.race import Entry, RaceRecord


def step(worker: int | None, step: int, t: float, loss: float = 1.0, **extra: object) -> dict[str, object]:
    return {"kind": "step", "t": t, "worker": worker, "epoch": 1, "step": step, "loss": loss, **extra}


def evaluation(worker: int, epoch: int, t: float, acc: float) -> dict[str, object]:
    return {"kind": "eval", "t": t, "worker": worker, "epoch": epoch, "val_loss": 0.5, "val_accuracy": acc}


def record(*entries: Entry, rung: int = 0, state: str = "running", winner: int | None = None) -> RaceRecord:
    return RaceRecord("run", 2, 46, "val_accuracy", [1, 2], 1, list(entries), state=state, rung=rung, winner=winner)


def test_each_variant_branches_from_the_parents_last_points_on_its_own_curves() -> None:
    parent = [
        step(0, 10, 1.0, samples=640),
        step(1, 10, 1.0),  # a second worker of the parent: its own curve of the parent's
        evaluation(0, 2, 2.0, 0.9),
        {"kind": "log", "t": 2.0, "worker": None, "level": "info", "message": "run folder"},
        step(0, 20, 3.0, samples=1280),
    ]
    curves = RaceCurves(parent)
    assert [(r["worker"], r["step"]) for r in curves.parent if r["kind"] == "step"] == [(0, 10), (1000, 10), (0, 20)]
    assert curves.branch_step == 20
    batch = curves.variant(
        1,
        [
            {"kind": "state", "t": 10.0, "worker": None, "state": "starting"},  # the variant's session: left out
            {"kind": "state", "t": 10.5, "worker": 0, "state": "running"},
            step(0, 24, 11.0, samples=1536),
            step(1, 24, 11.0),
            evaluation(0, 3, 12.0, 0.95),
        ],
    )
    assert [(r["kind"], r["worker"]) for r in batch] == [
        ("state", 2),
        ("step", 2),  # worker 0's last step in the parent, at the variant's first time: the branch point
        ("step", 2),
        ("step", 1002),  # worker 1's curve of the variant branches from worker 1's in the parent
        ("step", 1002),
        ("eval", 2),  # the parent's last evaluation, then the variant's
        ("eval", 2),
    ]
    assert batch[1]["step"] == 20 and batch[1]["t"] == 11.0 and "samples" not in batch[1]
    assert batch[3]["step"] == 10
    assert curves.variant(1, [step(0, 28, 13.0)])[0]["step"] == 28  # branched once
    assert curves.epochs == {2: 3}
    data = RunData()
    data.groups = groups(2, 2)
    data.add(curves.parent)
    data.add([RaceCurves.start_record(9.0), *batch])
    assert data.loss[2].column(0).tolist() == [20.0, 24.0] and data.val[2].column(0).tolist() == [2.0, 3.0]
    assert data.loss[1002].column(0).tolist() == [10.0, 24.0]
    assert [m.kind for m in data.markers] == ["resume"]
    # a variant's other workers share its colour, pen and legend row
    assert groups(2, 2) == {1000: 0, 1001: 1, 1002: 2} and groups(3, 1) == {}
    data.labels = {0: "parent", 2: "lr 0.1"}
    assert data.label(1002) == "lr 0.1" and data.group(1002) == 2 and data.group(2) == 2


def test_a_sweeps_race_draws_the_parents_raced_worker_alone() -> None:
    parent = [step(0, 10, 1.0, loss=2.0), step(1, 10, 1.0, loss=1.0), evaluation(1, 1, 2.0, 0.9)]
    curves = RaceCurves(parent, from_worker=1)
    assert [(r["kind"], r["worker"], r.get("loss")) for r in curves.parent] == [("step", 0, 1.0), ("eval", 0, None)]


def test_the_leader_is_the_best_at_the_furthest_rung_and_losers_say_why() -> None:
    a = Entry(0, "lr 0.01", {"optim.lr": 0.01}, figures=[0.80], out="rung 1: 0.8000 < 0.9000")
    b = Entry(1, "as is", {}, figures=[0.90])
    c = Entry(2, "lr 0.2", {"optim.lr": 0.2}, figures=[0.93])
    d = Entry(3, "lr 1", {"optim.lr": 1.0}, out="failed: worker 0 (pid 123) died: exit code 1 after the loss diverged")
    rec = record(a, b, c, d)
    assert leader(record(Entry(0, "x", {}), Entry(1, "y", {})), True) is None  # no figure yet
    assert leader(rec, maximize=True) is c and leader(rec, maximize=False) is b
    c.figures.append(0.91)  # c finished rung 2 first: the furthest rung decides
    assert leader(rec, maximize=True) is c
    reasons = out_reasons(rec)
    assert reasons[1] == "rung 1: 0.8000 < 0.9000"
    assert reasons[4].startswith("failed: worker 0") and reasons[4].endswith("…") and len(reasons[4]) == 40
    rec.rung = 1
    assert status_line(rec, True) == "race: rung 2 of 2, 4 → 2 variants, leader lr 0.2"
    rec.state, rec.winner = "done", 2
    assert status_line(rec, True) == "race: won by lr 0.2 (val_accuracy 0.9100), of 4 variants in 2 rung(s)"
    rec.state, rec.winner = "stopped", None
    assert status_line(rec, True) == "race: stopped at rung 2 of 2, 4 → 2 variants"


def test_progress_counts_the_epochs_the_race_trains_variants_together() -> None:
    assert planned_epochs(4, [1, 2], lambda alive, rung: 2 if rung == 0 else 1) == 4 + 2
    curves = RaceCurves([])
    curves.variant(0, [evaluation(0, 3, 1.0, 0.9)])
    curves.variant(1, [evaluation(0, 4, 1.0, 0.9)])
    assert done_fraction(curves, 2, 6) == 3 / 6
    assert done_fraction(curves, 2, 0) == 0.0


def test_a_race_is_steered_as_a_run_and_nothing_else_starts_meanwhile() -> None:
    idle = derive(WindowState(race_source=True, fork_source=True, export_target=True))
    assert idle.enabled["action_race"] and not idle.enabled["action_pause"]
    running = derive(WindowState(race="running", race_source=True, fork_source=True, export_target=True))
    assert running.enabled["action_pause"] and running.enabled["action_stop"] and not running.enabled["action_resume"]
    for name in ("action_start", "action_race", "action_fork", "action_export", "action_open_run"):
        assert not running.enabled[name], name
    assert running.status == "Racing" and running.panel_mode == "locked"
    paused = derive(WindowState(race="paused"))
    assert paused.enabled["action_resume"] and paused.enabled["action_stop"] and not paused.enabled["action_pause"]
    assert paused.status == "Race paused" and paused.panel_mode == "locked"
    stopping = derive(WindowState(race="stopping"))
    assert not any(stopping.enabled[n] for n in ("action_pause", "action_resume", "action_stop"))


def test_race_is_on_for_the_windows_own_live_run_and_resume_race_for_a_race_that_stopped() -> None:
    live = {"run_active": True, "race_source": True, "race_live": True}
    for state in ("paused", "running"):  # Race… stops it first
        assert derive(WindowState(run_state=state, **live)).enabled["action_race"], state
    assert not derive(WindowState(run_state="paused", run_active=True, attached=True)).enabled["action_race"]
    assert not derive(WindowState(run_state="paused", preparing=True, **live)).enabled["action_race"]
    assert not derive(WindowState(run_state="paused", run_active=True, race_source=True)).enabled["action_race"]
    idle = derive(WindowState(race_source=True, race_resumable=True))
    assert idle.enabled["action_resume_race"] and idle.enabled["action_race"]
    assert not derive(WindowState(race_resumable=True)).enabled["action_race"]
    for busy in ({"race": "running"}, {"run_active": True, "run_state": "paused"}, {"closing": True}):
        assert not derive(WindowState(race_resumable=True, **busy)).enabled["action_resume_race"], busy
