"""A pure reducer of metric records into run statistics (no processes, no files, no torch).

The session feeds it every record it handles and builds ``summary.json``
from it; a view of a live or past run can feed it the same records.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable


@dataclass
class RunStats:
    last_step: dict[int, dict[str, Any]] = field(default_factory=dict)     # worker -> its last step record
    epoch_loss: dict[int, tuple[int, float, int]] = field(default_factory=dict)  # worker -> (epoch, sum, n)
    last_eval: dict[int, dict[str, Any]] = field(default_factory=dict)     # worker -> its last eval record
    done: dict[int, dict[str, Any]] = field(default_factory=dict)          # worker -> its final record
    first_step_t: float | None = None
    last_step_t: float | None = None
    pauses: list[list[float]] = field(default_factory=list)               # [start, end] (end 0 while paused)
    where: dict[int, dict[str, Any]] = field(default_factory=dict)         # worker -> pid, node, local_rank

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        for rec in records:
            kind = rec.get("kind")
            if kind == "step":
                self._on_step(rec)
            elif kind == "eval":
                self.last_eval[rec["worker"]] = rec
            elif kind == "_done":
                self.done[rec["worker"]] = rec
            elif kind == "state":
                self._on_state(rec)

    def _on_step(self, rec: dict[str, Any]) -> None:
        w = rec["worker"]
        self.last_step[w] = rec
        if self.first_step_t is None:
            self.first_step_t = rec["t"]
        self.last_step_t = rec["t"]
        epoch, total, count = self.epoch_loss.get(w, (0, 0.0, 0))
        if rec["epoch"] != epoch:
            epoch, total, count = rec["epoch"], 0.0, 0
        self.epoch_loss[w] = (epoch, total + rec["loss"], count + 1)

    def _on_state(self, rec: dict[str, Any]) -> None:
        state = rec.get("state")
        if rec.get("worker") is not None:
            if state == "starting" and "node" in rec:
                self.where[rec["worker"]] = {k: rec.get(k) for k in ("pid", "node", "local_rank")}
            if state == "running" and self.first_step_t is None:
                self.first_step_t = rec["t"]  # sent just before a worker's first step
            return
        paused = bool(self.pauses) and not self.pauses[-1][1]
        if state == "paused" and not paused:
            self.pauses.append([rec["t"], 0.0])
        elif state != "paused" and paused:
            self.pauses[-1][1] = rec["t"]

    def nodes(self) -> list[str]:
        return sorted({str(w["node"]) for w in self.where.values() if w.get("node")})

    @property
    def paused(self) -> bool:
        return bool(self.pauses) and not self.pauses[-1][1]

    def train_seconds(self) -> float:
        """From the first step of any worker to the last of any, minus paused time."""
        if self.first_step_t is None or self.last_step_t is None:
            return 0.0
        lo, hi = self.first_step_t, self.last_step_t
        paused = 0.0
        for start, end in self.pauses:
            end = end or time.time()
            paused += max(0.0, min(end, hi) - max(start, lo))
        return max(0.0, hi - lo - paused)

    def train_loss(self, workers: Iterable[int] | None = None) -> float | None:
        """Mean over the chosen workers of their mean loss in their latest epoch."""
        chosen = [self.epoch_loss[w] for w in (self.epoch_loss if workers is None else workers)
                  if w in self.epoch_loss]
        if not chosen:
            return None
        return sum(total / max(1, count) for _, total, count in chosen) / len(chosen)
