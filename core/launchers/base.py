"""What a launcher is to the session, and what the session holds of each worker it started.

:class:`~core.launchers.local.LocalLauncher` (processes of this machine) and
:class:`~core.launchers.torchrun.TorchrunLauncher` (rank 0 under torchrun, its
training on a thread) both satisfy :class:`Launcher`; the session holds each
started worker as a :class:`WorkerHandle`, which a ``multiprocessing.Process``
and the torchrun launcher's ``RankThread`` both are.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from core.data import PreparedData
    from core.worker.channels import Channels
    from core.worker.spec import WorkerSpec


class WorkerHandle(Protocol):
    """One started worker: a process, or a thread that behaves like one."""

    @property
    def pid(self) -> int | None: ...

    @property
    def exitcode(self) -> int | None:
        """None while it runs; negative: ended by that signal."""

    def start(self) -> None: ...

    def is_alive(self) -> bool: ...

    def join(self, timeout: float | None = None) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class Launcher(Protocol):
    """How a run's workers come to exist and talk to the session."""

    name: str  # "local" or "torchrun": summary.json's "launcher"

    def warm_up(self) -> None:
        """Make the first start fast (e.g. start the forkserver); nothing when there is nothing to warm."""

    def channels(self, command: int) -> Channels:
        """The queue, control word and settings box between the session and its workers."""

    def rendezvous(self, uses_process_group: bool) -> str:
        """Where a process group meets ("file://...", "env://"), "" when the strategy uses none."""

    def attach(self, run_dir: Path) -> None:
        """The run directory exists: record what this launcher needs there."""

    def start(
        self, specs: list[WorkerSpec], data: PreparedData, shared: list[Any], channels: Channels
    ) -> list[WorkerHandle]:
        """Start the workers this process runs; on failure none is left running and the error is raised."""

    def summary_extra(self, nodes: list[str]) -> dict[str, Any]:
        """The launcher's keys of summary.json."""

    def end_server_with_workers(self) -> None:
        """This process runs one run and no other: what starts workers may end once they have."""

    def workers_ended(self) -> None:
        """Every worker this process started has ended (the run's evaluation comes next)."""

    def cleanup(self) -> None:
        """The run is over: remove what the launcher made."""
