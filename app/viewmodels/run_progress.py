"""A run's progress (0..1), how far it got and its ETA, for the progress bar (no Qt).

The facts come from the run's records through the one reducer,
:class:`core.session.reading.stats.RunStats`, whose :class:`~core.session.reading.stats.RunCount`
(the epochs every worker completed) is the count the bar shows, as the log's
end line, ``summary.json`` and the runs table do; this module turns the facts
into a share of the run done and a time left.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from core.services.runs.files import EVAL, LOG, STATE, STEP
from core.services.runs.reading import RunCount, RunStats

# The ETA divides what is left by an exponentially weighted rate of progress: each stretch between two
# deliveries counts with weight exp(-age / ETA_TAU_S), its progress and its seconds summed apart (the rate is
# their ratio, so a slow step, an evaluation and a fast burst are averaged by the time they took). A sliding
# window instead swung the ETA threefold as a step of seconds or an evaluation entered and left it.
ETA_TAU_S = 60.0
ETA_MIN_S = 1.0  # of measured running time before an ETA is shown


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
        self._last: tuple[float, float] | None = None  # (t, progress) at the latest delivery while running
        self._done_w = 0.0  # the weighted sums of the ETA's rate: progress made ...
        self._time_w = 0.0  # ... over seconds spent
        self.paused = False
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
            self._measure(t, self.progress)

    def _measure(self, t: float, progress: float) -> None:
        if self._last is not None and t > self._last[0]:
            dt = t - self._last[0]
            decay = math.exp(-dt / ETA_TAU_S)
            self._done_w = self._done_w * decay + max(0.0, progress - self._last[1])
            self._time_w = self._time_w * decay + dt
        if self._last is None or t >= self._last[0]:
            self._last = (t, progress)

    def _reach(self, worker: int, share: float) -> None:
        self._progress[worker] = max(self._progress.get(worker, 0.0), min(1.0, share))

    def _on_session_state(self, state: str | None, t: float | None = None) -> None:
        if state == "paused":
            self.paused = True
        elif state == "running":
            if self.paused and self._last is not None:  # the pause must not slow the ETA down: not measured
                self._last = (t, self._last[1]) if t is not None else None
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
        self._done_w *= scale
        if self._last is not None:
            self._last = (self._last[0], min(1.0, self._last[1] * scale))

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
        self.forget_pace()  # the time between the parts says nothing about the speed

    def forget_pace(self) -> None:
        """The ETA measures its rate afresh from the next delivery."""
        self._last, self._done_w, self._time_w = None, 0.0, 0.0

    def eta_s(self) -> float | None:
        """Seconds left at the exponentially weighted rate of progress (ETA_TAU_S); None if unknown."""
        if self.done or self.paused or self._last is None or self._time_w < ETA_MIN_S or self._done_w <= 0:
            return None
        return (1.0 - self._last[1]) * self._time_w / self._done_w


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
