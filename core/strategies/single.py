"""single: one worker process trains the model; the baseline and the debugging aid."""

from __future__ import annotations

from core.strategies.base import Strategy


class Single(Strategy):
    name = "single"
    description = "One worker process: the baseline, and the easiest to debug."
    fixed_workers = 1
    advisable = True
