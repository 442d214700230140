"""A worker's way back from a diverged loss: its last healthy weights, kept in place, and the rule for its rate.

A :class:`Recovery` keeps a copy of a worker's model (parameters and buffers)
taken every ``KEEP_EVERY`` steps while the loss stays healthy: finite, and not
more than ``HEALTHY_GROWTH`` times the mean of the interval before (a loss on
its way to overflow is not kept). When a loss stops being finite the worker
copies those weights back, forgets its optimizer's state (its momentum led
there), divides its own learning rate by ``LR_DIVISOR`` and goes on; after
``MAX_RECOVERIES`` the next divergence fails the run as before. The copies are
preallocated: keeping costs one in-place copy per ``KEEP_EVERY`` steps, never an
allocation.
"""

from __future__ import annotations

import math

import torch
from torch import nn

KEEP_EVERY = 50  # steps between copies of the healthy weights
HEALTHY_GROWTH = 3.0  # an interval whose mean loss grew more than this is not kept
LR_DIVISOR = 10.0
MAX_RECOVERIES = 5  # lr / 10**5 at most; the next divergence fails the run


class Recovery:
    """The healthy weights of one worker's model and how often they were needed."""

    def __init__(self, model: nn.Module, step: int) -> None:
        self.model = model
        self.kept = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.kept_step = step
        self.recoveries = 0
        self._sum = 0.0
        self._n = 0
        self._last_mean: float | None = None

    @property
    def exhausted(self) -> bool:
        return self.recoveries >= MAX_RECOVERIES

    def observe(self, loss: float, step: int) -> None:
        """A finite step's loss; every ``KEEP_EVERY`` steps the weights are kept when the interval was healthy."""
        self._sum += loss
        self._n += 1
        if step % KEEP_EVERY:
            return
        mean = self._sum / self._n
        self._sum, self._n = 0.0, 0
        healthy = math.isfinite(mean) and (self._last_mean is None or mean <= HEALTHY_GROWTH * self._last_mean)
        self._last_mean = mean
        if healthy and self._finite():
            with torch.no_grad():
                for k, v in self.model.state_dict().items():
                    self.kept[k].copy_(v)
            self.kept_step = step

    def _finite(self) -> bool:
        return all(bool(torch.isfinite(v).all()) for v in self.model.state_dict().values() if v.is_floating_point())

    def restore(self, optimizer: torch.optim.Optimizer) -> int:
        """Put the kept weights back and clear the optimizer's state; returns the step they were kept at."""
        with torch.no_grad():
            for k, v in self.model.state_dict().items():
                v.copy_(self.kept[k])
        optimizer.state.clear()
        self.recoveries += 1
        self._sum, self._n, self._last_mean = 0.0, 0, None
        return self.kept_step
