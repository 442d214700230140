"""Where each record of a run lies: its step, epoch, time and trial (pure: no processes, no files, no torch).

Every view of a run places records through one :class:`Timeline`, fed the
records in the order of ``metrics.jsonl`` (a fork's preceded by its parent's
up to the branch), so a record can be drawn on any axis:

- ``step``: a step record's own; an evaluation's is its worker's latest step.
- ``epoch``: a step at ``epoch - 1 + the share of its epoch done`` (from the
  samples its worker processed, over the size of that worker's epoch; a step
  record without samples, an imported run's, by its step the same way); an
  evaluation at the epoch it closes.
- ``time``: seconds since the run's first training step. Each part of a run
  (the parent of a fork, the run before Continue, the fork itself) is timed
  from its own first training step and follows on where the previous part
  ended, so neither start-up nor the gap between the parts counts. Pauses
  are wall time of the part they are in and do count.
- ``trial``: the search trial the record belongs to (None outside a search).

Records of different workers arrive interleaved and slightly out of time
order; positions follow the records' own ``t``, so each worker's positions
never go backwards.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from core.runfiles.records import EVAL, STATE, STEP


@dataclass(frozen=True)
class Place:
    worker: int
    step: float
    epoch: float
    time: float
    trial: int | None


class Timeline:
    def __init__(self, samples_per_epoch: float | None = None) -> None:
        self.samples_per_epoch = samples_per_epoch  # a worker's epoch before one was measured (None: unknown)
        self.parts = 0  # parts of the run with training records (a fork's parent, the fork)
        self._new_part = True
        self._offset = 0.0  # time at which the current part starts
        self._part_t0: float | None = None  # wall time of the current part's first training record
        self.end = 0.0  # the latest time placed
        self._last_step: dict[tuple[int, int | None], float] = {}
        self._epoch: dict[tuple[int, int | None], tuple[int, float, float]] = {}  # -> (epoch, start, last samples)
        self._size: dict[tuple[int, int | None], float] = {}  # the measured size of the worker's last full epoch

    @classmethod
    def of(cls, records: list[dict[str, Any]]) -> Timeline:
        """A timeline for a whole, recorded run: an epoch's size is known from its first epoch on."""
        first: dict[int, float] = {}
        for rec in records:
            done = _done(rec)
            if rec.get("kind") == STEP and rec.get("epoch") == 1 and done is not None:
                w = int(rec.get("worker") or 0)
                first[w] = max(first.get(w, 0.0), done)
        sizes = sorted(first.values())
        return cls(samples_per_epoch=sizes[len(sizes) // 2] if sizes else None)

    @property
    def offset(self) -> float:
        """The time at which the current part starts."""
        return self._offset

    def time(self, t: float) -> float:
        """The run time of wall-clock ``t`` in the current part (its start while the part starts up)."""
        if self._part_t0 is None:
            return self._offset
        return max(self._offset, self._offset + t - self._part_t0)

    def observe(self, rec: dict[str, Any]) -> float | None:
        """Take one record into the clock; a step or evaluation record's time, else None (cheap: live views)."""
        kind = rec.get("kind")
        t = rec.get("t")
        if kind == STEP or kind == EVAL:
            if not isinstance(t, (int, float)):
                return None
            if self._part_t0 is None:
                self._part_t0 = float(t)
            if self._new_part:
                self.parts += 1
                self._new_part = False
            at = self._offset + t - self._part_t0
            if at < self._offset:
                at = self._offset
            if at > self.end:
                self.end = at
            return at
        if kind == STATE and isinstance(t, (int, float)):
            worker = rec.get("worker")
            if worker is None and rec.get("state") == "starting" and self._part_t0 is not None:
                self._offset, self._part_t0 = self.end, None  # a new part follows on where this one ended
                self._new_part = True
            elif worker is not None and rec.get("state") == "running" and self._part_t0 is None:
                self._part_t0 = float(t)  # sent just before the worker's first step
        return None

    def add(self, rec: dict[str, Any]) -> Place | None:
        """Take one record; a step or evaluation record's place, else None."""
        at = self.observe(rec)
        if at is None:
            return None
        w = int(rec.get("worker") or 0)
        trial = rec.get("trial") if isinstance(rec.get("trial"), int) else None
        key = (w, trial)
        if rec.get("kind") == STEP:
            step = float(rec.get("step", self._last_step.get(key, 0.0) + 1))
            self._last_step[key] = step
            return Place(w, step, self._step_epoch(key, rec), at, trial)
        step = float(rec["step"]) if isinstance(rec.get("step"), (int, float)) else self._last_step.get(key, 0.0)
        epoch = rec.get("epoch")
        return Place(
            w, step, float(epoch) if isinstance(epoch, (int, float)) else self._epoch.get(key, (0,))[0], at, trial
        )

    def place(self, records: Iterable[dict[str, Any]]) -> list[tuple[dict[str, Any], Place]]:
        """Each step and evaluation record with its place."""
        out = []
        for rec in records:
            p = self.add(rec)
            if p is not None:
                out.append((rec, p))
        return out

    def _step_epoch(self, key: tuple[int, int | None], rec: dict[str, Any]) -> float:
        epoch = int(rec.get("epoch", 1))
        samples = _done(rec)
        if samples is None:
            return float(epoch)
        known = self._epoch.get(key)
        if known is None:
            start = 0.0 if epoch == 1 else samples  # joined mid-run: this epoch counts from here
        elif known[0] != epoch:
            self._size[key] = known[2] - known[1]
            start = known[2]
        else:
            start = known[1]
        self._epoch[key] = (epoch, start, samples)
        size = self._size.get(key) or self.samples_per_epoch
        if not size or size <= 0:
            return float(epoch)  # the first epoch of unknown size: placed at its end
        return epoch - 1 + min(1.0, max(0.0, (samples - start) / size))


def _done(rec: dict[str, Any]) -> float | None:
    """How far a step record's worker got: its samples, else (an imported run's records count no samples) its step."""
    for key in ("samples", "step"):
        value = rec.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None
