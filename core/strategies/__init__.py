"""The strategies: how worker processes share a training run.

One module per strategy, each a :class:`~core.strategies.base.Strategy`
subclass; :mod:`core.strategies.registry` names them. Adding a strategy
touches its module and one line there. The registry is plain data: the
config validates ``parallel.strategy`` against its names without loading
torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.config import Config
    from core.strategies.base import Strategy

from core.strategies.registry import NAMES, REGISTRY

__all__ = ["NAMES", "REGISTRY", "advisable", "get_strategy", "strategy_class"]


def strategy_class(name: str) -> type[Strategy]:
    module, _, cls = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def get_strategy(config: Config, task: str = "classification") -> Strategy:
    """The strategy of a config (``parallel.strategy``), for data of ``task``."""
    return strategy_class(config.parallel.strategy)(config, task)


def advisable() -> tuple[str, ...]:
    """The strategies the advisor probes, in the registry's order."""
    return tuple(name for name in NAMES if strategy_class(name).advisable)
