"""The one reducer of a run's records into what they say about the run (no processes, no files, no torch).

``RunStats`` takes records (the dicts of :mod:`core.records`) in the order of
``metrics.jsonl`` and keeps the facts every view of a run needs: each
worker's last step and evaluation, its best accuracy, where it is in its
epoch, its mean loss of the epoch in progress, when training ran and was
paused, the session's state, where the workers run. The session builds
``summary.json`` from it; the command line's progress line, the window's
run data and progress bar, the runs table and a view of a run started
elsewhere read the same facts from their own instance.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from core.records import DONE, EVAL, STATE, STEP


@dataclass
class EpochPosition:
    """Where a worker is in its epoch, from its step records' sample counts."""

    epoch: int
    start: float                # the worker's samples when this epoch began (0 for a first epoch)
    samples: float              # its latest samples
    measured: float | None = None  # the samples of its previous epoch, once one has ended

    def share(self, samples_per_epoch: float | None = None) -> float:
        """The share of this epoch done (0..0.999), over the measured epoch or else ``samples_per_epoch``."""
        size = self.measured if self.measured is not None else samples_per_epoch
        if not size or size <= 0:
            return 0.0
        return min(0.999, max(0.0, (self.samples - self.start) / size))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class RunStats:
    last_step: dict[int, dict[str, Any]] = field(default_factory=dict)     # worker -> its last step record
    epoch_loss: dict[int, tuple[int, float, int]] = field(default_factory=dict)  # worker -> (epoch, sum, n)
    last_eval: dict[int, dict[str, Any]] = field(default_factory=dict)     # worker -> its last eval record
    latest_eval: dict[str, Any] | None = None                              # the last eval record of any worker
    eval_epoch: int = 0                                                    # the highest epoch evaluated
    last_accuracy: dict[int, float] = field(default_factory=dict)          # worker -> its last val_accuracy
    best_accuracy: dict[int, float] = field(default_factory=dict)          # worker -> its best val_accuracy
    task: str = "classification"  # "regression" once an evaluation carries val_rmse and no accuracy
    position: dict[int, EpochPosition] = field(default_factory=dict)       # worker -> where it is in its epoch
    done: dict[int, dict[str, Any]] = field(default_factory=dict)          # worker -> its final record
    first_step_t: float | None = None
    last_step_t: float | None = None
    pauses: list[list[float | None]] = field(default_factory=list)        # [start, end] (end None while paused)
    state: str | None = None                                               # the session's latest state
    launcher: str | None = None                                            # as the state records name it
    where: dict[int, dict[str, Any]] = field(default_factory=dict)         # worker -> pid, node, local_rank
    worker_details: dict[int, str] = field(default_factory=dict)           # worker -> its starting detail

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        for rec in records:
            self.record(rec)

    def record(self, rec: dict[str, Any]) -> None:
        """Take one record."""
        kind = rec.get("kind")
        if kind == STEP:
            self._on_step(rec)
        elif kind == EVAL:
            self._on_eval(rec)
        elif kind == DONE:
            self.done[rec["worker"]] = rec
        elif kind == STATE:
            self._on_state(rec)

    def _on_step(self, rec: dict[str, Any]) -> None:
        w = rec.get("worker")
        self.last_step[w] = rec
        t = rec.get("t")
        if _number(t):
            if self.first_step_t is None:
                self.first_step_t = t
            self.last_step_t = t
        loss = rec.get("loss")
        if _number(loss):
            epoch, total, count = self.epoch_loss.get(w, (0, 0.0, 0))
            if rec.get("epoch") != epoch:
                epoch, total, count = rec.get("epoch", 1), 0.0, 0
            self.epoch_loss[w] = (epoch, total + loss, count + 1)
        self._advance(int(w or 0), int(rec.get("epoch", 1)), float(rec.get("samples", 0)))

    def _advance(self, w: int, epoch: int, samples: float) -> None:
        at = self.position.get(w)
        if at is None:
            self.position[w] = EpochPosition(epoch, 0.0 if epoch == 1 else samples, samples)
        elif epoch != at.epoch:
            self.position[w] = EpochPosition(epoch, samples, samples, measured=samples - at.start)
        else:
            at.samples = samples

    def _on_eval(self, rec: dict[str, Any]) -> None:
        w = rec.get("worker")
        self.last_eval[w] = rec
        self.latest_eval = rec
        epoch = rec.get("epoch")
        if _number(epoch) and epoch > self.eval_epoch:
            self.eval_epoch = int(epoch)
        if "val_rmse" in rec and "val_accuracy" not in rec:
            self.task = "regression"
        acc = rec.get("val_accuracy")
        if _number(acc):
            key = int(w or 0)
            self.last_accuracy[key] = float(acc)
            self.best_accuracy[key] = max(float(acc), self.best_accuracy.get(key, float("-inf")))

    def _on_state(self, rec: dict[str, Any]) -> None:
        state = rec.get("state")
        if rec.get("launcher"):
            self.launcher = str(rec["launcher"])
        if rec.get("worker") is not None:
            if state == "starting":
                self.worker_details[int(rec["worker"])] = str(rec.get("detail") or "")
                if "node" in rec:
                    self.where[rec["worker"]] = {k: rec.get(k) for k in ("pid", "node", "local_rank")}
            if state == "running" and self.first_step_t is None and _number(rec.get("t")):
                self.first_step_t = rec["t"]  # sent just before a worker's first step
            return
        self.state = None if state is None else str(state)
        if state == "starting":
            self.worker_details.clear()  # a new part of the run starts its workers again
        t = float(rec["t"]) if _number(rec.get("t")) else time.time()
        if state == "paused" and not self.paused:
            self.pauses.append([t, None])
        elif state != "paused" and self.paused:
            self.pauses[-1][1] = t

    def nodes(self) -> list[str]:
        return sorted({str(w["node"]) for w in self.where.values() if w.get("node")})

    @property
    def paused(self) -> bool:
        return bool(self.pauses) and self.pauses[-1][1] is None

    def train_seconds(self) -> float:
        """From the first step of any worker to the last of any, minus paused time."""
        if self.first_step_t is None or self.last_step_t is None:
            return 0.0
        lo, hi = self.first_step_t, self.last_step_t
        paused = 0.0
        for start, end in self.pauses:
            assert start is not None
            end = time.time() if end is None else end
            paused += max(0.0, min(end, hi) - max(start, lo))
        return max(0.0, hi - lo - paused)

    def train_loss(self, workers: Iterable[int] | None = None) -> float | None:
        """Mean over the chosen workers of their mean loss in their latest epoch."""
        chosen = [self.epoch_loss[w] for w in (self.epoch_loss if workers is None else workers)
                  if w in self.epoch_loss]
        if not chosen:
            return None
        return sum(total / max(1, count) for _, total, count in chosen) / len(chosen)

    def latest_losses(self) -> dict[int, float]:
        """Each worker's loss in its last step record."""
        return {w: r["loss"] for w, r in self.last_step.items() if _number(r.get("loss"))}

    def samples(self) -> int:
        """Training samples processed, all workers together, as their last step records count them."""
        return sum(int(r["samples"]) for r in self.last_step.values() if _number(r.get("samples")))
