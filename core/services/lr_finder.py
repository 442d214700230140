"""The learning-rate range test (fastai's ``lr_find``): ``traindesk lr-find CONFIG``.

The learning rate grows exponentially from ``start`` to ``end`` over a few
hundred mini-batches of the user's data and model while the smoothed loss is
recorded; the test stops once the loss runs away. The suggestion is fastai's
"valley": the middle of the longest stretch over which the loss keeps
falling, looked for where the curve has begun to fall (on its flat start,
noise would stretch the valley towards rates too low to train). It trains
a copy: the model given (or the config's fresh one) keeps its weights.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from core.config import Config

START_LR, END_LR, STEPS = 1e-7, 10.0, 100  # fastai's defaults
SMOOTH = 0.98  # exponential moving average of the loss (fastai's beta)
DIVERGED = 4.0  # stop once the smoothed loss exceeds this many times its minimum


@dataclass
class LRFinderResult:
    lrs: list[float]  # the lr of every step taken
    losses: list[float]  # the smoothed loss after each step
    suggestion: float  # the "valley" lr
    index: int  # the step of the suggestion
    stopped_early: bool  # the loss diverged before ``end``

    def as_dict(self) -> dict[str, Any]:
        return {
            "lrs": self.lrs,
            "losses": self.losses,
            "suggestion": self.suggestion,
            "index": self.index,
            "stopped_early": self.stopped_early,
        }


def valley(lrs: list[float], losses: list[float]) -> int:
    """fastai's valley: the index a third and a half into the longest run of falling losses."""
    n = len(losses)
    if n < 3:
        return max(0, n - 1)
    lds = [1] * n
    max_start = max_end = 0
    for i in range(1, n):
        for j in range(i):
            if losses[i] < losses[j] and lds[i] < lds[j] + 1:
                lds[i] = lds[j] + 1
        if lds[max_end] < lds[i]:
            max_end = i
            max_start = max_end - lds[max_end]
    sections = (max_end - max_start) / 3
    return min(n - 1, max_start + int(sections) + int(sections / 2))


def _falling_from(losses: list[float], lo: int, hi: int) -> int:
    """Where the loss starts to fall for good: the last step before the minimum at or above the start's loss.

    Before it the curve is flat, and noise there would stretch the valley towards rates too low to train.
    """
    if hi - lo < 3:
        return lo
    low = min(range(lo, hi), key=losses.__getitem__)
    start = losses[lo]
    for i in range(low, lo, -1):
        if losses[i] >= start:
            return i
    return lo


def find_lr(
    cfg: Config,
    model: nn.Module | None = None,
    start: float = START_LR,
    end: float = END_LR,
    steps: int = STEPS,
    progress: Callable[[int, float, float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> LRFinderResult:
    """Run the range test on ``cfg``'s data with a copy of ``model`` (default: the config's fresh model).

    ``progress(step, lr, smoothed_loss)`` is called after every step; ``should_stop()`` ends the test early.
    """
    import torch

    from core.data import make_batches
    from core.errors import UserError
    from core.services.data import run_data
    from core.training.models import build_model_for
    from core.training.optimizers import make_optimizer, set_lr

    if not (0 < start < end) or steps < 5:
        raise UserError(
            f"lr-find: needs 0 < start < end and at least 5 steps, got start {start:g}, end {end:g}, steps {steps}"
        )
    data = run_data(cfg)
    info = data.info
    torch.manual_seed(cfg.train.seed)
    if model is None:
        model = build_model_for(cfg.model, info)
    net = copy.deepcopy(model)  # the caller's weights stay as they are
    net.train()
    opt = make_optimizer(net, cfg.optim, start)
    batches = make_batches(data.train, info, cfg.train.batch_size, 0)
    from core.training.losses import make_loss

    loss_fn = make_loss(cfg, info, data.train.y if hasattr(data.train, "y") else None)  # the run's own loss
    gen = torch.Generator().manual_seed(cfg.train.seed)
    factor = (end / start) ** (1.0 / (steps - 1))
    lrs: list[float] = []
    losses: list[float] = []
    avg, best = 0.0, math.inf
    stopped_early = False
    step = 0
    while step < steps and not stopped_early:
        for xb, yb in batches.epoch(torch.randperm(len(data.train), generator=gen)):
            lr = start * factor**step
            set_lr(opt, lr)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(xb), yb)
            value = loss.item()
            if not math.isfinite(value):
                stopped_early = True
                break
            loss.backward()
            opt.step()
            avg = SMOOTH * avg + (1 - SMOOTH) * value
            smoothed = avg / (1 - SMOOTH ** (step + 1))
            lrs.append(lr)
            losses.append(smoothed)
            best = min(best, smoothed)
            step += 1
            if progress is not None:
                progress(step, lr, smoothed)
            if smoothed > DIVERGED * best:
                stopped_early = True
                break
            if step >= steps or (should_stop is not None and should_stop()):
                break
        if should_stop is not None and should_stop():
            break
    if not losses:
        raise UserError(f"lr-find: the loss was not finite at lr {start:g}; lower --start")
    # fastai leaves out the first tenth and the last 5 steps: start-up noise and the blow-up
    lo, hi = len(losses) // 10, max(len(losses) // 10 + 3, len(losses) - 5)
    lo = _falling_from(losses, lo, hi)
    window_lrs, window_losses = lrs[lo:hi], losses[lo:hi]
    index = lo + valley(window_lrs, window_losses)
    return LRFinderResult(lrs, losses, lrs[index], index, stopped_early)
