"""A worker's life as a process: entry point, isolation, its last record, teardown.

``worker_main(spec, data, shared, channels)`` is a module-level function taking
picklable arguments, so it runs under ``spawn`` and ``forkserver``; it isolates
the process from the terminal, ties it to its parent (:mod:`core.host.lifeline`),
sets its threads and runs :func:`run_worker`, which torchrun's rank 0 also runs
on a thread. ``run_worker`` builds the strategy's worker loop (its
``loop``, a :class:`~core.worker.loop.WorkerLoop`: the
:class:`~core.worker.trainer.Trainer`, or a strategy's own such as the search's
trials), reports how it ended in a last ``_done`` record that carries where to
continue from, delivers every record and only then tears down.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from typing import Any

import torch

from core.data import PreparedData
from core.host.machine import keep_freed_memory
from core.runfiles.records import done_record
from core.training.checkpoint import state_to_bytes
from core.training.shared_state import Shared
from core.worker.channels import Channels, RecordSender
from core.worker.loop import WorkerLoop
from core.worker.spec import WorkerSpec
from core.worker.trainer import Diverged


def _done(spec: WorkerSpec, status: str, trainer: WorkerLoop | None, error: str | None) -> dict[str, Any]:
    """The last record of a worker: how it ended and where to continue from."""
    if trainer is None:
        return done_record(spec.rank, status, error, spec.start.epoch - 1, spec.start.counters())
    return done_record(
        spec.rank,
        status,
        error,
        trainer.epochs_done,
        trainer.position().as_dict(),
        state_to_bytes(trainer.optimizer.state_dict()),
        state_to_bytes(torch.get_rng_state()),
        state_to_bytes(trainer.precision.state_dict()),
    )


def run_worker(spec: WorkerSpec, data: PreparedData, shared: list[Shared], ch: Channels) -> int:
    """The body of a worker; returns the process exit code. Usable in-process (tests, torchrun)."""
    out = RecordSender(ch.queue, spec.rank)
    out.state(
        "starting", f"pid {os.getpid()}", pid=os.getpid(), node=spec.node or _hostname(), local_rank=spec.local_rank
    )
    strategy = spec.strategy
    trainer: WorkerLoop | None = None
    try:
        torch.manual_seed(strategy.worker_seed(spec.rank))
        strategy.setup_worker(spec)
        trainer = strategy.loop(spec, data, shared, ch, out, strategy)
        status = trainer.run()
        out.state(status)
        out.add(_done(spec, status, trainer, None))
        trainer.exchange_records()  # the ranks end together: the last records reach rank 0
        code = 0
    except Exception as exc:  # report everything; the session decides what the run becomes
        if isinstance(exc, Diverged):  # not a bug: the message says it all
            message = f"worker {spec.rank}: {exc}"
            out.log("error", message)
        else:
            message = f"worker {spec.rank}: {type(exc).__name__}: {exc}".splitlines()[0]
            out.log("error", traceback.format_exc())
        out.state("failed", message)
        out.add(_done(spec, "failed", trainer, message))
        code = 1
    # Deliver every record before tearing anything down: a teardown that blocks
    # (gloo joining its threads while holding the GIL) must not hold back the
    # records, and the session bounds how long it waits for the process itself.
    out.flush()
    ch.queue.close()
    ch.queue.join_thread()
    if trainer is not None:
        trainer.net = trainer.model  # drop a DDP reducer before its process group goes
    strategy.teardown_worker(failed=code != 0)
    return code


def _hostname() -> str:
    import socket

    return socket.gethostname()


def worker_main(spec: WorkerSpec, data: PreparedData, shared: list[Shared], ch: Channels) -> None:
    """Process entry point: isolate from the terminal, set threads, train, exit."""
    # Ctrl-C in a terminal reaches the whole process group; the session decides how to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from core.host.lifeline import die_with_parent

    die_with_parent(spec.parent_pid)
    keep_freed_memory()
    torch.set_num_threads(spec.threads)
    code = run_worker(spec, data, shared, ch)
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is delivered: skip interpreter teardown, whose C++ destructors
    # (process groups, thread pools) can block or abort; loader processes die with us.
    os._exit(code)
