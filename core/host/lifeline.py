"""A worker's lifeline: it dies with the process that started it (a SIGKILLed GUI or CLI leaves nothing)."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1


def set_pdeathsig(sig: int = signal.SIGKILL) -> None:
    """Linux: the kernel sends ``sig`` to this process when its parent exits."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        except OSError:
            pass


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie that nobody reaped counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


SHM = "/dev/shm"
_TORCH_SEGMENT = re.compile(r"torch_(\d+)_")


def sweep_orphan_segments(folder: str = SHM) -> list[str]:
    """Remove this user's torch shared-memory segments whose process is gone; the names removed.

    Sharing by file descriptor, torch names a segment ``torch_<pid>_<n>``, opens it and unlinks the name at
    once; a process SIGKILLed between the two (a parent killed while a loader worker hands over a batch)
    leaves the name in /dev/shm for good. A run's start sweeps them (``Session`` before its workers spawn).
    """
    removed: list[str] = []
    try:
        entries = os.scandir(folder)
    except OSError:
        return removed
    uid = os.getuid()
    with entries:
        for entry in entries:
            found = _TORCH_SEGMENT.match(entry.name)
            if found is None:
                continue
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid or alive(int(found.group(1))):
                    continue
                os.unlink(entry.path)
            except OSError:
                continue
            removed.append(entry.name)
    return removed


def loader_worker_init(parent_pid: int, worker_id: int) -> None:
    """DataLoader worker_init_fn (bound to the training worker's pid with functools.partial).

    Dies with the training worker (torch's own check polls every 5 s). The
    parent may already be gone before prctl runs: then no signal would come,
    so check the parent after setting it.
    """
    set_pdeathsig()
    if os.getppid() != parent_pid:
        os._exit(0)


def die_with_parent(parent_pid: int) -> None:
    """Make this worker exit when its parent goes (SIGKILLed GUI/CLI).

    PR_SET_PDEATHSIG covers the direct parent (the forkserver, which itself
    exits when the session process dies); a watchdog thread also checks the
    session process, for platforms without prctl.
    """
    set_pdeathsig()
    ppid = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            gone = os.getppid() != ppid
            if not gone:
                try:
                    os.kill(parent_pid, 0)
                except ProcessLookupError:
                    gone = True
                except PermissionError:
                    pass
            if gone:
                os._exit(70)

    threading.Thread(target=watch, name="traindesk-parent-watch", daemon=True).start()
