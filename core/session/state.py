"""The run's one state machine: states, the transitions allowed between them, one lock.

::

    idle ──> starting ──> running <──> paused
               │  │          │           │
               │  └──────────┴─> stopping ┤   (stop asked; workers finish their batch)
               │             │           │
               │             └──────> finishing   (workers done: joins, final checkpoint, evaluation)
               │                         │
               └──> stopped | failed    └──> finished | stopped | failed

``idle -> stopped``: stopped before it started; ``stopping -> stopped``: a stop
asked while the data loaded (no worker is spawned); any active state may go to
``failed`` when the engine itself breaks (or the input turns out bad while starting). Every transition happens under the
lock and is announced as a ``state`` record (worker null) in order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from core.runfiles.records import Record, state_record
from core.runfiles.writing import ACTIVE_STATES as ACTIVE
from core.runfiles.writing import END_STATES as ENDED

TRANSITIONS: dict[str, tuple[str, ...]] = {
    "idle": ("starting", "stopped"),
    "starting": ("running", "paused", "stopping", "finishing", "stopped", "failed"),
    "running": ("paused", "stopping", "finishing", "failed"),
    "paused": ("running", "stopping", "finishing", "failed"),
    "stopping": ("finishing", "stopped", "failed"),
    "finishing": ENDED,
    "finished": (),
    "stopped": (),
    "failed": (),
}


class RunState:
    """The current state, changed only through :meth:`move` (thread-safe)."""

    def __init__(self, announce: Callable[[Record], None]) -> None:
        self.lock = threading.RLock()
        self._state = "idle"
        self._announce = announce
        self.ended = threading.Event()  # set by the owner once everything of the run is closed

    @property
    def value(self) -> str:
        return self._state

    @property
    def active(self) -> bool:
        return self._state in ACTIVE

    def move(self, to: str, detail: str = "") -> bool:
        """Go to ``to`` if allowed from here; announce it. False (and nothing) otherwise."""
        with self.lock:
            if to not in TRANSITIONS[self._state]:
                return False
            self._state = to
            self._announce(state_record(None, to, detail))
            return True
