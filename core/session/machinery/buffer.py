"""A thread-safe buffer of records between the session's collector thread and a consumer thread.

The window's reader thread drains it (``app.flows.metrics_reader``); tests and
benchmarks use it to watch a run's records from their own thread.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any


class RecordBuffer:
    """Records put by one thread (a listener of the run), drained by another."""

    def __init__(self, maxlen: int = 1_000_000) -> None:
        self._items: deque[dict[str, Any]] = deque(maxlen=maxlen)
        self._cond = threading.Condition()
        self._closed = False

    def put(self, records: list[dict[str, Any]]) -> None:
        with self._cond:
            self._items.extend(records)
            self._cond.notify_all()

    def drain(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """All buffered records; waits up to ``timeout`` when empty; [] once closed."""
        with self._cond:
            if not self._items and not self._closed:
                self._cond.wait(timeout)
            out = list(self._items)
            self._items.clear()
            return out

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed
