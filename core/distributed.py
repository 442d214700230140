"""Running the ddp worker under ``torchrun`` (PyTorch's launcher), one process per rank.

``torchrun`` sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT;
the worker initialises its process group from ``env://``. Control and
records stay in-process: a SIGTERM/SIGINT sets the stop word, and records go
to a callback (rank 0 writes them; the others may drop them).
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from core.config import Config
from core.workers import RUN, STOP, Channels, WorkerSpec, default_threads


def under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"))


@dataclass
class _Word:
    value: int = RUN


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
    return Channels(_Sink(on_records), word, run_event)


def torchrun_spec(cfg: Config) -> WorkerSpec:
    """This rank's spec from torchrun's environment."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    device = cfg.parallel.device
    if device == "cuda":
        device = f"cuda:{local_rank % max(1, torch.cuda.device_count())}"
    return WorkerSpec(
        rank=rank, world_size=world, strategy="ddp", config=cfg, seed=cfg.train.seed + rank, lr=cfg.optim.lr,
        threads=default_threads(local_world, cfg.parallel.threads_per_worker), parent_pid=os.getppid(),
        dist_init="env://", device=device,
    )
