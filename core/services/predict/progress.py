"""How far a prediction has got, for whoever shows it (the command's tqdm bar, the window's Predict tab), and
a cancel the caller may ask for: the next piece that comes back ends the prediction.

A ``PredictWatch`` is written by the predicting thread and read by another (the window's timer): plain ints
and floats, each assignment whole, so a reader sees a consistent enough picture without a lock.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any


class PredictionCancelled(Exception):
    """The caller cancelled the prediction (``PredictWatch.cancel``); one line: how far it had got."""


class PredictWatch:
    """Rows (or images) predicted of how many, since when; ``cancel()`` from any thread stops the prediction
    at its next piece (pool processes included: their pool is shut down as on any error)."""

    def __init__(self) -> None:
        self.done = 0
        self.total = 0
        self.unit = "rows"
        self.started: float | None = None
        self._cancel = threading.Event()

    def begin(self, total: int, unit: str) -> None:
        self.done, self.total, self.unit = 0, max(0, int(total)), unit
        if self.started is None:
            self.started = time.monotonic()
        self.check()

    def advance(self, n: int) -> None:
        self.done += n
        self.total = max(self.total, self.done)  # a table's row count is an estimate
        self.check()

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def check(self) -> None:
        if self._cancel.is_set():
            raise PredictionCancelled(f"predict: cancelled after {self.done:,} of {self.total:,} {self.unit}")

    def seconds(self) -> float:
        return 0.0 if self.started is None else time.monotonic() - self.started

    def rate(self) -> float:
        """Rows per second so far (0 before the first piece is back)."""
        s = self.seconds()
        return self.done / s if self.done and s > 0 else 0.0

    def eta_s(self) -> float | None:
        """Seconds left at the rate so far; None before it is known."""
        rate = self.rate()
        return max(0.0, (self.total - self.done) / rate) if rate > 0 and self.total else None

    def describe(self) -> str:
        """One line: "312 of 1,000 images · 11.2 images/s · about 1 min left"."""
        line = f"{self.done:,} of {self.total:,} {self.unit}" if self.total else f"{self.done:,} {self.unit}"
        rate, eta = self.rate(), self.eta_s()
        if rate > 0:
            line += f" · {rate:,.1f} {self.unit}/s" if rate < 100 else f" · {rate:,.0f} {self.unit}/s"
        if eta is not None and self.done < self.total:
            line += f" · about {_duration(eta)} left"
        return line


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


class _Bar:
    """A tqdm bar and a watch advanced together; the watch may end the prediction (a cancel)."""

    def __init__(self, bar: Any, watch: PredictWatch | None) -> None:
        self.bar, self.watch = bar, watch

    def update(self, n: int) -> None:
        self.bar.update(n)
        if self.watch is not None:
            self.watch.advance(n)


@contextlib.contextmanager
def progress(total: int, unit: str, watch: PredictWatch | None) -> Iterator[_Bar]:
    """The command's bar on stderr (shown on a terminal: rate and ETA) and the caller's watch, over ``total``
    rows (an estimate for a table)."""
    from core.host.progress import progress as tqdm_bar

    if watch is not None:
        watch.begin(total, unit)
    with tqdm_bar(total, "predict", unit=unit, unit_scale=unit == "rows") as bar:
        yield _Bar(bar, watch)
