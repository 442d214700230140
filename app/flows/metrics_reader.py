"""MetricsReader: the one thread that drains the engine's records for the GUI.

It never touches a widget: it only emits ``records(list)`` with everything
that arrived since the last emission, at most ``max_rate_hz`` times a second,
so the GUI thread handles a batch at a time instead of one call per record. It
does not wait for the plots' frames: the plots pace their own redraws, and a
batch handed over at once is drawn at the next frame rather than the one after.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol

from PySide6.QtCore import QThread, Signal


class Drainable(Protocol):
    def drain(self, timeout: float = ...) -> list[dict[str, Any]]: ...


class MetricsReader(QThread):
    records = Signal(list)

    def __init__(self, buffer: Drainable, max_rate_hz: float = 100.0, poll_s: float = 0.05) -> None:
        super().__init__()
        self.setObjectName("MetricsReader")
        self._buffer = buffer
        self._period = 1.0 / max_rate_hz
        self._poll_s = poll_s
        self.emitted = 0  # number of batches emitted (for tests and the benchmark)

    def run(self) -> None:
        last_emit = 0.0
        while not self.isInterruptionRequested():
            batch = self._buffer.drain(timeout=self._poll_s)
            if not batch:
                continue
            # Coalesce a little: what the other workers sent in the same few milliseconds.
            remaining = self._period - (time.monotonic() - last_emit)
            if remaining > 0:
                self.msleep(max(1, math.ceil(remaining * 1000)))  # never under the period
                batch.extend(self._buffer.drain(timeout=0))
            self.records.emit(batch)
            self.emitted += 1
            last_emit = time.monotonic()

    def stop(self, timeout_s: float = 2.0) -> bool:
        """Ask the loop to end and wait for it (it wakes within ``poll_s``)."""
        self.requestInterruption()
        return self.wait(int(timeout_s * 1000))
