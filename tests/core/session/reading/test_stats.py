"""RunStats, the one reducer of records: fed a list of dicts, no processes or files."""

from __future__ import annotations

import pytest

from core.runfiles import records as R
from core.session.reading.stats import RunStats


def _run() -> list[dict]:
    recs: list[dict] = [
        R.state_record(None, "starting", t=99.0),
        R.state_record(0, "starting", "pid 11", t=99.5, launcher="torchrun", node="a", pid=11, local_rank=0),
        R.state_record(1, "starting", "pid 12", t=99.5),
        R.state_record(None, "running", t=99.8),
    ]
    for i in range(1, 21):  # two epochs of 10 steps, 32 samples each, per worker
        for w in (0, 1):
            recs.append(R.step_record(w, 1 + (i - 1) // 10, i, 32 * i, 1.0 / i, 0.1, t=100.0 + i))
        if i % 10 == 0:
            for w, acc in ((0, 0.5 + i / 100), (1, 0.9 - i / 100)):
                recs.append(
                    R.eval_record(w, i // 10, {"val_loss": 1.0 - acc, "val_accuracy": acc}, 32 * i, t=100.5 + i)
                )
    return recs


def test_facts_of_a_run() -> None:
    stats = RunStats()
    stats.add(_run())
    assert stats.state == "running" and stats.launcher == "torchrun"
    assert stats.worker_details == {0: "pid 11", 1: "pid 12"} and stats.nodes() == ["a"]
    assert stats.eval_epoch == 2 and stats.latest_eval is not None and stats.latest_eval["worker"] == 1
    assert stats.last_accuracy == {0: pytest.approx(0.7), 1: pytest.approx(0.7)}
    assert stats.best_accuracy == {0: pytest.approx(0.7), 1: pytest.approx(0.8)}
    assert stats.samples() == 2 * 640 and stats.latest_losses() == {0: 1 / 20, 1: 1 / 20}
    at = stats.position[0]
    # an epoch is measured from its first step record to the next epoch's first
    assert (at.epoch, at.start, at.measured) == (2, 352.0, 352.0)
    assert at.share() == pytest.approx((640 - 352) / 352)
    assert stats.train_seconds() == pytest.approx(19.0)  # first step to last


def test_pauses_count_out_of_training_time_and_a_new_part_restarts_its_workers() -> None:
    stats = RunStats()
    stats.add(_run()[:12])
    stats.add([R.state_record(None, "paused", t=105.0)])
    assert stats.paused
    stats.add([R.state_record(None, "running", t=108.0), R.step_record(0, 1, 5, 160, 0.2, 0.1, t=109.0)])
    assert not stats.paused and stats.pauses == [[105.0, 108.0]]
    assert stats.train_seconds() == pytest.approx(8.0 - 3.0)
    stats.add([R.state_record(None, "starting", t=120.0)])
    assert stats.worker_details == {}


def test_regression_is_told_by_its_evaluations() -> None:
    stats = RunStats()
    stats.add([R.eval_record(0, 1, {"val_loss": 2.0, "val_rmse": 1.4}, 10, t=1.0)])
    assert stats.task == "regression" and stats.best_accuracy == {}
