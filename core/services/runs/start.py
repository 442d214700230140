"""Starting a run, each way a face asks for one: new, continued, forked, attached to, or joined under torchrun.

Every function returns a :class:`~core.session.handle.RunHandle` (``start()`` runs it). Nothing here imports torch
until a run is made: the window imports this module at start-up.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.launchers import under_torchrun
from core.session.handle import RunHandle

if TYPE_CHECKING:
    from core.config import Config
    from core.session.attached import AttachedSession
    from core.session.machinery.buffer import RecordBuffer
    from core.session.session import Session

__all__ = [
    "RunHandle",
    "attach_run",
    "continue_run",
    "fork_run",
    "join_torchrun",
    "new_run",
    "prestart",
    "record_buffer",
    "stop_forkserver",
    "under_torchrun",
    "warm_up",
]


def prestart() -> None:
    """Start the workers' forkserver now, so it imports torch while this process does (the command line, the window)."""
    from core.launchers import local

    local.prestart()


def warm_up() -> None:
    """Start the forkserver with torch preloaded, in the background (the window at start: a quick first Start)."""
    from core.launchers import local

    local.warm_up()


def stop_forkserver() -> None:
    """End the forkserver (a command that leaves before its run started anything)."""
    from core.launchers import local

    local.stop_forkserver()


def new_run(cfg: Config, runs_dir: str | Path = "runs", name: str | None = None) -> Session:
    """A new run of ``cfg`` in a new folder of ``runs_dir``."""
    from core.session import Session

    return Session(cfg, runs_dir=runs_dir, name=name)


def continue_run(run_dir: str | Path, epochs: int | None = None, runs_dir: str | Path | None = None) -> Session:
    """A stopped or failed run from its last checkpoint, in its own folder (``epochs``: a new total)."""
    from core.session import Session

    return Session.from_run(run_dir, epochs=epochs, runs_dir=runs_dir)


def fork_run(run_dir: str | Path, changes: dict[str, Any], runs_dir: str | Path | None = None) -> Session:
    """A new run from ``run_dir``'s last consistent checkpoint with ``changes`` (optim.* and train.* keys)."""
    from core.session import Session

    return Session.fork(run_dir, changes=changes, runs_dir=runs_dir)


def attach_run(run_dir: str | Path) -> AttachedSession:
    """The live run another process runs in ``run_dir``, followed through its files (RunError: none is live)."""
    from core.session import AttachedSession

    return AttachedSession(run_dir)


def record_buffer() -> RecordBuffer:
    """Where a run's records wait, from the run's thread, for a consumer's (the window's reader)."""
    from core.session import RecordBuffer

    return RecordBuffer()


def join_torchrun(cfg: Config, runs_dir: str | Path, name: str | None = None) -> Session | None:
    """Under torchrun: rank 0's run (a new one, or the one a restarted group continues); None on other ranks,
    once they trained (SystemExit with a failed rank's code). core.errors.PeersLost: the group lost a rank.

    Every rank joins the process group first; rank 0 decides where each rank starts and tells them.
    """
    from core.launchers import torchrun as tr
    from core.runfiles.writing import read_summary
    from core.session import Session

    world = int(os.environ["WORLD_SIZE"])
    cfg = cfg.replace("parallel", strategy="ddp", workers=world)
    tr.join_group(cfg)
    rank = int(os.environ["RANK"])
    if rank != 0:
        start = tr.broadcast(None)
        if start is None:  # rank 0 could not set up the run and says why
            return None
        code = tr.run_other_rank(start["config"], start["fields"][rank], Path(runs_dir))
        if code:
            raise SystemExit(code)
        return None
    session = None
    try:
        previous = tr.find_run(Path(runs_dir))
        if previous is not None:
            run_dir, restarts = previous
            before = read_summary(run_dir) or {}
            session = Session.from_run(run_dir, epochs=cfg.train.epochs, launcher=tr.TorchrunLauncher())
            resumed_samples = sum(p.samples for p in session.start_positions())
            session.launcher.restarts = restarts + 1
            lost = max(0, int(before.get("samples") or 0) - resumed_samples)
            session.launcher.samples_lost = int(before.get("samples_lost") or 0) + lost
        else:
            session = Session(cfg, runs_dir=runs_dir, name=name, launcher=tr.TorchrunLauncher())
    finally:
        fields = [session.start_fields(r) for r in range(world)] if session is not None else None
        tr.broadcast({"config": session.config, "fields": fields} if session is not None else None)
    return session
