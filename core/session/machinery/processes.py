"""The worker processes of a local run: liveness, exit reasons, ending them."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.launchers.base import WorkerHandle

from core.host.exits import exit_reason

__all__ = ["TERMINATE_GRACE_S", "WorkerProcesses", "exit_reason"]

TERMINATE_GRACE_S = 2.0


class WorkerProcesses:
    """The workers a launcher started, one per rank (processes, or torchrun's rank thread)."""

    def __init__(self, procs: list[WorkerHandle]) -> None:
        self.procs = procs

    def __len__(self) -> int:
        return len(self.procs)

    def alive(self, rank: int) -> bool:
        return bool(self.procs[rank].is_alive())

    def any_dead(self) -> bool:
        return not all(p.is_alive() for p in self.procs)

    def describe_exit(self, rank: int) -> str:
        proc = self.procs[rank]
        return f"worker {rank} (pid {proc.pid}) died: {exit_reason(proc.exitcode)}"

    def exit_reason(self, rank: int) -> str:
        return exit_reason(self.procs[rank].exitcode)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.is_alive() and p.pid is not None]

    def escalate(self, deadline: float) -> None:
        """Past ``deadline`` terminate what still runs; ``TERMINATE_GRACE_S`` later kill it."""
        now = time.monotonic()
        alive = [p for p in self.procs if p.is_alive()]
        if now < deadline or not alive:
            return
        for p in alive:
            if now < deadline + TERMINATE_GRACE_S:
                p.terminate()
            else:
                p.kill()

    def join(self, timeout: float = TERMINATE_GRACE_S) -> None:
        """Join every process; terminate, then kill, what does not exit in time."""
        for p in self.procs:
            p.join(timeout)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(timeout)
            if p.is_alive():
                p.kill()
                p.join(timeout)
