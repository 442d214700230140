"""Series buffers and run curves: no widgets, fast."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.viewmodels.run_data import LOSS, LR, LSTEP, RATE, SMOOTH, ProgressTracker, RunData, format_duration
from app.viewmodels.series import Series, ema


def test_series_grows_by_doubling_and_keeps_rows() -> None:
    s = Series(2, capacity=4)
    for i in range(100):
        s.append([(i, i * 2)])
    assert len(s) == 100
    assert s.capacity == 128
    np.testing.assert_array_equal(s.column(0), np.arange(100))
    np.testing.assert_array_equal(s.column(1), np.arange(100) * 2)


def test_series_is_bounded_and_keeps_the_newest_point() -> None:
    s = Series(1, capacity=4, max_points=1000)
    for start in range(0, 10_000, 7):
        s.append(np.arange(start, start + 7, dtype=float).reshape(-1, 1))
    assert len(s) <= 1000
    assert s.capacity <= 1000
    assert s.compactions > 0
    col = s.column(0)
    assert col[-1] == 10_002  # the newest value survives every halving
    assert np.all(np.diff(col) > 0)  # still in order


def test_ema_continues_across_chunks() -> None:
    x = np.random.default_rng(0).normal(size=500)
    whole = ema(x, 0.9)
    first = ema(x[:200], 0.9)
    second = ema(x[200:], 0.9, prev=float(first[-1]))
    np.testing.assert_allclose(np.concatenate([first, second]), whole)
    np.testing.assert_array_equal(ema(x, 0.0), x)


def _steps(workers: int, n: int, t0: float = 1000.0, dt: float = 0.01) -> list[dict]:
    recs = []
    for i in range(n):
        for w in range(workers):
            recs.append(
                {
                    "kind": "step",
                    "t": t0 + i * dt,
                    "worker": w,
                    "epoch": 1 + i // 100,
                    "step": i + 1,
                    "samples": (i + 1) * 32,
                    "loss": 2.0 / (1 + i) + w,
                    "lr": 0.1,
                }
            )
    return recs


def test_run_data_builds_per_worker_mean_and_throughput() -> None:
    data = RunData(smoothing=0.0)
    changes = data.add(_steps(3, 300))
    assert changes.loss == {0, 1, 2}
    assert data.workers == [0, 1, 2]
    assert all(len(data.loss[w]) == 300 for w in range(3))
    # mean of the three workers' losses (offsets 0, 1, 2 -> +1), at each step they share
    assert data.mean.rows()[-1][LOSS] == pytest.approx(1.0 + 2.0 / 300)
    assert len(data.mean) == 300
    # 32 samples every 10 ms per worker = 3200 samples/s each
    assert data.rate[0].column(RATE)[-1] == pytest.approx(3200, rel=0.05)
    assert data.total_rate() == pytest.approx(9600, rel=0.05)


def test_smoothing_change_recomputes_every_curve() -> None:
    data = RunData(smoothing=0.0)
    data.add(_steps(2, 200))
    np.testing.assert_array_equal(data.loss[0].column(SMOOTH), data.loss[0].column(LOSS))
    data.set_smoothing(0.9)
    np.testing.assert_allclose(data.loss[0].column(SMOOTH), ema(data.loss[0].column(LOSS), 0.9))
    assert np.all(np.isfinite(data.mean.column(SMOOTH)))


def test_throughput_ignores_the_pause() -> None:
    data = RunData()
    recs = _steps(1, 100)
    recs.append({"kind": "state", "t": 1001.0, "worker": None, "state": "paused"})
    recs += _steps(1, 100, t0=1011.0)  # 10 s later; samples restart at 32 here only for the test
    for r in recs[-100:]:
        r["samples"] += 3200
    data.add(recs)
    rates = data.rate[0].column(RATE)
    assert np.nanmin(rates) > 1000  # no dip from the 10 s pause
    assert np.isnan(rates).sum() == 1  # the line breaks at the pause instead of bridging it
    assert len(data.pauses) == 1 and data.pauses[0].start == pytest.approx(1.0)


def test_markers_pauses_and_separate_models() -> None:
    data = RunData()
    data.separate_models = True
    data.labels = {0: "lr 0.1", 1: "lr 0.01"}
    recs = _steps(2, 50)
    recs.append({"kind": "state", "t": 1000.6, "worker": None, "state": "paused"})
    recs.append(
        {
            "kind": "config",
            "t": 1000.7,
            "worker": None,
            "changes": {"optim.lr": {"from": 0.05, "to": 0.01}},
            "steps": {"0": 50, "1": 50},
        }
    )
    recs.append({"kind": "state", "t": 1000.8, "worker": None, "state": "running"})
    recs.append({"kind": "state", "t": 1002.0, "worker": None, "state": "starting"})  # continued
    data.add(recs)
    assert len(data.mean) == 0  # no mean across different models
    assert data.label(1) == "lr 0.01" and data.label(5) == "worker 5"
    assert [(m.kind, m.step, m.text) for m in data.markers] == [
        ("config", 50.0, "lr 0.05→0.01"),
        ("resume", 50.0, "resumed"),
    ]
    assert data.pauses[0].end == pytest.approx(0.8)


def test_learning_rate_keeps_only_its_changes() -> None:
    """A constant rate is two points, a step schedule stays a step, a cosine keeps its shape in few points."""
    data = RunData()

    def lr(step: int) -> float:
        if step <= 100:
            return 0.1  # constant, then a step down
        if step <= 200:
            return 0.01
        return 0.005 * (1 + math.cos(math.pi * (step - 200) / 2000))  # cosine from 0.01 to 0 over 2000 steps

    recs = _steps(1, 2200)
    for r in recs:
        r["lr"] = lr(r["step"])
    for k in range(0, len(recs), 37):  # in live-sized batches: the compaction carries across them
        changes = data.add(recs[k : k + 37])
        assert changes.lr <= {0}
    curve = data.lr_curve(0)
    assert curve[0, LSTEP] == 1 and curve[-1, LSTEP] == 2200  # from the first step to the latest
    head = [(s, v) for s, v in curve[:, [LSTEP, LR]].tolist() if s <= 101]
    assert head == [(1, 0.1), (100, 0.1), (101, 0.01)]  # the step down, drawn as a step
    assert len(curve) < 700  # of 2,200 records
    # every record lies on the drawn (linearly interpolated) curve to within the tolerance
    steps = np.arange(1, 2201)
    drawn = np.interp(steps, curve[:, LSTEP], curve[:, LR])
    assert np.abs(drawn - [lr(int(s)) for s in steps]).max() <= 0.002 * 0.1 + 1e-12
    same = {"kind": "step", "t": 1030.0, "worker": 0, "step": 2201, "loss": 0.1, "lr": lr(2200)}
    assert data.add([same]).lr == set() and data.lr_curve(0)[-1, LSTEP] == 2201  # no new point; the end moves
    old = {"kind": "step", "t": 2000.0, "worker": 1, "step": 5, "loss": 0.5}  # a record of an older run: no lr
    data.add([old])
    assert 1 not in data.lr


def test_progress_and_eta() -> None:
    p = ProgressTracker(epochs=10, workers=2, samples_per_epoch=3200)
    recs = _steps(2, 250)  # 2.5 epochs of 100 steps each, in 2.5 s
    for i in range(0, len(recs), 20):  # batches, as the MetricsReader delivers them
        p.add(recs[i : i + 20])
    assert p.epoch == 3
    assert p.progress == pytest.approx(0.25, abs=0.01)
    eta = p.eta_s()
    assert eta is not None and eta == pytest.approx(7.5, rel=0.1)  # 2.5 s for 25%
    p.add([{"kind": "state", "t": 1003.0, "worker": None, "state": "paused"}])
    assert p.eta_s() is None
    p.add([{"kind": "state", "t": 1004.0, "worker": None, "state": "finished"}])
    assert p.progress == 1.0


def test_format_duration() -> None:
    assert format_duration(None) == "–"
    assert format_duration(math.inf) == "–"
    assert format_duration(42.4) == "42s"
    assert format_duration(125) == "2m 05s"
    assert format_duration(7260) == "2h 01m"


def _slow_steps(n: int, step_s: float, t0: float = 1000.0, worker: int = 0, first: int = 1) -> list[dict]:
    return [
        {
            "kind": "step",
            "t": t0 + i * step_s,
            "worker": worker,
            "epoch": 1,
            "step": first + i,
            "samples": (first + i) * 32,
            "loss": 1.0,
            "lr": 0.1,
        }
        for i in range(n)
    ]


def test_a_slow_steps_throughput_is_drawn_as_its_records_come() -> None:
    """A full fine-tune's steps of 5 s each: a point from the second step on, not one flat line at the end."""
    data = RunData()
    for rec in _slow_steps(20, 5.0):
        data.add([rec])
        if rec["step"] == 3:
            assert len(data.rate.get(0, [])) >= 1, "no throughput after three steps of 5 s"
    rates = data.rate[0].column(RATE)
    assert len(rates) >= 15 and np.allclose(rates, 32 / 5.0)
    assert data.total_rate() == pytest.approx(32 / 5.0)


def test_the_total_throughput_drops_when_a_worker_finishes() -> None:
    """Two workers at 3200 samples/s each; one finishes: the total is the other's alone from then on."""
    data = RunData()
    both = _steps(2, 100)
    done = {"kind": "state", "t": 1000.0 + 99 * 0.01, "worker": 1, "state": "finished"}
    alone = [r for r in _steps(1, 200) if r["step"] > 100]
    data.add(both + [done])
    data.add(alone)
    times, totals = data.total.column(1), data.total.column(RATE)
    end = data.timeline.time(done["t"])
    after = totals[times > end + 0.05]
    assert len(after) >= 1 and np.allclose(after, 3200, rtol=0.1), after


def test_the_eta_of_slow_steps_and_long_evaluations_holds_steady() -> None:
    """Steps of 3 s and 7 s in turn, an evaluation of 20 s after each epoch of 20 steps: the time left shown
    stays within a third of the true time left once a minute of the run is measured."""
    p = ProgressTracker(epochs=4, workers=1, samples_per_epoch=20 * 32)
    t, step, estimates = 1000.0, 0, []
    for epoch in range(1, 5):
        for i in range(20):
            t += 3.0 if i % 2 else 7.0
            step += 1
            p.add([{"kind": "step", "t": t, "worker": 0, "epoch": epoch, "step": step, "samples": step * 32}])
            estimates.append((t, p.eta_s()))
        t += 20.0
        p.add([{"kind": "eval", "t": t, "worker": 0, "epoch": epoch, "val_loss": 1.0}])
        estimates.append((t, p.eta_s()))
    end = t
    ratios = [eta / (end - at) for at, eta in estimates if at - 1000.0 >= 60 and end - at > 30 and eta]
    assert len(ratios) > 40 and 0.67 <= min(ratios) and max(ratios) <= 1.5, (min(ratios), max(ratios))
