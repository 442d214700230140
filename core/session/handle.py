"""What the window and the command line hold of a run: a :class:`RunHandle`.

Two things are run handles: :class:`~core.session.session.Session` (this
process runs the run) and :class:`~core.session.attached.AttachedSession` (it
follows another process's run through its run directory). Callers use this
face alone, so either can stand behind a run controller or a command.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from core.config import Config
    from core.data import DatasetInfo
    from core.runfiles.shape import RunShape

Listener = Callable[[list[dict[str, Any]]], None]


class RunHandle(Protocol):
    attached: bool  # another process runs it (closing the face leaves it running)
    config: Config
    num_workers: int
    shape: RunShape  # what its workers are (labels, models, task, figure): what a face draws and counts
    info: DatasetInfo | None  # the data's facts once loaded (None for an attached run)
    parent: dict[str, Any] | None  # a fork: the run and step it branched from
    summary: dict[str, Any] | None  # summary.json, once the run ended
    error: str | None  # one line, when it failed

    @property
    def state(self) -> str:
        """idle|starting|running|paused|stopping|finishing|finished|stopped|failed"""

    @property
    def active(self) -> bool: ...

    @property
    def run_dir(self) -> Path | None: ...

    def describe(self) -> str:
        """One line saying which run this is and where it runs."""

    def add_listener(self, fn: Listener) -> None:
        """``fn`` gets every batch of the run's records, from the run's own thread."""

    def worker_pids(self) -> list[int]:
        """The live workers this process started (none for an attached run)."""

    def begin(self) -> bool:
        """Announce the run as starting (cheap; ``start`` does the work)."""

    def start(self) -> None: ...

    def pause(self) -> None: ...

    def resume(self, changes: dict[str, Any] | None = None) -> None:
        """Go on; ``changes`` (live keys) apply at the next batch. ConfigError: it stays paused."""

    def request_stop(self, timeout: float = 10.0) -> None:
        """Ask it to stop; returns at once."""

    def stop(self, timeout: float = 10.0) -> str | None:
        """Stop and wait for the end; the status, None if it did not end in time."""

    def wait(self, timeout: float | None = None) -> str | None:
        """Wait for the end; the state then, None if it did not end in time."""

    def detach(self) -> None:
        """Stop following a run that another process runs (nothing for a run of this process)."""
