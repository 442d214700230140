"""Following a run that another process runs (a CLI ``train``, a torchrun job, another window).

``AttachedSession`` is a :class:`~core.session.handle.RunHandle`, as a
``Session`` is: ``state``, ``active``, listeners fed with records,
``pause``/``resume``/``request_stop``, ``wait``. It reads the run's
``metrics.jsonl`` incrementally (``MetricsTail``) on its own thread and steers
the run through the control file (``core.runfiles.control_file.send``), as
``traindesk pause|resume|stop`` does. Detaching (closing the window) stops
following and leaves the run running. No torch until the config is read, no Qt.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.config import ConfigError, load_config
from core.errors import RunError
from core.runfiles.control_file import active_run_pid, send
from core.runfiles.layout import RunDir
from core.runfiles.records import log_record, state_record
from core.runfiles.shape import RunShape
from core.runfiles.writing import ACTIVE_STATES, END_STATES, MetricsTail, read_summary
from core.session.reading.stats import RunStats

POLL_S = 0.2  # how often the log is read
GONE_GRACE_S = 3.0  # the run's process is gone this long without an end state: it ended uncleanly

Listener = Callable[[list[dict[str, Any]]], None]


def describe_workers(details: dict[int, str]) -> str:
    """ "2 workers (ranks 0-1: pid 11, pid 12)" from the workers' starting-state details."""
    if not details:
        return "no worker yet"
    ranks = sorted(details)
    span = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
    shown = ", ".join(details[r] for r in ranks[:4] if details[r]) + (", …" if len(ranks) > 4 else "")
    return f"{len(ranks)} worker(s), {span}" + (f": {shown}" if shown else "")


class AttachedSession:
    """A live run of another process, followed through its run directory."""

    attached = True

    def __init__(self, run_dir: str | Path) -> None:
        self._run_dir = Path(run_dir)
        self._files = RunDir(self._run_dir)
        self.pid = active_run_pid(self._run_dir)
        if self.pid is None:
            raise RunError(f"attach: {self._run_dir} holds no active run")
        try:
            self.config = load_config(self._files.config)
        except (ConfigError, OSError) as exc:
            raise RunError(f"attach: cannot read {self._files.config}: {exc}") from None
        from core.strategies import get_strategy

        self.strategy = get_strategy(self.config)
        self.shape = RunShape.of(self.strategy)
        self.num_workers = self.strategy.num_workers
        self.info: Any = None  # the data is the other process's
        self.parent: dict[str, Any] | None = None
        self.summary: dict[str, Any] | None = None
        self.error: str | None = None
        self.launcher = "local"
        self._stats = RunStats()
        self.worker_details: dict[int, str] = self._stats.worker_details  # kept up to date by the reducer
        self._state = "starting"
        self._listeners: list[Listener] = []
        self._detach = threading.Event()
        self._ended = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the run-handle face ---------------------------------------------------------------
    @property
    def state(self) -> str:
        return self._state

    @property
    def active(self) -> bool:
        return self._state in ACTIVE_STATES

    @property
    def run_dir(self) -> Path:
        return self._run_dir

    def describe(self) -> str:
        return (
            f"attached to {self._run_dir.name} (pid {self.pid}, launcher {self.launcher}): "
            f"{describe_workers(self.worker_details)}"
        )

    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def worker_pids(self) -> list[int]:
        return []  # not ours: never reniced or signalled from here

    def begin(self) -> bool:
        return True

    def start(self) -> None:
        """Start following (returns at once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._follow, name="traindesk-attach", daemon=True)
            self._thread.start()

    def pause(self) -> None:
        self._send("pause")

    def resume(self, changes: dict[str, Any] | None = None) -> None:
        if changes:
            raise ConfigError(
                "config: settings of a run started elsewhere cannot change from this window; "
                "Fork it once it has stopped"
            )
        self._send("resume")

    def request_stop(self, timeout: float = 10.0) -> None:
        if self.active:
            self._send("stop")

    def stop(self, timeout: float = 10.0) -> str | None:
        self.request_stop(timeout)
        return self.wait(timeout + 10.0)

    def wait(self, timeout: float | None = None) -> str | None:
        if not self._ended.wait(timeout):
            return None
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
        return self._state

    def detach(self) -> None:
        """Stop following; the run goes on."""
        self._detach.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
        self._ended.set()

    # -- internals ---------------------------------------------------------------------------
    def _send(self, command: str) -> None:
        try:
            send(self._run_dir, command)
        except RunError as exc:
            self._emit([log_record(None, "error", str(exc))])

    def _emit(self, records: list[dict[str, Any]]) -> None:
        for fn in list(self._listeners):
            fn(records)

    def _follow(self) -> None:
        tail = MetricsTail(self._files.metrics)
        gone_since: float | None = None
        try:
            while not self._detach.is_set():
                records = tail.read()
                if records:
                    self._observe(records)
                    self._emit(records)
                if self._state in END_STATES:
                    break
                if active_run_pid(self._run_dir) is None:
                    gone_since = gone_since or time.monotonic()
                    if time.monotonic() - gone_since > GONE_GRACE_S:
                        self._end_without_record()
                        break
                else:
                    gone_since = None
                self._detach.wait(POLL_S)
            if self._state in END_STATES:
                self._read_summary()
        finally:
            self._ended.set()

    def _observe(self, records: list[dict[str, Any]]) -> None:
        """The run's state, launcher and workers' starting details, as the one reducer reads them."""
        self._stats.add(records)
        if self._stats.state is not None:
            self._state = self._stats.state
        if self._stats.launcher:
            self.launcher = self._stats.launcher

    def _read_summary(self) -> None:
        deadline = time.monotonic() + 5.0  # written just before the end state; give a slow disk a moment
        while time.monotonic() < deadline and not self._detach.is_set():
            summary = read_summary(self._run_dir)
            if summary and summary.get("status") in END_STATES:
                self.summary = summary
                self.error = summary.get("error")
                self.launcher = str(summary.get("launcher") or self.launcher)
                return
            time.sleep(0.1)

    def _end_without_record(self) -> None:
        summary = read_summary(self._run_dir) or {}
        status = summary.get("status") if summary.get("status") in END_STATES else "failed"
        self.summary = summary or None
        self.error = summary.get("error") or (
            None if status != "failed" else "the run's process ended without writing its end"
        )
        self._state = str(status)
        self._emit([state_record(None, str(status), self.error or "the run's process is gone")])
