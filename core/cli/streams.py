"""Output nobody reads never breaks a command: stdout and stderr that drop what cannot be written.

A reader that goes away (``| head``, a log shipper that restarts, a closed SSH session, a window that
crashed) turns every later write into EPIPE or EIO. :func:`guard_output` wraps ``sys.stdout`` and
``sys.stderr``: the first write that fails points that file descriptor at /dev/null (so the worker and
model processes that share it, and the interpreter's last flush, write into nothing too), drops what was
being written, and tells the listeners once (``traindesk train`` notes it in the run's log, where what
the user needs is anyway). Everything after goes on as if the reader were there.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

Listener = Callable[[str, BaseException], None]
_listeners: list[Listener] = []
_lock = threading.Lock()


def on_output_lost(listener: Listener) -> Callable[[], None]:
    """Call ``listener(name, error)`` once for each of stdout and stderr whose reader goes away; returns a
    function that stops calling it."""
    with _lock:
        _listeners.append(listener)

    def remove() -> None:
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)

    return remove


class TolerantStream:
    """A text stream that drops its writes once its file descriptor stops taking them."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream = stream
        self._name = name
        self.lost: BaseException | None = None

    def _fail(self, exc: BaseException) -> None:
        if self.lost is not None:
            return
        self.lost = exc
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError):
            pass
        try:
            self._stream.flush()  # what was buffered goes to /dev/null now, not to a later flush's error
        except (OSError, ValueError):
            pass
        with _lock:
            listeners = list(_listeners)
        for listener in listeners:
            try:
                listener(self._name, exc)
            except Exception:  # a listener that fails must not break the write that called it
                pass

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                return self._stream.write(text)
            except (OSError, ValueError) as exc:
                self._fail(exc)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self._stream.flush()
            except (OSError, ValueError) as exc:
                self._fail(exc)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer, ...
        return getattr(self._stream, name)


def guard_output() -> None:
    """Make ``sys.stdout`` and ``sys.stderr`` tolerant of a reader that goes away (idempotent)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, TolerantStream):
            setattr(sys, name, TolerantStream(stream, name))


def lost_reason(exc: BaseException) -> str:
    """The failure in a few words: "Broken pipe", "Input/output error"."""
    return getattr(exc, "strerror", None) or type(exc).__name__
