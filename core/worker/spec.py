"""What a worker is told besides its data, models and channels: :class:`WorkerSpec` (picklable)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.config import Config
from core.worker.position import Position

if TYPE_CHECKING:
    from core.strategies.base import Strategy


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs besides data, models and channels (picklable)."""

    rank: int
    world_size: int
    config: Config
    strategy: Strategy  # the run's strategy (of ``config``): it plans the worker's part and names its loop
    threads: int
    parent_pid: int
    local_rank: int = 0  # rank on this machine (device choice under torchrun)
    node: str = ""  # the machine's name, for the records
    gather_records: bool = False  # torchrun: rank 0 collects every rank's records at agreement points
    dist_init: str = ""  # process group rendezvous: "file://..." or "env://"
    start: Position = Position()  # where to continue (a resumed or forked run: its checkpoint's position)
    run_dir: str = ""  # the run directory (a search keeps its study there)
    optimizer_state: bytes | None = None
    rng_state: bytes | None = None
    precision_state: bytes | None = None  # the precision object's state_dict() (a gradient scaler's scale)
