"""The one reducer of a run's records into what they say about the run (no processes, no files, no torch).

``RunStats`` takes records (the dicts of :mod:`core.runfiles.records`) in the order of
``metrics.jsonl`` and keeps the facts every view of a run needs: each
worker's last step and evaluation, its best accuracy, where it is in its
epoch, its mean loss of the epoch in progress, when training ran and was
paused, the session's state, where the workers run, and how far the run got
(:class:`RunCount`: the epochs every worker completed, a search's trials done).
The session builds ``summary.json`` from it; the command line's progress
line, the window's run data and progress bar, the runs table and a view of a
run started elsewhere read the same facts from their own instance.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard, cast

from core.metric_names import METRICS, higher_is_better
from core.runfiles.records import DONE, EVAL, STATE, STEP, TRIAL

if TYPE_CHECKING:
    from core.runfiles.shape import RunShape

# a search's trials that have run their course (a stopped one has not: the study holds it as failed, yet the
# search did not spend it)
TRIALS_DONE = ("complete", "pruned", "failed")


@dataclass
class EpochPosition:
    """Where a worker is in its epoch, from its step records' sample counts."""

    epoch: int
    start: float  # the worker's samples when this epoch began (0 for a first epoch)
    samples: float  # its latest samples
    measured: float | None = None  # the samples of its previous epoch, once one has ended

    def share(self, samples_per_epoch: float | None = None) -> float:
        """The share of this epoch done (0..0.999), over the measured epoch or else ``samples_per_epoch``."""
        size = self.measured if self.measured is not None else samples_per_epoch
        if not size or size <= 0:
            return 0.0
        return min(0.999, max(0.0, (self.samples - self.start) / size))


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _trial(rec: dict[str, Any]) -> bool:
    """A record of a search's trial: its epochs are the trial's, not the run's."""
    return isinstance(rec.get("trial"), int)


@dataclass(frozen=True)
class RunCount:
    """How far a run got, as one number that the progress bar, the log's end line, ``summary.json``
    (``progress``) and the runs table all show: the epochs every worker has completed (workers training
    models of their own, a sweep's, at their own pace: the slowest one's, and it says so), or a search's
    trials done, out of those asked."""

    done: int
    of: int = 0  # epochs or trials asked (0: not known)
    unit: str = "epochs"  # "epochs" | "trials"
    slowest: bool = False  # the count is the slowest worker's: the others may be further on

    def text(self) -> str:
        """ "1143 of 3000 epochs", "2 of 40 epochs (slowest worker)", "7 of 10 trials"."""
        unit = self.unit[:-1] if self.of == 1 or (not self.of and self.done == 1) else self.unit
        text = f"{self.done} of {self.of} {unit}" if self.of else f"{self.done} {unit}"
        return text + (" (slowest worker)" if self.slowest else "")

    def short(self) -> str:
        """A table cell: "1143/3000", "2/40 slowest", "7/10 trials"."""
        text = f"{self.done}/{self.of}" if self.of else str(self.done)
        return text + (" trials" if self.unit == "trials" else " slowest" if self.slowest else "")

    def as_dict(self) -> dict[str, Any]:
        return {"done": self.done, "of": self.of, "unit": self.unit, "slowest": self.slowest}

    @classmethod
    def of_summary(cls, summary: Mapping[str, Any] | None, of: int = 0) -> RunCount:
        """The count a ``summary.json`` holds; one written before it held ``progress``: its ``epochs_done``
        out of ``of``."""
        summary = summary or {}
        p = summary.get("progress")
        if isinstance(p, Mapping) and _number(p.get("done")) and p.get("unit") in ("epochs", "trials"):
            return cls(
                int(p["done"]), int(p["of"]) if _number(p.get("of")) else of, str(p["unit"]), bool(p.get("slowest"))
            )
        done = summary.get("epochs_done")
        return cls(int(done) if _number(done) else 0, of)


@dataclass
class RunStats:
    last_step: dict[int, dict[str, Any]] = field(default_factory=dict)  # worker -> its last step record
    epoch_loss: dict[int, tuple[int, float, int]] = field(default_factory=dict)  # worker -> (epoch, sum, n)
    last_eval: dict[int, dict[str, Any]] = field(default_factory=dict)  # worker -> its last eval record
    latest_eval: dict[str, Any] | None = None  # the last eval record of any worker
    eval_epoch: int = 0  # the highest epoch evaluated
    last_accuracy: dict[int, float] = field(default_factory=dict)  # worker -> its last val_accuracy
    best_accuracy: dict[int, float] = field(default_factory=dict)  # worker -> its best val_accuracy
    best_values: dict[int, dict[str, float]] = field(default_factory=dict)  # worker -> metric -> its best value
    task: str = "classification"  # "regression" once an evaluation carries val_rmse and no accuracy
    position: dict[int, EpochPosition] = field(default_factory=dict)  # worker -> where it is in its epoch
    done: dict[int, dict[str, Any]] = field(default_factory=dict)  # worker -> its final record
    first_step_t: float | None = None
    last_step_t: float | None = None
    pauses: list[list[float | None]] = field(default_factory=list)  # [start, end] (end None while paused)
    state: str | None = None  # the session's latest state
    launcher: str | None = None  # as the state records name it
    where: dict[int, dict[str, Any]] = field(default_factory=dict)  # worker -> pid, node, local_rank
    worker_details: dict[int, str] = field(default_factory=dict)  # worker -> its starting detail
    completed: dict[int, int] = field(default_factory=dict)  # worker -> epochs it has completed
    trials: dict[int, str] = field(default_factory=dict)  # a search's trial -> its latest state

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
            if _number(rec.get("epoch")) and not _trial(rec):  # its final position: the epoch it would train next
                self._complete(int(rec["worker"] or 0), int(rec["epoch"]) - 1)
        elif kind == STATE:
            self._on_state(rec)
        elif kind == TRIAL and isinstance(rec.get("trial"), int):
            self.trials[rec["trial"]] = str(rec.get("state"))

    def _complete(self, worker: int, epochs: int) -> None:
        self.completed[worker] = max(self.completed.get(worker, 0), epochs)

    def _on_step(self, rec: dict[str, Any]) -> None:
        w = cast(int, rec.get("worker"))  # a step record's worker (records.step_record): an int
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
        if not _trial(rec):  # a step of epoch E: the epochs before it are complete
            self._complete(int(w or 0), int(rec.get("epoch", 1)) - 1)

    def _advance(self, w: int, epoch: int, samples: float) -> None:
        at = self.position.get(w)
        if at is None:
            self.position[w] = EpochPosition(epoch, 0.0 if epoch == 1 else samples, samples)
        elif epoch != at.epoch:
            self.position[w] = EpochPosition(epoch, samples, samples, measured=samples - at.start)
        else:
            at.samples = samples

    def _on_eval(self, rec: dict[str, Any]) -> None:
        w = cast(int, rec.get("worker"))  # an eval record's worker (records.eval_record): an int
        self.last_eval[w] = rec
        self.latest_eval = rec
        epoch = rec.get("epoch")
        if _number(epoch) and epoch > self.eval_epoch:
            self.eval_epoch = int(epoch)
        if _number(epoch) and not _trial(rec):  # evaluated after the epoch's last batch
            self._complete(int(w or 0), int(epoch))
        if "val_rmse" in rec and "val_accuracy" not in rec:
            self.task = "regression"
        acc = rec.get("val_accuracy")
        if _number(acc):
            key = int(w or 0)
            self.last_accuracy[key] = float(acc)
            self.best_accuracy[key] = max(float(acc), self.best_accuracy.get(key, float("-inf")))
        best = self.best_values.setdefault(int(w or 0), {})
        for metric in METRICS:
            value = rec.get(metric)
            if _number(value) and (
                metric not in best or (value > best[metric] if higher_is_better(metric) else value < best[metric])
            ):
                best[metric] = float(value)

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
            self.trials.clear()  # and a continued search its own budget of trials
        t = float(rec["t"]) if _number(rec.get("t")) else time.time()
        if state == "paused" and not self.paused:
            self.pauses.append([t, None])
        elif state != "paused" and self.paused:
            self.pauses[-1][1] = t

    def best_value(self, metric: str) -> float | None:
        """The best value of ``metric`` any worker's evaluation reached, None before one carried it."""
        values = [best[metric] for best in self.best_values.values() if metric in best]
        if not values:
            return None
        return max(values) if higher_is_better(metric) else min(values)

    def last_value(self, metric: str, worker: int | None = None) -> float | None:
        """``metric`` at ``worker``'s last evaluation (None: the best of every worker's last)."""
        values = [
            float(rec[metric])
            for w, rec in self.last_eval.items()
            if (worker is None or w == worker) and _number(rec.get(metric))
        ]
        if not values:
            return None
        return max(values) if higher_is_better(metric) else min(values)

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
        chosen = [self.epoch_loss[w] for w in (self.epoch_loss if workers is None else workers) if w in self.epoch_loss]
        if not chosen:
            return None
        return sum(total / max(1, count) for _, total, count in chosen) / len(chosen)

    def latest_losses(self) -> dict[int, float]:
        """Each worker's loss in its last step record."""
        return {w: r["loss"] for w, r in self.last_step.items() if _number(r.get("loss"))}

    def samples(self) -> int:
        """Training samples processed, all workers together, as their last step records count them."""
        return sum(int(r["samples"]) for r in self.last_step.values() if _number(r.get("samples")))

    def epochs_done(self, workers: Iterable[int] | None = None, start: Mapping[int, int] | None = None) -> int:
        """The epochs every one of ``workers`` (default: those heard from) has completed: the slowest one's
        count; ``start``: what a worker had completed when this part of the run began, for one that has said
        nothing since."""
        start = start or {}
        chosen = list(self.completed) if workers is None else list(workers)
        return min((max(self.completed.get(w, 0), start.get(w, 0)) for w in chosen), default=0)

    @property
    def trials_done(self) -> int:
        """A search's trials that have run their course (complete, pruned or failed)."""
        return sum(state in TRIALS_DONE for state in self.trials.values())

    def count(
        self, of: int, workers: int, trials: bool = False, slowest: bool = False, start: Mapping[int, int] | None = None
    ) -> RunCount:
        """How far the run got (see :class:`RunCount`): ``trials`` for a search (``of`` its budget), else the
        epochs of ``workers`` workers (``slowest``: they train models of their own)."""
        if trials:
            return RunCount(self.trials_done, of, "trials")
        return RunCount(self.epochs_done(range(workers), start), of, "epochs", slowest and workers > 1)


def run_count(stats: RunStats, shape: RunShape, start: Mapping[int, int] | None = None) -> RunCount:
    """The count of a run of ``shape`` (its epochs, or its trial budget) from ``stats``."""
    return stats.count(
        shape.trials if shape.trials is not None else shape.epochs,
        shape.workers,
        trials=shape.trials is not None,
        slowest=shape.slowest,
        start=start,
    )
