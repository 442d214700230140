"""A race on the Training tab, without Qt: whose records go on which curve, who leads, who is out and why, the
status line and how far the race got.

The parent run is curve 0 (its records up to the race's start); variant ``i`` is curve ``i + 1``. A run of
several workers (hogwild, ddp) draws each worker's curve, as the Training tab does for any run: worker 0's is
the curve itself, worker ``k``'s the curve ``curve_key(curve, k)``, grouped with it (its colour, grey once out,
bold as the leader, one legend row). A sweep's race draws the parent's raced worker alone. Each variant's
curves start at the parent's last points, so the variants branch from the parent's curves where the race began.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from core.services.race.race import Entry, RaceRecord, ranked
from core.services.runs.files import CONFIG, EVAL, RECOVERY, STATE, STEP

PARENT = 0
REASON_CHARS = 40  # a reason longer than this is cut in the legend (the log has it whole)
MEMBER = 1000  # a curve's worker k > 0 is the curve MEMBER * k + curve


def curve_of(index: int) -> int:
    """The curve of variant ``index``."""
    return index + 1


def curve_key(curve: int, worker: int) -> int:
    """The key of ``worker``'s curve of ``curve`` (worker 0's is the curve itself)."""
    return curve if worker <= 0 else MEMBER * worker + curve


def groups(variants: int, workers: int) -> dict[int, int]:
    """Every worker's curve of the parent and of ``variants`` variants of ``workers`` workers -> its curve."""
    return {curve_key(c, k): c for c in range(variants + 1) for k in range(1, workers)}


def _worker(rec: dict[str, Any]) -> int:
    return int(rec.get("worker") or 0)


class RaceCurves:
    """Records of the parent and of each variant, keyed by curve, for one ``RunData``; ``from_worker``: a
    sweep's worker the race cloned (the parent's curve is that worker's)."""

    def __init__(self, parent_records: Iterable[dict[str, Any]], from_worker: int | None = None) -> None:
        self.parent: list[dict[str, Any]] = []
        for r in parent_records:
            kind = r.get("kind")
            if kind == CONFIG:
                self.parent.append(r)
            elif kind in (STEP, EVAL) and (from_worker is None or _worker(r) == from_worker):
                self.parent.append({**r, "worker": 0 if from_worker is not None else curve_key(PARENT, _worker(r))})
        # the branch points: each worker's last loss and the last evaluation, without their sample counts (a rate
        # needs two)
        self._last_step: dict[int, dict[str, Any]] = {}
        for r in self.parent:
            if r.get("kind") == STEP:
                self._last_step[int(r["worker"]) // MEMBER] = {k: v for k, v in r.items() if k != "samples"}
        last_eval = next((r for r in reversed(self.parent) if r.get("kind") == EVAL), None)
        self._last_eval = {k: v for k, v in last_eval.items() if k != "samples"} if last_eval else None
        first = self._last_step.get(0)
        self.branch_step = float(first["step"]) if first and "step" in first else 0.0
        self._branched: set[tuple[int, str]] = set()
        self.epochs: dict[int, int] = {}  # curve -> the last epoch it evaluated

    @staticmethod
    def start_record(t: float) -> dict[str, Any]:
        """The race's start, as a run's start is recorded: what follows is a new part of the curves."""
        return {"kind": STATE, "t": t, "worker": None, "state": "starting", "detail": "race"}

    @staticmethod
    def pause_record(t: float, paused: bool) -> dict[str, Any]:
        """The whole race paused (or going on again): a pause span on the plots."""
        return {"kind": STATE, "t": t, "worker": None, "state": "paused" if paused else "running", "detail": "race"}

    def variant(self, index: int, records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """A batch of variant ``index``'s records on its curves, a curve for each of its workers (its session's
        own states left out: the race is one run on the plots); each curve's first loss comes after its worker's
        last one in the parent, its first evaluation after the parent's last."""
        curve = curve_of(index)
        out: list[dict[str, Any]] = []
        for rec in records:
            kind = rec.get("kind")
            if kind == STATE and rec.get("worker") is None:
                continue
            if kind not in (STEP, EVAL, RECOVERY, STATE):
                continue
            worker = _worker(rec)
            key = curve_key(curve, worker)
            if kind in (STEP, EVAL) and (key, str(kind)) not in self._branched:
                self._branched.add((key, str(kind)))
                seed = self._last_step.get(worker, self._last_step.get(0)) if kind == STEP else self._last_eval
                if seed is not None:
                    out.append({**seed, "worker": key, "t": rec.get("t")})
            out.append({**rec, "worker": key})
            if kind == EVAL and isinstance(rec.get("epoch"), int):
                self.epochs[curve] = max(self.epochs.get(curve, 0), int(rec["epoch"]))
        return out


def _figure(entry: Entry) -> float | None:
    value = entry.figures[-1] if entry.figures else None
    return value if value is not None and math.isfinite(value) else None


def leader(record: RaceRecord, maximize: bool) -> Entry | None:
    """The winner once there is one; before, the best of the variants still racing at the furthest rung any has
    finished (none before the first rung's figures)."""
    if record.winner is not None:
        return record.variants[record.winner]
    alive = [v for v in record.alive() if _figure(v) is not None]
    if not alive:
        return None
    furthest = max(len(v.figures) for v in alive)
    return ranked([v for v in alive if len(v.figures) == furthest], maximize)[0]  # the race's own order


def out_reasons(record: RaceRecord) -> dict[int, str]:
    """Each eliminated variant's curve and why it is out (cut to REASON_CHARS)."""
    return {
        curve_of(v.index): v.out if len(v.out) <= REASON_CHARS else v.out[: REASON_CHARS - 1] + "…"
        for v in record.variants
        if v.out
    }


def status_line(record: RaceRecord, maximize: bool) -> str:
    """ "race: rung 2 of 3, 4 → 2 variants, leader lr 0.15"; at the end, who won (or where it stopped)."""
    n, alive, rungs = len(record.variants), len(record.alive()), len(record.rungs)
    best = leader(record, maximize)
    if record.state == "done" and best is not None:
        figure = _figure(best)
        value = f" ({record.metric} {figure:.4f})" if figure is not None else ""
        return f"race: won by {best.label}{value}, of {n} variants in {rungs} rung(s)"
    rung = min(record.rung + 1, rungs)
    where = f"rung {rung} of {rungs}, {n} → {alive} variants"
    if record.state == "stopped":
        return f"race: stopped at {where}"
    return f"race: {where}" + (f", leader {best.label}" if best is not None else "")


def planned_epochs(variants: int, rungs: list[int], survivors: Callable[[int, int], int]) -> int:
    """The epochs the race trains in all, variants together, if none fails (``survivors``: RacePlan's)."""
    total, alive, before = 0, variants, 0
    for r, epochs in enumerate(rungs):
        total += alive * (epochs - before)
        alive, before = survivors(alive, r), epochs
    return total


def done_fraction(curves: RaceCurves, start_epoch: int, planned: int) -> float:
    """How much of the race's planned training is done, from the epochs each variant evaluated."""
    done = sum(max(0, epoch - start_epoch) for epoch in curves.epochs.values())
    return min(1.0, done / planned) if planned > 0 else 0.0


def snapshot(record: RaceRecord) -> tuple[Any, ...]:
    """What the window shows of a race's record: when it changes, the curves and the status bar follow."""
    return (record.state, record.rung, record.winner, tuple((v.out, len(v.figures)) for v in record.variants))
