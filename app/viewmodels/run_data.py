"""The curves of one run, built from metric records (no Qt: testable and reusable by bench/).

Records are the dicts of ``metrics.jsonl`` (see DESIGN.md). The same code
feeds live batches from the MetricsReader and a past run read from disk, so
a replayed run looks exactly like it did live: every point is placed by the
run's :class:`~core.session.reading.timeline.Timeline` from the records' own ``t``,
never by the wall clock. Time is seconds since the first training step, the
start-up of each part and the gaps between parts (a fork and its parent, a
stopped run and its continuation) left out.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.viewmodels.run_progress import ProgressTracker, format_duration
from app.viewmodels.series import DEFAULT_MAX_POINTS, Series, ema, mean_on_grid, without_spikes
from core.services.runs.files import kinds
from core.services.runs.reading import RunStats, Timeline

__all__ = ["Changes", "Marker", "PauseSpan", "ProgressTracker", "RunData", "fork_marker", "format_duration"]

# Loss series columns.
STEP, TIME, LOSS, SMOOTH = 0, 1, 2, 3
# Validation series columns.
EPOCH, VTIME, VAL_LOSS, VAL_ACC = 0, 1, 2, 3  # VAL_ACC: the validation RMSE of a regression run
# Throughput series columns.
RSTEP, RTIME, RATE = 0, 1, 2
# Learning-rate series columns. Step records carry the lr; only the points where it changes are kept.
LSTEP, LTIME, LR = 0, 1, 2
LR_TOLERANCE = 0.002  # an lr this share of the run's highest lr away from the last kept point is a change

MEAN_DENSITY = 2  # the mean's grid holds at most this many points per point of its densest worker curve
RATE_WINDOW_S = 0.5  # samples/s measured over windows of this length
RATE_STALE_S = 1.5  # a worker silent this long (plus twice its usual gap between steps) no longer counts in the total
GAP_FACTOR = 3.0  # a silence this many times a worker's usual gap between steps (an evaluation) is no window
MIN_WINDOW_S = 0.1  # a worker's last, shorter window still gives a point when it ends


@dataclass
class Changes:
    """What one batch of records touched, so plots redraw only those curves."""

    loss: set[int] = field(default_factory=set)
    mean: bool = False
    val: set[int] = field(default_factory=set)
    rate: set[int] = field(default_factory=set)
    total: bool = False
    new_workers: set[int] = field(default_factory=set)
    events: bool = False  # a marker or a pause span was added or changed
    lr: set[int] = field(default_factory=set)  # workers whose learning rate changed (a kept point was added)

    def __bool__(self) -> bool:
        return bool(self.loss or self.mean or self.val or self.rate or self.total or self.events or self.lr)

    def merge(self, other: Changes) -> Changes:
        return Changes(
            self.loss | other.loss,
            self.mean or other.mean,
            self.val | other.val,
            self.rate | other.rate,
            self.total or other.total,
            self.new_workers | other.new_workers,
            self.events or other.events,
            self.lr | other.lr,
        )


@dataclass
class Marker:
    """A labelled moment of the run: settings changed, resumed, forked."""

    step: float
    t: float  # run time (see the Timeline)
    text: str
    kind: str  # "config" | "resume" | "fork" | "recovery"


@dataclass
class PauseSpan:
    """A pause, from its start to its end (``end`` nan while it lasts), in run time."""

    start: float
    end: float
    step: float


class RunData:
    """Per-worker loss, validation and throughput series plus their mean/total."""

    def __init__(self, t0: float | None = None, smoothing: float = 0.6, max_points: int = DEFAULT_MAX_POINTS) -> None:
        self.t0 = t0
        self.timeline = Timeline()  # where each record lies in run time
        self.stats = RunStats()  # what the records say about the run (its task, whether it is paused)
        # Each worker trains its own model (a sweep): a mean across them means nothing.
        self.separate_models = False
        self.labels: dict[int, str] = {}  # worker -> legend label ("lr 0.05"); default "worker N"
        # A search: each trial is its own model and its own curve, keyed by the records' "trial"
        # (loss, validation, lr); throughput stays per worker process.
        self.per_trial = False
        self.winner: int | None = None  # the worker whose model is the result, once known
        self.out: dict[int, str] = {}  # curves stopped early (a race's eliminated variants) -> why: drawn grey
        # a curve drawn as part of another (a race variant's other workers) -> that curve: its colour, its pen
        # (grey once out, bold as the winner), its legend row
        self.groups: dict[int, int] = {}
        self.markers: list[Marker] = []
        self.pauses: list[PauseSpan] = []
        self.next_start = ("resumed", "resume")  # label and kind of the marker where the next segment starts
        self.smoothing = smoothing
        self.max_points = max_points
        self.loss: dict[int, Series] = {}
        self.mean = Series(4, max_points=max_points)
        self.val: dict[int, Series] = {}
        self.rate: dict[int, Series] = {}
        self.total = Series(3, max_points=max_points)
        self.lr: dict[int, Series] = {}  # worker -> the points where its lr changed (a compact curve)
        self.lr_tail: dict[int, tuple[float, float, float]] = {}  # worker -> its latest (step, time, lr)
        self._lr_peak: dict[int, float] = {}
        self._lr_restart: set[int] = set()  # workers whose lr line was broken: their next point is kept
        # A worker's stretch of training: where it began (t, samples, step) and, when it was too short
        # for a line of windows, its (start, end, mean rate).
        self._stretch: dict[int, tuple[float, float, float]] = {}
        self._short: dict[int, tuple[float, float, float]] = {}
        self.last_t: float | None = None
        self._latest: dict[int, tuple[float, float, float]] = {}  # worker -> (step, loss, smoothed)
        self._mean_upto = -math.inf  # the last step of the mean's grid
        self._resmooth = False  # a recovery came: the smoothed curves are computed again without diverged losses
        self._anchor: dict[int, tuple[float, float, float]] = {}  # worker -> (t, samples, step)
        self._latest_rate: dict[int, tuple[float, float, float]] = {}  # worker -> (t, step, rate)
        self._last_sample: dict[int, tuple[float, float, float]] = {}  # worker -> (t, step, samples)
        self._gap: dict[int, float] = {}  # worker -> seconds between its latest two step records
        self.expected_workers = 0  # the mean waits for every worker (0: unknown)
        self._total_next_t = -math.inf
        self._lr_rows: dict[int, list[float]] = {}  # worker -> lr of each loss row of the batch being added

    def label(self, key: int) -> str:
        """The legend label of a loss/validation/lr curve: a trial's in a search, else its worker's; a curve
        that is out says why (a curve of a group: the group's)."""
        key = self.group(key)
        text = f"trial {key}" if self.per_trial else self.worker_label(key)
        why = self.out.get(key)
        return f"{text} · {why}" if why else text

    def worker_label(self, worker: int) -> str:
        return self.labels.get(self.group(worker), f"worker {worker}")

    def group(self, key: int) -> int:
        """The curve whose colour, pen and legend row the curve ``key`` shares (its own, unless grouped)."""
        return self.groups.get(key, key)

    def _curve(self, rec: dict[str, Any]) -> int:
        """Which curve a step or eval record extends: its trial's, in a search; else its worker's."""
        trial = rec.get("trial")
        if isinstance(trial, int) and not isinstance(trial, bool):
            if not self.per_trial:  # records of a search: trials are separate models, never averaged
                self.per_trial = self.separate_models = True
            return trial
        return int(rec.get("worker") or 0)

    @property
    def max_step(self) -> float:
        return max((v[0] for v in self._latest.values()), default=0.0)

    def add_marker(self, text: str, kind: str, step: float | None = None, t: float | None = None) -> Marker:
        rel = self.timeline.time(t if t is not None else (self.last_t or 0.0))
        marker = Marker(self.max_step if step is None else float(step), rel, text, kind)
        self.markers.append(marker)
        return marker

    def now(self) -> float:
        """The run time of the latest record."""
        return self.timeline.time(self.last_t) if self.last_t is not None else 0.0

    @property
    def workers(self) -> list[int]:
        return sorted(set(self.loss) | set(self.val) | set(self.rate))

    def total_rate(self) -> float:
        """The latest samples/s of all workers together (nan before the first window)."""
        return self.total.last(RATE)

    # -- feeding ---------------------------------------------------------------
    def add(self, records: Iterable[dict[str, Any]]) -> Changes:
        ch = Changes()
        loss_rows: dict[int, list[tuple[float, float, float]]] = {}
        for rec in records:
            kind = rec.get("kind")
            t = rec.get("t")
            if not isinstance(t, (int, float)):
                continue
            if self.t0 is None:
                self.t0 = float(t)
            self.last_t = float(t)
            at = self.timeline.observe(rec)
            was_paused = self.stats.paused
            self.stats.record(rec)
            if kind == kinds.STEP:
                self._on_step(rec, float(t), loss_rows, ch, self.timeline.offset if at is None else at)
            elif kind == kinds.EVAL:
                self._on_eval(rec, float(t), ch)
            elif kind == kinds.STATE:
                if rec.get("worker") is None and rec.get("state") == "starting":
                    self._flush_rows(loss_rows, ch)  # the part before it ends before the next begins
                self._on_state(rec, float(t), ch, was_paused)
            elif kind == kinds.CONFIG:
                self._on_config(rec, float(t), ch)
            elif kind == kinds.RECOVERY:
                self._on_recovery(rec, float(t), ch)
        self._flush_rows(loss_rows, ch)
        if self._resmooth:  # a worker recovered from a diverged loss: its smoothed curve leaves that loss out
            self._resmooth = False
            self.set_smoothing(self.smoothing)
            ch.loss.update(self.loss)
            ch.mean = ch.mean or bool(len(self.mean))
        return ch

    def _flush_rows(self, loss_rows: dict[int, list[tuple[float, float, float]]], ch: Changes) -> None:
        for w, rows in loss_rows.items():
            self._append_loss(self._loss_series(w, ch), rows)
            ch.loss.add(w)
            lrs = [(step, rel, lr) for (step, rel, _loss), lr in zip(rows, self._lr_rows.pop(w, ())) if lr == lr]
            if lrs:
                self._add_lr(w, lrs, ch)
        if loss_rows:
            self._extend_mean(ch)
        loss_rows.clear()

    def _extend_mean(self, ch: Changes) -> None:
        """The mean of workers that share a model, on a common grid of steps (see ``mean_on_grid``): it lies
        between the workers' curves even when each has a few points at steps of its own (a short run)."""
        curves = [s for s in self.loss.values() if len(s)]
        if self.separate_models or not curves or len(curves) < self.expected_workers:
            return
        rows = mean_on_grid(curves, STEP, (TIME, LOSS, SMOOTH), self._mean_upto, MEAN_DENSITY)
        if rows is not None:
            self.mean.append(rows)
            self._mean_upto = float(rows[-1, STEP])
            ch.mean = True

    def _add_lr(self, w: int, points: list[tuple[float, float, float]], ch: Changes) -> None:
        """Keep the points where the lr moves by more than a sliver of its range, and the one before each.

        A constant rate is two points however long the run; a step schedule is
        drawn as steps; a cosine keeps a few hundred points. The latest point
        (``lr_tail``) carries the curve on to the current step.
        """
        s = self.lr.get(w)
        if s is None:
            s = self.lr[w] = Series(3, max_points=self.max_points)
        tail = self.lr_tail.get(w)
        peak = self._lr_peak.get(w, 0.0)
        kept: list[tuple[float, float, float]] = []
        for point in points:
            peak = max(peak, abs(point[2]))
            if not kept and (not len(s) or w in self._lr_restart):
                self._lr_restart.discard(w)
                kept.append(point)
            else:
                last = kept[-1] if kept else (s.last(LSTEP), s.last(LTIME), s.last(LR))
                if abs(point[2] - last[2]) > LR_TOLERANCE * peak:
                    if tail is not None and tail[0] > last[0]:
                        kept.append(tail)  # where the old rate ended: a step stays a step
                    kept.append(point)
            tail = point
        self._lr_peak[w] = peak
        if tail is not None:
            self.lr_tail[w] = tail
        if kept:
            s.append(kept)
            ch.lr.add(w)

    def lr_curve(self, w: int) -> np.ndarray:
        """Rows (step, time, lr) of worker ``w``'s learning rate up to its latest record."""
        s = self.lr.get(w)
        rows = s.rows() if s is not None else np.empty((0, 3))
        tail = self.lr_tail.get(w)
        if tail is not None and (not len(rows) or tail[0] > rows[-1, LSTEP]):
            rows = np.vstack([rows, np.asarray(tail, dtype=np.float64)[None, :]])
        return rows

    @property
    def task(self) -> str:
        """ "regression" once an eval record carries val_rmse and no accuracy: its VAL_ACC column holds the RMSE."""
        return self.stats.task

    def _on_state(self, rec: dict[str, Any], t: float, ch: Changes, was_paused: bool) -> None:
        state = rec.get("state")
        worker = rec.get("worker")
        if worker is not None:
            w = int(worker)
            if state in ("finished", "stopped") and w in self._anchor:
                self._close_window(w, t, ch)  # a short run's last stretch still counts
            if state in ("paused", "stopping", "starting", "finished", "stopped", "failed"):
                self._anchor.pop(w, None)
                self._stretch.pop(w, None)
            if state in ("finished", "stopped", "failed"):
                self._drop_from_total(w, t, ch)
            return
        if state in ("paused", "stopping", "starting"):
            # A pause would otherwise show up as one long, slow window after resume.
            self._anchor.clear()
            self._stretch.clear()
        if state in ("finishing", "finished", "stopped", "failed", "paused", "starting"):
            self._close_total(ch)
        rel = self.timeline.time(t)
        if state == "starting" and (self.loss or self._latest):
            # A continued run or a fork: its curves go on from here on the same axes.
            text, kind = self.next_start
            self.markers.append(Marker(self.max_step, rel, text, kind))
            self.next_start = ("resumed", "resume")
            _break_rates([*self.rate.values(), self.total])
            self._latest_rate.clear()
            self._break_lr(ch)
            ch.events = True
        if self.stats.paused and not was_paused:
            self.pauses.append(PauseSpan(rel, math.nan, self.max_step))
            _break_rates([*self.rate.values(), self.total])
            self._latest_rate.clear()
            ch.events = True
        elif was_paused and not self.stats.paused:
            self.pauses[-1].end = rel
            ch.events = True

    def _break_lr(self, ch: Changes) -> None:
        """A new part may train at another rate: the old one's line ends where it ended (a step, not a ramp)."""
        for w, tail in self.lr_tail.items():
            s = self.lr.get(w)
            if s is None:
                continue
            if not len(s) or tail[0] > s.last(LSTEP):
                s.append([tail])
            s.append([(tail[0], tail[1], math.nan)])
            self._lr_restart.add(w)
            ch.lr.add(w)

    def _on_config(self, rec: dict[str, Any], t: float, ch: Changes) -> None:
        changes = rec.get("changes") or {}
        parts = [
            f"{key.split('.')[-1]} {_short(v.get('from'))}→{_short(v.get('to'))}"
            for key, v in changes.items()
            if isinstance(v, dict)
        ]
        steps = [float(v) for v in (rec.get("steps") or {}).values() if isinstance(v, (int, float))]
        step = max(steps) if steps else self.max_step
        self.markers.append(Marker(step, self.timeline.time(t), ", ".join(parts) or "settings changed", "config"))
        ch.events = True

    def _on_recovery(self, rec: dict[str, Any], t: float, ch: Changes) -> None:
        """A worker rolled back from a diverged loss and lowered its own rate: a marker at that step."""
        step = float(rec.get("step") or 0)
        workers = max(self.expected_workers, len(self.loss))
        who = f"{self.worker_label(int(rec['worker']))}: " if workers > 1 and "worker" in rec else ""
        text = (
            f"{who}lr {_short(rec.get('lr_from'))}→{_short(rec.get('lr_to'))} after the loss diverged at "
            f"step {int(step) + 1}"
        )
        self.markers.append(Marker(step, self.timeline.time(t), text, "recovery"))
        self._resmooth = True
        ch.events = True

    def _loss_series(self, w: int, ch: Changes) -> Series:
        s = self.loss.get(w)
        if s is None:
            s = self.loss[w] = Series(4, max_points=self.max_points)
            ch.new_workers.add(w)
        return s

    def _append_loss(self, s: Series, rows: list[tuple[float, float, float]]) -> None:
        arr = np.empty((len(rows), 4))
        arr[:, :3] = rows
        prev = s.last(SMOOTH) if len(s) else None
        arr[:, SMOOTH] = ema(arr[:, LOSS], self.smoothing, prev)
        s.append(arr)

    def _on_step(
        self,
        rec: dict[str, Any],
        t: float,
        loss_rows: dict[int, list[tuple[float, float, float]]],
        ch: Changes,
        rel: float,
    ) -> None:
        w = int(rec.get("worker") or 0)
        c = self._curve(rec)
        step = float(rec.get("step", 0))
        loss = _num(rec.get("loss"))
        loss_rows.setdefault(c, []).append((step, rel, loss))
        self._lr_rows.setdefault(c, []).append(_num(rec.get("lr")))  # NaN when absent: dropped
        prev = self._latest.get(c, (0.0, loss, loss))[2]
        smooth = self.smoothing * prev + (1.0 - self.smoothing) * loss
        self._latest[c] = (step, loss, smooth)
        samples = rec.get("samples")
        if isinstance(samples, (int, float)):
            self._on_samples(w, t, step, float(samples), ch)

    def _close_window(self, w: int, t: float, ch: Changes) -> None:
        last = self._last_sample.get(w)
        anchor = self._anchor.get(w)
        first = self._stretch.get(w)
        if last is None or anchor is None or first is None or last[0] <= first[0]:
            return
        s = self.rate.get(w)
        drawn = s.trailing(RATE) if s is not None else 0
        if drawn < 2:
            # A stretch too short for a line of windows (a run of a second): its mean rate, drawn across it.
            rate = max(0.0, (last[2] - first[1]) / (last[0] - first[0]))
            if s is not None:
                s.truncate(len(s) - drawn)
            self._rate_point(w, first[0], first[2], rate, ch, total=False)
            self._rate_point(w, last[0], last[1], rate, ch, total=False)
            self._short[w] = (first[0], last[0], rate)
        elif last[0] - anchor[0] >= MIN_WINDOW_S:
            self._rate_point(w, last[0], last[1], (last[2] - anchor[1]) / (last[0] - anchor[0]), ch)

    def _close_total(self, ch: Changes) -> None:
        """The total of workers' short stretches, when the total has no line of its own there."""
        short, self._short = self._short, {}
        drawn = self.total.trailing(RATE)
        if not short or drawn >= 2:
            return
        self.total.truncate(len(self.total) - drawn)
        start, end = min(v[0] for v in short.values()), max(v[1] for v in short.values())
        rate = sum(v[2] for v in short.values())
        self.total.append(
            [(self.max_step, self.timeline.time(start), rate), (self.max_step, self.timeline.time(end), rate)]
        )
        ch.total = True

    def _drop_from_total(self, w: int, t: float, ch: Changes) -> None:
        """A worker ended: the total steps down to the others' sum at once, rather than holding its share until
        it goes stale (a head-only run's workers end seconds apart)."""
        if self._latest_rate.pop(w, None) is None or not len(self.total):
            return
        live = _live_rates(self._latest_rate, self._gap, t)
        if not live:
            return
        rel = self.timeline.time(t)
        before = self.total.last(RATE)
        if math.isfinite(before):
            self.total.append([(self.total.last(RSTEP), rel, before)])
        self.total.append([(float(np.mean([v[1] for v in live])), rel, float(sum(v[2] for v in live)))])
        self._total_next_t = t + RATE_WINDOW_S
        ch.total = True

    def _on_samples(self, w: int, t: float, step: float, samples: float, ch: Changes) -> None:
        prev = self._last_sample.get(w)
        gap = t - prev[0] if prev is not None else 0.0
        usual = self._gap.get(w)
        if gap > 0:
            self._gap[w] = gap
        self._last_sample[w] = (t, step, samples)
        if w not in self._stretch:
            self._stretch[w] = (t, samples, step)
        anchor = self._anchor.get(w)
        # A long silence starts a new window (an evaluation is no slow stretch of training), but only one
        # long beside the worker's own pace: steps of seconds each (a full fine-tune) are windows themselves,
        # drawn as each record comes.
        silent = gap > GAP_FACTOR * usual if usual is not None else False
        if anchor is None or (t - anchor[0] > 4 * RATE_WINDOW_S + RATE_STALE_S and silent):
            self._anchor[w] = (t, samples, step)
            return
        dt = t - anchor[0]
        if dt < RATE_WINDOW_S:
            return
        self._rate_point(w, t, step, max(0.0, (samples - anchor[1]) / dt), ch)
        self._anchor[w] = (t, samples, step)

    def _rate_point(self, w: int, t: float, step: float, rate: float, ch: Changes, total: bool | None = None) -> None:
        """A worker's rate at ``t``; the total follows every RATE_WINDOW_S (``total``: now, or not at all)."""
        rel = self.timeline.time(t)
        s = self.rate.get(w)
        if s is None:
            s = self.rate[w] = Series(3, max_points=self.max_points)
            ch.new_workers.add(w)
        s.append([(step, rel, rate)])
        ch.rate.add(w)
        self._latest_rate[w] = (t, step, rate)
        if total if total is not None else t >= self._total_next_t:
            self._total_next_t = t + RATE_WINDOW_S
            live = _live_rates(self._latest_rate, self._gap, t)
            self.total.append([(float(np.mean([v[1] for v in live])), rel, float(sum(v[2] for v in live)))])
            ch.total = True

    def _on_eval(self, rec: dict[str, Any], t: float, ch: Changes) -> None:
        w = self._curve(rec)
        s = self.val.get(w)
        if s is None:
            s = self.val[w] = Series(4, capacity=16, max_points=self.max_points)
            ch.new_workers.add(w)
        rel = self.timeline.time(t)
        score = rec.get("val_rmse") if self.task == "regression" else rec.get("val_accuracy")
        s.append([(float(rec.get("epoch", len(s) + 1)), rel, _num(rec.get("val_loss")), _num(score))])
        ch.val.add(w)

    # -- views -----------------------------------------------------------------
    def set_smoothing(self, alpha: float) -> None:
        """Recompute every smoothed column (the raw values are kept)."""
        self.smoothing = alpha
        for s in self.loss.values():
            if len(s):
                s.rows()[:, SMOOTH] = ema(without_spikes(s.column(LOSS)), alpha)
        for w, (step, loss, _smooth) in self._latest.items():
            self._latest[w] = (step, loss, self.loss[w].last(SMOOTH) if w in self.loss else loss)
        if len(self.mean):
            # The smoothed mean is the mean of the workers' smoothed curves at the mean's steps (smoothing the
            # mean again would make it lag behind them).
            grid = self.mean.column(STEP)
            curves = [
                np.interp(grid, s.column(STEP), s.column(SMOOTH), left=np.nan, right=np.nan)
                for s in self.loss.values()
                if len(s)
            ]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-nan columns: before any worker's first point
                self.mean.rows()[:, SMOOTH] = np.nanmean(np.vstack(curves), axis=0) if curves else np.nan


def fork_marker(parent_name: str) -> tuple[str, str]:
    """The label and kind of the marker where a fork's curves branch from its parent's."""
    return f"forked from {parent_name}", "fork"


def _short(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _live_rates(
    latest: dict[int, tuple[float, float, float]], gap: dict[int, float], t: float
) -> list[tuple[float, float, float]]:
    """The workers' latest rates that still count at ``t``: heard from within RATE_STALE_S plus twice their
    usual gap between steps (a fine-tune's steps of seconds each stay in the total between them)."""
    return [v for w, v in latest.items() if t - v[0] <= RATE_STALE_S + 2 * gap.get(w, 0.0)]


def _break_rates(curves: list[Series]) -> None:
    """A gap in the throughput curves (drawn with connect="finite"), not a line across it."""
    for s in curves:
        if len(s) and math.isfinite(s.last(RATE)):
            s.append([(s.last(RSTEP), s.last(RTIME), math.nan)])
