"""single: one worker process trains the model; the baseline and the debugging aid."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.strategies.base import Strategy
from core.strategies.collectives import Collectives, SingleProcess

if TYPE_CHECKING:
    import torch


class Single(Strategy):
    name = "single"
    advisable = True
    fits_head = True

    def collectives(self, device: torch.device) -> Collectives:
        return SingleProcess()
