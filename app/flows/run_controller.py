"""RunController: one training run's lifecycle, between the window and core.session.Session.

The GUI thread never waits here: ``Session.start`` (data loading, the first
forkserver start) and ``Session.stop``/``wait`` (joins) run on background
threads and report back by signal. Records flow Session collector thread ->
RecordBuffer -> MetricsReader (QThread) -> ``records`` signal (GUI thread).
"""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt, Signal, Slot

from app.flows.metrics_reader import MetricsReader
from app.shell.tasks import BackgroundCalls
from core.config import Config
from core.errors import INPUT_ERRORS
from core.services.runs.files import END_STATES, STATE

if TYPE_CHECKING:
    from core.services.runs.start import RunHandle

log = logging.getLogger(__name__)

# Workers run at a lower CPU priority than the GUI: with every core busy training, the
# scheduler otherwise gives the window's thread only its equal share, and a redraw that
# needs 20 ms of CPU can take 200 ms of wall time. At niceness +10 a worker weighs 110
# against the window's 1024, so the window gets most of a core whenever it wants one; at +5
# (weight 335) four workers on two cores still stretched redraws into 40-63 ms stalls.
# Training loses next to nothing (the GUI is idle most of the time). Unprivileged: only
# raises niceness.
WORKER_NICENESS = 10
STOP_TIMEOUT_S = 10.0


def _default_session_factory(cfg: Config, runs_dir: str, name: str | None) -> tuple[Any, Any]:
    from core.services.runs import start  # imported late: the GUI starts before the engine is needed

    return start.new_run(cfg, runs_dir, name), start.record_buffer()


class RunController(QObject):
    """Start, pause, resume and stop one Session at a time; report by signal.

    The session owns the run's state; this controller keeps none of its own:
    ``state`` is the session's, and ``state_changed`` follows the session's
    state records as the reader delivers them.
    """

    state_changed = Signal(str)  # idle|starting|running|paused|stopping|finishing|finished|stopped|failed
    records = Signal(list)  # batches of metric records, at most ~30 a second
    start_failed = Signal(str)  # one line: bad config/data/model, the run did not start
    run_started = Signal(object)  # the Session, once start() returned
    run_ended = Signal(str, object, object)  # status, summary dict or None, error line or None

    def __init__(
        self,
        parent: QObject | None = None,
        session_factory: Callable[[Config, str, str | None], tuple[Any, Any]] | None = None,
    ) -> None:
        super().__init__(parent)
        self._factory = session_factory or _default_session_factory
        self._calls = BackgroundCalls(self)
        self.session: RunHandle | None = None
        self._buffer: Any = None
        self._reader: MetricsReader | None = None
        self._ending = False
        self._previous: RunHandle | None = None  # the ended run before the one starting

    # -- queries ---------------------------------------------------------------
    @property
    def state(self) -> str:
        return str(self.session.state) if self.session is not None else "idle"

    @property
    def active(self) -> bool:
        return self.session is not None and bool(self.session.active)

    @property
    def ended(self) -> bool:
        """The run is over and reported (``run_ended`` emitted): nothing of it runs any more."""
        return self.state in END_STATES and not self._calls.busy and self._reader is None

    @property
    def attached(self) -> bool:
        """The run is another process's, followed through its run directory."""
        return self.session is not None and self.session.attached

    @property
    def run_dir(self) -> Path | None:
        return self.session.run_dir if self.session is not None else None

    def worker_pids(self) -> list[int]:
        if self.session is None:
            return []
        try:
            return list(self.session.worker_pids())
        except Exception:
            return []

    # -- commands --------------------------------------------------------------
    def start(self, cfg: Config, runs_dir: str | Path = "runs", name: str | None = None) -> None:
        if self.active:
            raise RuntimeError("a run is already active")
        self._launch(lambda: self._factory(cfg, str(runs_dir), name))

    def continue_run(self, run_dir: str | Path, epochs: int | None = None) -> None:
        """Continue a stopped or failed run from its checkpoint, in its own folder."""
        if self.active:
            raise RuntimeError("a run is already active")
        self._launch(lambda: _made(lambda start: start.continue_run(run_dir, epochs)))

    def fork(self, run_dir: str | Path, changes: dict[str, Any], runs_dir: str | Path | None = None) -> None:
        """A new run from ``run_dir``'s last consistent checkpoint with ``changes`` (optim.*/train.* keys)."""
        if self.active:
            raise RuntimeError("a run is already active")
        self._launch(lambda: _made(lambda start: start.fork_run(run_dir, changes, runs_dir)))

    def attach(self, run_dir: str | Path) -> None:
        """Follow the live run another process runs in ``run_dir``; steer it through its control file."""
        if self.active:
            raise RuntimeError("a run is already active")
        self._launch(lambda: _made(lambda start: start.attach_run(run_dir)))

    def _launch(self, make: Callable[[], tuple[Any, Any]]) -> None:
        try:
            session, buffer = make()
        except INPUT_ERRORS as exc:
            self.start_failed.emit(str(exc))
            return
        except Exception as exc:
            log.exception("creating the session failed")
            self.start_failed.emit(f"could not create the run: {type(exc).__name__}: {exc}")
            return
        self._previous = self.session  # on screen again should this one fail to start
        self.session, self._buffer = session, buffer
        self._ending = False
        session.add_listener(buffer.put)
        self._reader = MetricsReader(buffer)
        self._reader.records.connect(self._on_reader_records, Qt.ConnectionType.QueuedConnection)
        self._reader.start()
        session.begin()  # "starting" at once; the slow part runs on a background thread
        self.state_changed.emit(self.state)
        self._calls.call(session.start, self._on_started, self._on_start_error, name="session-start")

    def pause(self) -> None:
        self._command(lambda s: s.pause())

    def resume(self, changes: dict[str, Any] | None = None) -> None:
        """Resume; ``changes`` (LIVE_KEYS) apply at the next batch. ConfigError: the run stays paused."""
        self._command(lambda s: s.resume(changes) if changes else s.resume())

    def stop(self) -> None:
        """Stop without asking; returns at once, ``run_ended`` follows."""
        self._command(lambda s: s.request_stop(STOP_TIMEOUT_S))

    def _command(self, do: Callable[[Any], None]) -> None:
        """Pass a command to the session; views re-render from its state at once (its record follows)."""
        if self.session is None:
            return
        before = self.state
        do(self.session)
        if self.state != before:
            self.state_changed.emit(self.state)

    def shutdown(self, timeout_s: float = STOP_TIMEOUT_S + 5.0) -> None:
        """Blocking last resort at exit: stop the run, join every thread. Not for the live GUI."""
        self._calls.forget_all()
        if self.attached and self.session is not None:  # another process's run: stop following it, never stop it
            self.session.detach()
            self._calls.wait_all(timeout_s)
            self._stop_reader()
            return
        if self.session is not None:
            self.session.request_stop(STOP_TIMEOUT_S)
        self._calls.wait_all(timeout_s)
        if self.session is not None and self.session.active:
            try:
                self.session.stop(timeout=STOP_TIMEOUT_S)
            except Exception:
                log.exception("stopping the session at exit failed")
        self._stop_reader()

    # -- engine callbacks (GUI thread) -----------------------------------------
    def _on_started(self, _result: Any) -> None:
        if self.session is None:
            return
        self._previous = None  # the new run is the one on screen now
        self._lower_worker_priority()
        self.run_started.emit(self.session)
        if not self.session.active:  # stopped before the workers started
            self._begin_end()

    def _lower_worker_priority(self) -> None:
        lower_priority(self.worker_pids())

    def _on_start_error(self, exc: BaseException) -> None:
        if isinstance(exc, INPUT_ERRORS):
            message = str(exc)
        else:
            log.error("Session.start failed:\n%s", "".join(traceback.format_exception(exc)))
            message = f"could not start the run: {type(exc).__name__}: {exc}"
        # start() may have spawned some workers before failing: make sure none stays.
        self._ending = True  # reported as start_failed, not as a run that ended
        session = self.session
        self._calls.call(
            lambda: _stop_quietly(session),
            lambda _r: self._after_start_failure(message),
            lambda _e: self._after_start_failure(message),
            name="session-cleanup",
        )

    def _after_start_failure(self, message: str) -> None:
        self._stop_reader()
        # The run that never started leaves no trace here: the one before it (ended) is the controller's
        # run again, its folder what Export, Continue and Fork act on.
        self.session, self._previous = self._previous, None
        self.state_changed.emit(self.state)
        self.start_failed.emit(message)

    @Slot(list)
    def _on_reader_records(self, batch: list[dict[str, Any]]) -> None:
        self.records.emit(batch)
        for rec in batch:
            if rec.get("kind") == STATE and rec.get("worker") is None:
                state = str(rec.get("state"))
                self.state_changed.emit(state)
                if state in END_STATES:
                    self._begin_end()

    def _begin_end(self) -> None:
        """The run ended: reap the workers and threads off the GUI thread, then report."""
        if self._ending or self.session is None or self._calls.running("session-start"):
            return  # a start still running reports through _on_started / _on_start_error
        self._ending = True
        session = self.session
        self._calls.call(
            lambda: session.wait(timeout=STOP_TIMEOUT_S) or session.stop(timeout=STOP_TIMEOUT_S),
            self._on_joined,
            self._on_join_error,
            name="session-wait",
        )

    def _on_join_error(self, exc: BaseException) -> None:
        log.error("ending the run failed:\n%s", "".join(traceback.format_exception(exc)))
        self._on_joined(None)

    def _on_joined(self, _status: Any) -> None:
        self._stop_reader()
        session = self.session
        status = self.state
        if status not in END_STATES:
            status = "stopped"
        summary = session.summary if session is not None else None
        error = session.error if session is not None else None
        self.run_ended.emit(status, summary, error)

    def _stop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is None:
            return
        reader.stop()
        # Deliver the batches the reader already queued, then what is still buffered,
        # so the last records (final losses, the end state) arrive before run_ended.
        QCoreApplication.sendPostedEvents(self, QEvent.Type.MetaCall)
        reader.records.disconnect(self._on_reader_records)
        rest = self._buffer.drain(timeout=0) if self._buffer is not None else []
        if rest:
            self.records.emit(rest)
        if self._buffer is not None and hasattr(self._buffer, "close"):
            self._buffer.close()
        reader.deleteLater()


def lower_priority(pids: list[int]) -> None:
    """Renice worker processes by WORKER_NICENESS below the window (a race's variants too)."""
    if not hasattr(os, "setpriority"):
        return
    for pid in pids:
        try:
            current = os.getpriority(os.PRIO_PROCESS, pid)
            os.setpriority(os.PRIO_PROCESS, pid, max(current, os.getpriority(os.PRIO_PROCESS, 0) + WORKER_NICENESS))
        except OSError:  # the worker already exited, or the platform refuses: not important
            pass


def _made(make: Callable[[Any], RunHandle]) -> tuple[RunHandle, Any]:
    """A run made by the runs door (``make`` gets core.services.runs.start), with the buffer its records go to."""
    from core.services.runs import start

    return make(start), start.record_buffer()


def _stop_quietly(session: RunHandle | None) -> None:
    try:
        if session is not None and session.active:
            session.stop(timeout=STOP_TIMEOUT_S)
    except Exception:
        log.exception("cleanup after a failed start")
