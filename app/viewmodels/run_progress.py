"""A run's progress (0..1), how far it got and its ETA, for the progress bar (no Qt).

The facts come from the run's records through the one reducer,
:class:`core.session.reading.stats.RunStats`, whose :class:`~core.session.reading.stats.RunCount`
(the epochs every worker completed) is the count the bar shows, as the log's
end line, ``summary.json`` and the runs table do; this module turns the facts
into a share of the run done and a time left.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import Any

from core.services.runs.files import EVAL, LOG, STATE, STEP
from core.services.runs.reading import RunCount, RunStats

ETA_WINDOW_S = 30.0  # the ETA is measured over this much of the latest running time


class ProgressTracker:
    """Run progress (0..1), current epoch and ETA from step/eval/state records.

    Each worker's progress is ``(epoch - 1 + fraction of its epoch) / epochs``;
    the run's is the slowest worker's (the run ends with it, and its epochs
    are the run's count). The fraction uses the samples a worker processed
    in its current epoch over the samples of an epoch: the measured size of
    its previous epoch once there is one, else ``samples_per_epoch`` (the
    caller's estimate from the dataset size and strategy). ``slowest``: the
    workers train models of their own (a sweep), so the count says it is the
    slowest one's.
    """

    def __init__(
        self, epochs: int, workers: int, samples_per_epoch: float | None = None, slowest: bool = False
    ) -> None:
        self.epochs = max(1, epochs)
        self.workers = max(1, workers)
        self.samples_per_epoch = samples_per_epoch
        self.slowest = slowest
        self.final: RunCount | None = None  # the count of the run's summary, once it ended
        self.stats = RunStats()
        self._progress: dict[int, float] = {}
        self._history: deque[tuple[float, float]] = deque()
        self.paused = False
        self._paused_at: float | None = None  # when the session said it paused
        self.done = False
        self.stopped_early_at: int | None = None  # the last epoch of a run that early stopping ended

    @property
    def epoch(self) -> int:
        return max((p.epoch for p in self.stats.position.values()), default=0)

    @property
    def progress(self) -> float:
        if self.stopped_early_at is not None:
            return min(1.0, self.stopped_early_at / self.epochs)
        if self.done:
            return 1.0
        return min(1.0, min(self._progress.get(w, 0.0) for w in range(self.workers)))

    def count(self) -> RunCount:
        """How far the run got: the summary's count once it ended, else the records' (the same reducer)."""
        if self.final is not None:
            return self.final
        return self.stats.count(self.epochs, self.workers, slowest=self.slowest)

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        t: float | None = None
        for rec in records:
            self.stats.record(rec)
            if isinstance(rec.get("t"), (int, float)):
                t = float(rec["t"])
            kind = rec.get("kind")
            if kind == STEP:
                w = int(rec.get("worker") or 0)
                at = self.stats.position[w]
                self._reach(w, (at.epoch - 1 + at.share(self.samples_per_epoch)) / self.epochs)
            elif kind == EVAL:
                self._reach(int(rec.get("worker") or 0), int(rec.get("epoch", 0)) / self.epochs)
            elif kind == STATE and rec.get("worker") is None:
                self._on_session_state(self.stats.state, t)
        if t is not None and not self.paused:
            self._history.append((t, self.progress))
            while len(self._history) > 2 and t - self._history[0][0] > ETA_WINDOW_S:
                self._history.popleft()

    def _reach(self, worker: int, share: float) -> None:
        self._progress[worker] = max(self._progress.get(worker, 0.0), min(1.0, share))

    def _on_session_state(self, state: str | None, t: float | None = None) -> None:
        if state == "paused":
            if not self.paused:
                self._paused_at = t
            self.paused = True
        elif state == "running":
            if self.paused:  # the pause must not slow the ETA down: the pace before it is moved up to now
                shift = t - self._paused_at if t is not None and self._paused_at is not None else None
                if shift is None:
                    self._history.clear()
                else:
                    self._history = deque((ti + shift, p) for ti, p in self._history)
            self.paused = False
        elif state == "finished":
            self.done = True

    def set_epochs(self, epochs: int) -> None:
        """The run was asked for ``epochs`` (a live edit): the shares done and the history the ETA is measured
        on count in the new epochs at once, so the bar and the ETA say what is left at the pace measured."""
        epochs = max(1, epochs)
        scale = self.epochs / epochs
        self.epochs = epochs
        self._progress = {w: min(1.0, p * scale) for w, p in self._progress.items()}
        self._history = deque((t, min(1.0, p * scale)) for t, p in self._history)

    def end(self, status: str, summary: dict[str, Any] | None) -> None:
        """The run ended: a finished run is complete, unless early stopping ended it short of its epochs."""
        summary = summary or {}
        if summary:
            self.final = RunCount.of_summary(summary, self.epochs)
        done = summary.get("epochs_done")
        if status == "finished" and summary.get("stop_reason") and isinstance(done, int) and done < self.epochs:
            self.stopped_early_at = done
        self.done = status == "finished"

    def describe_end(self) -> str | None:
        """How the run ended, when that is not simply its state ("stopped early at epoch 9 of 60")."""
        if self.stopped_early_at is not None:
            return f"stopped early at epoch {self.stopped_early_at} of {self.epochs}"
        return None

    def resume_from(self, records: Iterable[dict[str, Any]]) -> None:
        """Count an earlier part of the run (a continued run's, a fork's parent's) without its ending."""
        self.add(records)
        self.done = False
        self.final = None
        self.stopped_early_at = None
        self.paused = False
        self._history.clear()  # the time between the parts says nothing about the speed

    def eta_s(self) -> float | None:
        """Seconds left, from the progress made over the last ~30 s of running; None if unknown."""
        if self.done or self.paused or len(self._history) < 2:
            return None
        (t0, p0), (t1, p1) = self._history[0], self._history[-1]
        if t1 - t0 < 1.0 or p1 <= p0:
            return None
        return (1.0 - p1) * (t1 - t0) / (p1 - p0)


def format_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"


def preparing(records: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The last count among ``records`` of a step before the workers start (a log record's ``progress``: a
    backbone's features), or None."""
    found = None
    for rec in records:
        counts = rec.get("progress")
        if rec.get("kind") == LOG and isinstance(counts, dict):
            found = counts
    return found


def preparing_text(counts: dict[str, Any]) -> tuple[str, float | None]:
    """The progress bar of such a step: "Backbone features 120 of 600 images · 40 images/s" and its share done
    (None while its total is unknown)."""
    what = str(counts.get("what") or "preparing")
    unit = str(counts.get("unit") or "")
    done, total, seconds = counts.get("done"), counts.get("total"), counts.get("seconds")
    if not isinstance(done, int) or not isinstance(total, int):
        return f"{what[:1].upper()}{what[1:]}…", None
    rate = f" · {done / seconds:,.0f} {unit}/s" if done and isinstance(seconds, (int, float)) and seconds > 0 else ""
    text = f"{what[:1].upper()}{what[1:]} {done:,} of {total:,} {unit}".rstrip() + rate
    return text, (min(1.0, done / total) if total > 0 else None)
