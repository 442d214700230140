"""Whether a run's workers are alive and heard from: dead processes, stalled workers, a broken queue.

The collector asks on every turn: a worker process that ended without its
last record failed (or was ended by the stop escalation); one that sends
nothing for ``parallel.stall_timeout`` seconds while the run is not paused is
reported stalled; a record batch that a dying worker left half-sent ends the
reading of the queue, and the run stops.
"""

from __future__ import annotations

import queue as queue_mod
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.runfiles.records import log_record, lost_record, state_record
from core.session.machinery.receive import QueueBroken, receive

if TYPE_CHECKING:
    from core.session.machinery.context import RunContext
    from core.session.session import Session

OnRecords = Callable[[list[dict[str, Any]]], None]
OnDone = Callable[[dict[str, Any]], None]

SECONDARY_S = 2.0  # a peer's failure this soon after a death is caused by it (a process group's collectives)


class ProcessHealth:
    def __init__(self, session: Session, ctx: RunContext) -> None:
        self.session = session
        self.ctx = ctx
        self.stalled: set[int] = set()
        self._last_seen: dict[int, float] = {}  # worker -> monotonic time of its last record
        self._queue_broken = False  # a dying worker left a batch half-sent: nothing more can be read
        self._error_at = 0.0

    def heard(self, worker: int, now: float) -> bool:
        """A record from ``worker`` came; True when it had been reported stalled (it progresses again)."""
        self._last_seen[worker] = now
        if worker in self.stalled:
            self.stalled.discard(worker)
            return True
        return False

    def resumed(self) -> None:
        """The run goes on after a pause: the paused time is no stall."""
        now = time.monotonic()
        for rank in self._last_seen:
            self._last_seen[rank] = now

    def failed(self) -> None:
        """A worker reported its failure now."""
        self._error_at = time.monotonic()

    def receive(self, queue: Any, timeout: float) -> list[dict[str, Any]] | None:
        """The next batch of records, None when none came; a batch a dying worker left half-sent ends the
        reading (the workers are then stopped, and ended when they cannot say so)."""
        if self._queue_broken:
            time.sleep(timeout)
            return None
        try:
            return receive(queue, timeout, self.ctx.procs.any_dead)
        except queue_mod.Empty:
            return None
        except (QueueBroken, EOFError, OSError) as exc:
            self._queue_broken = True
            self.ctx.log(
                "error", f"records from the workers stopped: a worker ended while sending them ({exc}); the run stops"
            )
            self.session.request_stop()
            return None

    def check_processes(self, on_records: OnRecords, worker_done: OnDone) -> None:
        """Each worker process that ended without its last record: read what it left (``on_records``), else
        end it as stopped or failed (``worker_done``)."""
        s, ctx = self.session, self.ctx
        procs, done = ctx.procs, s.stats.done
        for rank in range(len(procs)):
            if rank in done or procs.alive(rank):
                continue
            self._drain_for(rank, on_records)
            if rank in done:
                continue
            deadline = ctx.stop_deadline
            if deadline is not None and ctx.facts.error is None and time.monotonic() >= deadline:
                # ended by the stop escalation (terminate/kill): the run was stopped, not failed
                ctx.log(
                    "warning", f"worker {rank} did not stop in time and was ended ({procs.exit_reason(rank)})", rank
                )
                worker_done(lost_record(rank, "stopped", None))
                continue
            message = procs.describe_exit(rank)
            ctx.emit([log_record(rank, "error", message), state_record(rank, "failed", message)])
            # a dead rank makes its peers' collectives fail a moment later: the death is the cause
            secondary = s.strategy.uses_process_group and time.monotonic() - self._error_at < SECONDARY_S
            if ctx.facts.error is None or secondary:
                ctx.facts.error = message
            worker_done(lost_record(rank, "failed", message))

    def _drain_for(self, rank: int, on_records: OnRecords, wait: float = 0.5) -> None:
        """A worker exited: read what it sent before its end (its pipe may still hold it)."""
        s, channels = self.session, self.ctx.channels
        assert channels is not None
        deadline = time.monotonic() + wait
        while rank not in s.stats.done and time.monotonic() < deadline and not self._queue_broken:
            batch = self.receive(channels.queue, 0.05)
            if batch:
                on_records(batch)

    def check_stalls(self) -> None:
        """Report a worker that sends nothing while the run is not paused (a deadlock, a hung loader)."""
        s = self.session
        limit = s.config.parallel.stall_timeout
        if not limit or self.ctx.run.value != "running":
            return
        now = time.monotonic()
        for rank in range(s.num_workers):
            if rank in s.stats.done or rank in self.stalled:
                continue
            seen = self._last_seen.setdefault(rank, now)
            if now - seen > limit:
                self.stalled.add(rank)
                self.ctx.log(
                    "warning",
                    f"worker {rank} stalled: no progress for {now - seen:.0f} s "
                    f"(parallel.stall_timeout = {limit:g}); Stop ends it",
                    rank,
                )
