"""Reads go by blocks and ask between them whether their caller wants them to stop.

Every reader goes by blocks (CSV pieces of ``READ_BLOCK_BYTES``, NPZ arrays
in chunks of as many bytes; readers look the size up here at each read) and
asks :func:`check_stop` between blocks whether the caller wants it to stop
(:func:`stop_reading_when`); it then raises :class:`ReadStopped`. A Ctrl-C
while a large file loads ends the command at once, not once the file is read.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

READ_BLOCK_BYTES = 4 << 20  # a read asks whether to stop after each block of about this many bytes (0.1-0.2 s)


class ReadStopped(Exception):
    """A read given up between two blocks because its caller asked it to stop (a Ctrl-C, a Stop)."""


_should_stop: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar("should_stop", default=None)


@contextlib.contextmanager
def stop_reading_when(should_stop: Callable[[], bool]) -> Iterator[None]:
    """Reads in this context (this thread) ask ``should_stop()`` between blocks and raise :class:`ReadStopped`."""
    token = _should_stop.set(should_stop)
    try:
        yield
    finally:
        _should_stop.reset(token)


def check_stop() -> None:
    """Raise :class:`ReadStopped` if the reading in progress was asked to stop."""
    should_stop = _should_stop.get()
    if should_stop is not None and should_stop():
        raise ReadStopped("reading stopped")


_one_thread: contextvars.ContextVar[bool] = contextvars.ContextVar("one_thread", default=False)


@contextlib.contextmanager
def read_on_one_thread() -> Iterator[None]:
    """Reads in this context (this thread) parse and convert on the calling thread alone, not on pyarrow's
    threads or a column per core: a caller promised one thread (``predict --workers 1``)."""
    token = _one_thread.set(True)
    try:
        yield
    finally:
        _one_thread.reset(token)


def reading_threads() -> bool:
    """Whether a read in this context may parse and convert on every core."""
    return not _one_thread.get()
