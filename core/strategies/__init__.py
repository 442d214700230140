"""The strategies: how worker processes share a training run.

One module per strategy, each a :class:`~core.strategies.base.Strategy`
subclass; this registry names them. Adding a strategy touches its module and
one line here. The registry imports nothing heavy: the config validates
``parallel.strategy`` against :data:`NAMES` without loading torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.config import Config
    from core.strategies.base import Strategy

# name -> "module:Class", imported when a run asks for it
REGISTRY: dict[str, str] = {
    "single": "core.strategies.single:Single",
    "hogwild": "core.strategies.hogwild:Hogwild",
    "ddp": "core.strategies.ddp:DDP",
    "sweep": "core.strategies.sweep:Sweep",
}
NAMES: tuple[str, ...] = tuple(REGISTRY)


def strategy_class(name: str) -> type["Strategy"]:
    module, _, cls = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]


def get_strategy(config: "Config") -> "Strategy":
    """The strategy object of a config (``parallel.strategy``)."""
    return strategy_class(config.parallel.strategy)(config)
