"""One race process per raced run: an advisory ``flock`` on ``RUN/races/race.lock``, held by the race from the start
of :meth:`~core.services.race.race.Race.run` (a new race or a resumed one) until it ends, stops or its process
dies (the kernel drops a dead process's flock, so a race killed by SIGKILL is resumable at once).

The file says who holds it (``pid 1234, race 20250101-120000``) for the one line that refuses a second race. One
lock per run, not per race folder: a new race on a run and the resumption of any of its races exclude each
other, since two races on one run would both install a winner. Without ``fcntl`` (Windows) there is no lock: a
race is never refused as running there, and nothing stops two processes racing one run.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from core.errors import RunError
from core.runfiles.writing import hold_lock, lock_holder, release_lock

LOCK_FILE = "race.lock"


def lock_path(run: Path) -> Path:
    return Path(run) / "races" / LOCK_FILE


@dataclass(frozen=True)
class RunningRace:
    """A race of ``run`` that a process (this one or another) runs now: its folder's name and process id (an
    empty name and pid 0 if the holder had not yet written them)."""

    run: Path
    stamp: str
    pid: int

    def line(self) -> str:
        """The one line that refuses a second race process on the run."""
        name = Path(self.run).name
        if not self.stamp or not self.pid:
            return f"race: {name} has a race running in another process; stop it first"
        return f"race: {name}'s race {self.stamp} is running (process {self.pid}); stop it first"


class RaceRunning(RunError):
    """A race of the run runs now: resuming one of its races, or starting another, is refused."""

    def __init__(self, running: RunningRace) -> None:
        super().__init__(running.line())
        self.running = running


def _holder(run: Path, text: str) -> RunningRace:
    pid, _, stamp = text.partition(", race ")
    try:
        number = int(pid.removeprefix("pid "))
    except ValueError:
        number, stamp = 0, ""
    return RunningRace(Path(run), stamp, number)


class RaceLock:
    """The lock a race holds while it runs; :meth:`release` (or the process's end) lets another race the run."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd

    @classmethod
    def acquire(cls, run: Path, folder: Path) -> RaceLock:
        """Hold ``run``'s race lock for the race in ``folder``; :class:`RaceRunning` (one line) if a race of the
        run holds it, this process's own included."""
        if sys.platform == "win32":  # no flock: no lock (see the module's note)
            return cls(None)
        path = lock_path(run)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, holder = hold_lock(path, f"pid {os.getpid()}, race {Path(folder).name}")
        except OSError as exc:
            raise RunError(f"race: cannot lock {path}: {exc.strerror}") from None
        if fd is None:
            raise RaceRunning(_holder(run, holder))
        return cls(fd)

    def release(self) -> None:
        if self._fd is not None:
            release_lock(self._fd)
            self._fd = None


def running_race(run: Path) -> RunningRace | None:
    """The race of ``run`` that a process runs now (its lock is held), or None: an unfinished race is resumable
    only while this is None."""
    if sys.platform == "win32":
        return None
    import fcntl

    try:
        fd = os.open(lock_path(run), os.O_RDONLY)
    except OSError:  # no race ever ran here, or the folder is not ours to read
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:  # held: a race runs
            return _holder(run, lock_holder(fd))
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
