"""Blocking calls (Session.start/stop, describing a dataset) off the GUI thread.

Each call runs on its own short-lived QThread; its result comes back as a
queued call into the GUI thread, so callbacks may touch widgets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from app.shell.gc_policy import GuiGarbageCollector


class _CallThread(QThread):
    # Emitted from the worker thread; connected with a queued connection to a
    # QObject living in the GUI thread, which is what moves the result across.
    finished_call = Signal(object, bool, object)  # (thread, ok, result or exception)

    def __init__(self, fn: Callable[[], Any], name: str) -> None:
        super().__init__()
        self._fn = fn
        self.setObjectName(name)

    def run(self) -> None:
        try:
            result = self._fn()
        except BaseException as exc:
            self.finished_call.emit(self, False, exc)
        else:
            self.finished_call.emit(self, True, result)


class BackgroundCalls(QObject):
    """Run ``fn()`` on a thread; call ``on_done(result)`` or ``on_error(exc)`` in the GUI thread.

    While a call runs, Python's cyclic collector runs from the GUI thread only
    (:mod:`app.shell.gc_policy`): an automatic collection inside the call's thread
    would destroy unreachable Qt objects there ("Timers cannot be started from
    another thread"), whoever owns this object (the window holds the policy
    too; a dialog on its own does not).
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._threads: dict[_CallThread, tuple[Callable[[Any], None], Callable[[BaseException], None] | None]] = {}
        self._collector: GuiGarbageCollector | None = None

    @property
    def busy(self) -> bool:
        return bool(self._threads)

    def running(self, name: str) -> bool:
        """Whether a call of this name has not reported back yet."""
        return any(thread.objectName() == name for thread in self._threads)

    def call(
        self,
        fn: Callable[[], Any],
        on_done: Callable[[Any], None],
        on_error: Callable[[BaseException], None] | None = None,
        name: str = "call",
    ) -> None:
        thread = _CallThread(fn, name)
        thread.finished_call.connect(self._on_finished_call, Qt.ConnectionType.QueuedConnection)
        self._threads[thread] = (on_done, on_error)
        if self._collector is None:
            self._collector = GuiGarbageCollector(self)
        thread.start()

    @Slot(object, bool, object)
    def _on_finished_call(self, thread: _CallThread, ok: bool, result: Any) -> None:
        callbacks = self._threads.pop(thread, None)
        thread.wait()  # run() has returned; this only reaps the thread
        thread.deleteLater()
        if not self._threads and self._collector is not None:
            self._collector.stop()
            self._collector.deleteLater()
            self._collector = None
        if callbacks is None:
            return
        on_done, on_error = callbacks
        if ok:
            on_done(result)
        elif on_error is not None:
            on_error(result)
        else:
            raise result

    def wait_all(self, timeout_s: float) -> bool:
        """Block until every call has returned (for shutdown only); True if all did."""
        deadline = time.monotonic() + timeout_s
        for thread in list(self._threads):
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            if not thread.wait(left_ms):
                return False
        return True

    def forget_all(self) -> None:
        """Drop pending callbacks (their receivers are going away); threads still finish."""
        for thread in self._threads:
            self._threads[thread] = (lambda _r: None, lambda _e: None)
