"""The worker-count advisor: short probes of each strategy on the user's own config.

Each probe is a real run (same data, model, optimizer, batch size) stopped
after a few seconds. It reports training samples/s (steady state: the first
records are skipped) and the time it took to reach a target validation
accuracy. The suggestion is the fastest probe whose accuracy kept up.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from core.config import BOUNDS, Config
from core.host.machine import usable_cores
from core.metric_names import SHORT_NAMES
from core.runfiles.records import EVAL, STEP
from core.session import Session
from core.strategies import advisable, strategy_class

__all__ = ["advisable", "advise", "candidates"]

Report = Callable[[str], None]


@dataclass
class Probe:
    strategy: str
    workers: int
    samples_per_s: float = 0.0
    best_accuracy: float | None = None  # of ``metric``: accuracy, R² for a regression (both higher is better)
    metric: str = "val_accuracy"
    time_to_target_s: float | None = None
    status: str = ""
    error: str | None = None

    @property
    def label(self) -> str:
        return f"{self.strategy} x{self.workers}"


def candidates(max_workers: int, strategies: tuple[str, ...] | None = None) -> list[tuple[str, int]]:
    """(strategy, workers) of every probe: each strategy's own worker counts up to ``max_workers``."""
    return [
        (name, n)
        for name in (advisable() if strategies is None else strategies)
        for n in strategy_class(name).probe_counts(max_workers)
    ]


def _steady_rate(steps: list[tuple[float, int]], skip_s: float) -> float:
    """Samples/s after the first ``skip_s`` seconds (start-up and first epoch warm-up excluded)."""
    if len(steps) < 2:
        return 0.0
    t0 = steps[0][0]
    tail = [(t, n) for t, n in steps if t - t0 >= skip_s] or steps
    if len(tail) < 2:
        tail = steps
    dt = tail[-1][0] - tail[0][0]
    return (tail[-1][1] - tail[0][1]) / dt if dt > 0 else 0.0


def run_probe(
    cfg: Config,
    strategy: str,
    workers: int,
    seconds: float,
    runs_dir: Path,
    cancelled: Callable[[], bool] = lambda: False,
) -> tuple[Probe, list[tuple[float, float]]]:
    """One probe; returns it and its (seconds since first step, val_accuracy) points."""
    probe = Probe(strategy, workers)
    probe_cfg = cfg.with_changes(
        {
            "parallel.strategy": strategy,
            "parallel.workers": workers,
            "train.epochs": int(BOUNDS["train.epochs"].hi),
            "parallel.sweep_lr": [],
        }
    )
    session = Session(probe_cfg, runs_dir=runs_dir, name=f"probe-{strategy}-{workers}")
    samples: dict[int, int] = {}
    totals: list[tuple[float, int]] = []
    evals: list[tuple[float, float]] = []

    def listen(records: list[dict[str, Any]]) -> None:
        for r in records:
            if r["kind"] == STEP:
                samples[r["worker"]] = r["samples"]
                totals.append((r["t"], sum(samples.values())))
            elif r["kind"] == EVAL:
                # R² for regression: like accuracy, higher is better and 1 is perfect
                probe.metric = "val_accuracy" if "val_accuracy" in r else "val_r2"
                evals.append((r["t"], r[probe.metric]))

    session.add_listener(listen)
    session.start()
    deadline = time.monotonic() + seconds + 30  # start-up allowance
    while time.monotonic() < deadline and not cancelled():
        if session.wait(0.05) is not None:
            break
        if totals and totals[-1][0] - totals[0][0] >= seconds:
            break
    session.stop(10)
    probe.status = session.state
    probe.error = session.error
    if totals:
        probe.samples_per_s = _steady_rate(totals, skip_s=min(1.0, seconds / 4))
        t0 = totals[0][0]
        points = [(t - t0, acc) for t, acc in evals]
        probe.best_accuracy = max((a for _, a in points), default=None)
        return probe, points
    return probe, []


def advise(
    cfg: Config,
    seconds: float = 3.0,
    max_workers: int | None = None,
    strategies: tuple[str, ...] | None = None,
    report: Report | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> dict[str, Any]:
    """Probe every combination and suggest one. Returns a JSON-able dict.

    ``cancelled`` is polled between and during probes (the window's Cancel).
    """
    max_workers = max_workers or usable_cores()
    probes: list[Probe] = []
    curves: list[list[tuple[float, float]]] = []
    with tempfile.TemporaryDirectory(prefix="traindesk-advisor-") as tmp:
        for strategy, workers in candidates(max_workers, strategies):
            if cancelled():
                break
            probe, points = run_probe(cfg, strategy, workers, seconds, Path(tmp), cancelled)
            probes.append(probe)
            curves.append(points)
            if report:
                report(
                    f"{probe.label:<12} {probe.samples_per_s:>12,.0f} samples/s  "
                    f"best {SHORT_NAMES[probe.metric]} "
                    f"{probe.best_accuracy if probe.best_accuracy is not None else float('nan'):.4f}"
                    + (f"  ({probe.error})" if probe.error else "")
                )
    reached = [p.best_accuracy for p in probes if p.best_accuracy is not None]
    # the target: 95% of the best accuracy any probe reached in its time
    target = 0.95 * max(reached) if reached else None
    for probe, points in zip(probes, curves):
        if target is not None:
            probe.time_to_target_s = next((round(t, 3) for t, acc in points if acc >= target), None)
    ok = [
        p
        for p in probes
        if p.status != "failed"
        and p.samples_per_s > 0
        and (target is None or (p.best_accuracy is not None and p.best_accuracy >= target))
    ]
    pool = ok or [p for p in probes if p.samples_per_s > 0]
    best = max(pool, key=lambda p: p.samples_per_s) if pool else None
    fastest = max((p.samples_per_s for p in probes), default=0.0)
    return {
        "probes": [asdict(p) for p in probes],
        "target_accuracy": target,
        "metric": next((p.metric for p in probes if p.best_accuracy is not None), "val_accuracy"),
        "suggestion": {"strategy": best.strategy, "workers": best.workers, "samples_per_s": best.samples_per_s}
        if best
        else None,
        "fastest_samples_per_s": fastest,
        "seconds_per_probe": seconds,
        "median_samples_per_s": statistics.median([p.samples_per_s for p in probes]) if probes else 0.0,
        "cancelled": cancelled(),
    }
