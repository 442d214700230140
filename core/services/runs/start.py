"""Starting a run, each way a face asks for one: new, continued, forked, attached to, or joined under torchrun.

Every function returns a :class:`~core.session.handle.RunHandle` (``start()`` runs it). Nothing here imports torch
until a run is made: the window imports this module at start-up.
"""

from __future__ import annotations

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
    "command_run",
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
    """Start the workers' forkserver now, a fork of this process once it has imported torch (the command line)."""
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
    once they trained (SystemExit with a failed rank's code). core.errors.PeersLost: the group lost a rank."""
    from core.session.group import join_torchrun as join

    return join(cfg, runs_dir, name)


def command_run(
    cfg: Config | None,
    runs_dir: str | Path = "runs",
    name: str | None = None,
    resume: str | Path | None = None,
    epochs: int | None = None,
) -> Session | None:
    """The run ``traindesk train`` asks for: under torchrun this rank's (None on a rank other than 0, once it
    trained), else the run ``resume`` names continued (for ``epochs`` in all, when given), else a new run of
    ``cfg``."""
    if under_torchrun():
        if cfg is None:
            raise ValueError("a torchrun rank needs the run's config")
        return join_torchrun(cfg, runs_dir, name)
    if resume is not None:
        return continue_run(resume, epochs=epochs, runs_dir=runs_dir)
    if cfg is None:
        raise ValueError("a new run needs a config")
    return new_run(cfg, runs_dir, name)
