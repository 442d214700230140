"""Steering a live run from outside its process: a control file in the run directory.

``traindesk pause|resume|stop RUN_DIR`` (and a window attached to a run it did
not start) write ``control.json``; the run's session polls it and acts as if
its own pause/resume/stop had been called, so its state records acknowledge
the command in ``metrics.jsonl``. Plain files and no torch: the window and
the command line import this without the engine.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from core.errors import RunError
from core.runfiles.layout import RunDir
from core.runfiles.records import STATE
from core.runfiles.writing import MetricsTail, atomic_write_json, read_summary

COMMANDS = ("pause", "resume", "stop")
# the session state that acknowledges each command
ACKNOWLEDGED_BY = {
    "pause": ("paused",),
    "resume": ("running",),
    "stop": ("stopping", "finishing", "finished", "stopped", "failed"),
}


def active_run_pid(run_dir: Path) -> int | None:
    """The pid of the process running this run now, or None (the runs directory's lock tells)."""
    import fcntl

    run_dir = Path(run_dir)
    lock = run_dir.parent / ".active"
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:  # held: somebody runs something in this runs directory
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
            pid, _, name = holder.partition(", run ")
            if name == run_dir.name and pid.startswith("pid "):
                return int(pid[4:])
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def send(run_dir: Path, command: str) -> dict[str, Any]:
    """Ask the active run in ``run_dir`` to pause, resume or stop; RunError (one line) if there is none."""
    run_dir = Path(run_dir)
    if command not in COMMANDS:
        raise RunError(f"control: unknown command {command!r}; use one of {', '.join(COMMANDS)}")
    if not RunDir(run_dir).is_run():
        raise RunError(f"control: {run_dir} is not a run directory")
    if active_run_pid(run_dir) is None:
        summary = read_summary(run_dir)
        ended = f" (it {summary['status']})" if summary and summary.get("status") else ""
        raise RunError(f"control: {run_dir} holds no active run{ended}")
    request = {"command": command, "id": time.time_ns(), "t": time.time(), "pid": os.getpid()}
    atomic_write_json(RunDir(run_dir).control, request)
    return request


def wait_acknowledged(
    run_dir: Path, request: dict[str, Any], timeout: float = 10.0, tail: MetricsTail | None = None
) -> dict[str, Any] | None:
    """The session state record that acknowledges ``request``, or None after ``timeout``."""
    tail = tail or MetricsTail(RunDir(run_dir).metrics, start_at_end=False)
    wanted = ACKNOWLEDGED_BY[request["command"]]
    deadline = time.monotonic() + timeout
    while True:
        for rec in tail.read():
            if (
                rec.get("kind") == STATE
                and rec.get("worker") is None
                and rec.get("state") in wanted
                and rec.get("t", 0) >= request["t"] - 1e-3
            ):
                return rec
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


class ControlWatcher:
    """The session side: new requests in the control file, each returned once."""

    def __init__(self, run_dir: Path) -> None:
        self.path = RunDir(run_dir).control
        self._seen: int | None = None
        self._mtime = 0
        try:  # a request left from an earlier process of this run is not for us
            self._seen = int(json.loads(self.path.read_text())["id"])
            self._mtime = self.path.stat().st_mtime_ns
        except (OSError, ValueError, KeyError, TypeError):
            pass

    def poll(self) -> dict[str, Any] | None:
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            return None
        if mtime == self._mtime:
            return None
        self._mtime = mtime
        try:
            request = json.loads(self.path.read_text())
            rid = int(request["id"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if rid == self._seen or request.get("command") not in COMMANDS:
            return None
        self._seen = rid
        return dict(request)
