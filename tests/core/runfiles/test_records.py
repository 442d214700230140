"""Record constructors: the lines they give are those metrics.jsonl has always had (keys and their order)."""

from __future__ import annotations

import json

from core.runfiles import records as R


def _line(rec: dict) -> str:
    return json.dumps(rec, separators=(",", ":"))


def test_public_records_keep_their_keys_in_order() -> None:
    t = 1700000000.5
    assert _line(R.step_record(1, 2, 30, 640, 0.25, 0.05, t=t, trial=4)) == _line(
        {
            "kind": "step",
            "t": t,
            "worker": 1,
            "epoch": 2,
            "step": 30,
            "samples": 640,
            "loss": 0.25,
            "lr": 0.05,
            "trial": 4,
        }
    )
    metrics = {"val_loss": 0.3, "val_accuracy": 0.9}
    assert _line(R.eval_record(0, 3, metrics, 900, t=t)) == _line(
        {"kind": "eval", "t": t, "worker": 0, "epoch": 3, "val_loss": 0.3, "val_accuracy": 0.9, "samples": 900}
    )
    assert _line(R.state_record(None, "paused", "asked", t=t)) == _line(
        {"kind": "state", "t": t, "worker": None, "state": "paused", "detail": "asked"}
    )
    assert _line(R.state_record(2, "starting", "pid 7", t=t, node="n1")) == _line(
        {"kind": "state", "t": t, "worker": 2, "state": "starting", "detail": "pid 7", "node": "n1"}
    )
    assert _line(R.log_record(None, "info", "3 classes", t=t, topic="data")) == _line(
        {"kind": "log", "t": t, "worker": None, "level": "info", "message": "3 classes", "topic": "data"}
    )
    changes = {"optim.lr": {"from": 0.1, "to": 0.05}}
    assert _line(R.config_record(changes, {"0": 12}, t=t)) == _line(
        {"kind": "config", "t": t, "worker": None, "changes": changes, "steps": {"0": 12}}
    )
    assert _line(R.trial_record(1, 5, "complete", t=t, value=0.9)) == _line(
        {"kind": "trial", "t": t, "worker": 1, "trial": 5, "state": "complete", "value": 0.9}
    )


def test_internal_records_are_told_apart() -> None:
    position = {"epoch": 2, "batch": 3, "step": 40, "samples": 1280}
    done = R.done_record(0, "stopped", None, 1, position)
    assert done["kind"] == "_done" and done["epoch"] == 2 and done["optimizer"] is None and done["precision"] is None
    assert R.is_internal(done) and R.is_internal(R.diverged_record(0, "loss is nan"))
    snapshot = R.snapshot_record(0, 7, position, b"o", b"r", b"p")
    assert R.is_internal(snapshot) and (snapshot["optimizer"], snapshot["rng"], snapshot["precision"]) == (
        b"o",
        b"r",
        b"p",
    )
    assert R.is_internal(R.best_record(0, 2, 40, 0.9, b"w"))
    assert not R.is_internal(R.step_record(0, 1, 1, 32, 1.0, 0.1))
    assert set(R.INTERNAL).isdisjoint(R.PUBLIC)


def test_a_lost_worker_ends_without_a_position_to_continue_from() -> None:
    from core.session.reading.stats import RunStats
    from core.worker.position import Position

    lost = R.lost_record(1, "failed", "worker 1 was killed by SIGKILL")
    assert R.is_internal(lost) and lost["kind"] == R.DONE
    stats = RunStats()
    stats.add([lost])
    assert stats.done[1]["status"] == "failed" and stats.done[1]["error"] == "worker 1 was killed by SIGKILL"
    assert not Position.holds(lost) and lost.get("optimizer") is None  # the last consistent checkpoint is kept
