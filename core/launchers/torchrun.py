"""Running as one rank of a group that ``torchrun`` (PyTorch's launcher) started.

``torchrun`` sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT;
the worker joins its process group from ``env://``. Control and records stay
in this process: a SIGTERM/SIGINT sets the stop word, and records go to a
callback (rank 0 writes them; the others may drop them).
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from core.config import Config
from core.workers import RUN, STOP, Channels, SettingsBox, WorkerSpec, default_threads


def under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"))


@dataclass
class _Word:
    value: int = RUN


@dataclass
class _Text:
    value: bytes = b""


@dataclass
class _Sink:
    """Quacks like the metrics queue: ``put`` hands each batch to a callback."""

    on_records: Callable[[list[dict[str, Any]]], None]
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, records: list[dict[str, Any]]) -> None:
        with self.lock:
            self.on_records(records)

    def close(self) -> None:
        pass

    def join_thread(self) -> None:
        pass


def local_channels(on_records: Callable[[list[dict[str, Any]]], None]) -> Channels:
    """Channels for a worker running in this very process; SIGTERM/SIGINT stop it at the next batch."""
    run_event = threading.Event()
    run_event.set()
    word = _Word()

    def on_signal(signum: int, frame: Any) -> None:
        word.value = STOP
        run_event.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return Channels(_Sink(on_records), word, run_event, _Word(0), SettingsBox(_Word(0), _Text()))


def torchrun_spec(cfg: Config) -> WorkerSpec:
    """This rank's spec from torchrun's environment: ddp over every rank of the group."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    cfg = cfg.replace("parallel", strategy="ddp", workers=world)
    return WorkerSpec(
        rank=rank, world_size=world, config=cfg,
        threads=default_threads(local_world, cfg.parallel.threads_per_worker), parent_pid=os.getppid(),
        local_rank=local_rank, dist_init="env://",
    )
