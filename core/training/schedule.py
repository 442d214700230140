"""Learning-rate schedules as pure functions of the run's position, and the "better" test.

The lr of a step depends only on where the run is (global step, epoch,
fraction of the run done) and on the base lr (``optim.lr``, or a sweep
worker's own), so a paused, resumed or continued worker recomputes it, and
a base changed while paused simply becomes the schedule's new base. The
``plateau`` schedule also carries a factor, which travels with the worker's
position in checkpoints.
"""

from __future__ import annotations

import math

from core.config import ScheduleConfig
from core.metric_names import MAXIMIZED

ONE_CYCLE_DIV = 25.0  # one-cycle starts at base / 25 (torch's OneCycleLR div_factor)


def improved(value: float, best: float | None, monitor: str, min_delta: float = 0.0) -> bool:
    """Whether ``value`` of the monitored metric beats ``best`` by more than ``min_delta``."""
    if not math.isfinite(value):
        return False
    if best is None:
        return True
    if monitor in MAXIMIZED:
        return value > best + min_delta
    return value < best - min_delta


def lr_at(cfg: ScheduleConfig, base: float, step: int, epoch: int, progress: float, scale: float = 1.0) -> float:
    """The lr of one optimizer step.

    ``step``: steps this worker took before this one (0 for the first);
    ``epoch``: the epoch in progress (1-based); ``progress``: the fraction of
    the run done once this step is taken (the last step has 1.0).
    """
    p = min(1.0, max(0.0, progress))
    kind = cfg.kind
    if kind == "step":
        lr = base * cfg.gamma ** ((epoch - 1) // cfg.step_epochs)
    elif kind == "cosine":
        lr = cfg.min_lr + (base - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * p))
    elif kind == "one-cycle":
        lr = _one_cycle(cfg, base, p)
    elif kind == "plateau":
        lr = base * scale
    else:
        lr = base
    if cfg.warmup_steps and step < cfg.warmup_steps:
        lr *= (step + 1) / cfg.warmup_steps
    return lr


def _one_cycle(cfg: ScheduleConfig, base: float, p: float) -> float:
    """torch's OneCycleLR (cosine phases): base/25 up to base, then down to min_lr."""
    start = base / ONE_CYCLE_DIV
    if cfg.pct_start > 0 and p < cfg.pct_start:
        frac = p / cfg.pct_start
        return base + (start - base) * 0.5 * (1.0 + math.cos(math.pi * frac))
    rest = 1.0 - cfg.pct_start
    frac = (p - cfg.pct_start) / rest if rest > 0 else 1.0
    return cfg.min_lr + (base - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * frac))


def scheduled(cfg: ScheduleConfig) -> bool:
    """Whether the lr changes during a run (a constant schedule without warm-up does not)."""
    return cfg.kind != "constant" or cfg.warmup_steps > 0


class Plateau:
    """ReduceLROnPlateau's rule: after ``patience`` evaluations without improvement, scale by gamma."""

    def __init__(self, cfg: ScheduleConfig, monitor: str, scale: float = 1.0) -> None:
        self.cfg, self.monitor, self.scale = cfg, monitor, scale
        self.best: float | None = None
        self.bad = 0

    def observe(self, metrics: dict[str, float]) -> bool:
        """Take one evaluation; True when the factor was just lowered."""
        value = metrics[self.monitor]
        if improved(value, self.best, self.monitor):
            self.best, self.bad = value, 0
            return False
        self.bad += 1
        if self.bad > self.cfg.patience:
            self.scale *= self.cfg.gamma
            self.bad = 0
            return True
        return False


def lr_sequence(cfg: ScheduleConfig, base: float, steps_per_epoch: int, epochs: int) -> list[float]:
    """The lr of every step of a run with equal epochs (for plots and tests)."""
    total = steps_per_epoch * epochs
    return [lr_at(cfg, base, s, s // steps_per_epoch + 1, (s + 1) / total) for s in range(total)]
