"""hogwild: every worker trains one shared-memory model lock-free (pytorch/examples mnist_hogwild).

Each worker has its own optimizer and its own shard of every epoch's
permutation; rank 0 evaluates the shared weights at its epoch ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.strategies.base import Strategy
from core.strategies.collectives import Collectives, SingleProcess

if TYPE_CHECKING:
    import torch


class Hogwild(Strategy):
    name = "hogwild"
    runs_on_gpu = False
    advisable = True
    fits_head = True

    def shard(self, rank: int) -> tuple[int, int]:
        return rank, self.num_workers

    def evaluates(self, rank: int) -> bool:
        return rank == 0

    def collectives(self, device: torch.device) -> Collectives:
        return SingleProcess()  # the workers share the weights themselves, not through collectives
