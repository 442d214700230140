"""When the live plots redraw: frames paced by what drawing costs, the side plots in turns of their own.

Records arrive in batches; their changes wait here until the next frame, which
redraws the main plot (the training loss). The side plots (validation,
throughput, lr) follow at most every SIDE_EVERY_S, one at a time from their own
timer, so that no turn of the event loop paints them all together. The frame
interval adapts so that the plots use about FRAME_BUDGET of one core.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from PySide6.QtCore import QObject, QTimer

from app.viewmodels.run_data import Changes

MIN_FRAME_MS = 33  # at most ~30 redraws a second
MAX_FRAME_MS = 500  # and at least 2, however slow painting is
FRAME_BUDGET = 0.2  # share of one core the live plots may use
SIDE_EVERY_S = 0.25  # the plots beside the loss (validation, throughput, lr) redraw at most this often


class PacedPlot(Protocol):
    """What the pacer needs of a plot: push changes to its curves, and say what painting it cost."""

    paint_cpu_s: float

    def refresh(self, changes: Changes | None) -> None: ...


class FramePacer(QObject):
    """Collects the changes of incoming records and redraws the plots at a pace they can afford."""

    def __init__(self, main: PacedPlot, side: list[PacedPlot], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.main = main
        self.side = list(side)
        self.frames = 0
        self.frame_callbacks: list[Callable[[Changes], Any]] = []  # called with each frame's Changes (benchmarks)
        self._pending: Changes | None = None
        self._frame_ms = MIN_FRAME_MS
        self._cost_s = 0.0
        self._painted_before = 0.0
        self._last_frame = 0.0
        self._redraw_timer = QTimer(self, singleShot=True)
        self._redraw_timer.timeout.connect(self._on_frame)
        self._held: dict[Any, Changes] = {}  # side plots' changes waiting for their next redraw
        self._side_drawn: dict[Any, float] = {}
        self._side_timer = QTimer(self, singleShot=True)
        self._side_timer.timeout.connect(self._on_side_timer)

    @property
    def frame_interval_ms(self) -> int:
        return self._frame_ms

    def reset(self) -> None:
        """Forget what waits: a new run's data replaces the old."""
        self._pending = None
        self._held.clear()
        self._side_drawn.clear()
        self._redraw_timer.stop()
        self._side_timer.stop()

    def add(self, changes: Changes) -> None:
        """Schedule ``changes`` for the next frame.

        Draw as soon as the frame interval since the last frame allows: fresh
        data after a quiet spell shows at once, a steady stream is paced.
        """
        self._pending = changes if self._pending is None else self._pending.merge(changes)
        due = max(0, int((self._last_frame + self._frame_ms / 1000.0 - time.monotonic()) * 1000))
        if not self._redraw_timer.isActive() or self._redraw_timer.remainingTime() > due:
            self._redraw_timer.start(due)

    def _on_frame(self) -> None:
        self.flush(everything=False)

    def flush(self, everything: bool = True) -> None:
        """Push pending data to the curves now (one setData per changed curve).

        A frame of the live stream (``everything`` False) redraws the main plot
        only; the side plots wait for their turn (``_on_side_timer``), so frames
        stay cheap, come often, a step shows soon after it is recorded and the
        window keeps answering.
        """
        self._redraw_timer.stop()
        pending, self._pending = self._pending, None
        if pending is None and not (everything and self._held):
            return
        self._last_frame = time.monotonic()
        start = time.thread_time()
        if pending is not None:
            self.main.refresh(pending)
            for plot in self.side:
                held = self._held.get(plot)
                self._held[plot] = pending if held is None else held.merge(pending)
        if everything:
            self._side_timer.stop()
            for plot in list(self._held):
                self._refresh_side(plot)
        if pending is not None:
            self.frames += 1
            for cb in self.frame_callbacks:
                cb(pending)
        self._pace(time.thread_time() - start)
        if self._held and not self._side_timer.isActive():
            self._side_timer.start(self._frame_ms // 2)  # between two frames of the main plot

    def _refresh_side(self, plot: PacedPlot) -> None:
        changes = self._held.pop(plot, None)
        if changes:
            plot.refresh(changes)
            self._side_drawn[plot] = time.monotonic()

    def _on_side_timer(self) -> None:
        """Redraw the side plot that waited longest, if its time has come; come back for the rest."""
        if not self._held:
            return
        now = time.monotonic()
        plot = min(self._held, key=lambda p: self._side_drawn.get(p, -math.inf))
        changes = self._held[plot]
        due = self._side_drawn.get(plot, -math.inf) + SIDE_EVERY_S
        if now >= due or changes.new_workers or changes.events:
            start = time.thread_time()
            self._refresh_side(plot)
            self._pace(time.thread_time() - start)
        if self._held:
            wait = min(self._side_drawn.get(p, now - SIDE_EVERY_S) + SIDE_EVERY_S for p in self._held) - now
            self._side_timer.start(max(self._frame_ms // 2, int(wait * 1000)))

    def _pace(self, cost_s: float) -> None:
        """Pace the next frame by what drawing costs (setData now plus the painting since last time).

        Plots get about FRAME_BUDGET of one core, however many points or
        workers, so training processes keep the CPU and the GUI stays responsive.
        """
        painted = self.main.paint_cpu_s + sum(p.paint_cpu_s for p in self.side)
        cost = cost_s + painted - self._painted_before
        self._painted_before = painted
        self._cost_s = 0.7 * self._cost_s + 0.3 * cost
        self._frame_ms = int(min(MAX_FRAME_MS, max(MIN_FRAME_MS, 1000 * self._cost_s / FRAME_BUDGET)))
