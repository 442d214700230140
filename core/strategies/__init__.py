"""The strategies: how worker processes share a training run.

One module per strategy, each a :class:`~core.strategies.base.Strategy`
subclass, named here by its name. The config knows the strategies by name
and by the rules each makes of a config
(:data:`~core.config.strategy_rules.STRATEGY_RULES`, plain data, so
validating a config loads no strategy). Adding a strategy touches its module,
its line there and one line here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.config.strategy_rules import NAMES
from core.strategies.ddp import DDP
from core.strategies.hogwild import Hogwild
from core.strategies.search import Search
from core.strategies.single import Single
from core.strategies.sweep import Sweep

if TYPE_CHECKING:
    from core.config import Config
    from core.strategies.base import Strategy

__all__ = ["CLASSES", "NAMES", "advisable", "get_strategy", "strategy_class"]

CLASSES: dict[str, type[Strategy]] = {cls.name: cls for cls in (Single, Hogwild, DDP, Sweep, Search)}
assert tuple(CLASSES) == NAMES, "every strategy the config names has its class, in the config's order"


def strategy_class(name: str) -> type[Strategy]:
    return CLASSES[name]


def get_strategy(config: Config, task: str = "classification") -> Strategy:
    """The strategy of a config (``parallel.strategy``), for data of ``task``."""
    return strategy_class(config.parallel.strategy)(config, task)


def advisable() -> tuple[str, ...]:
    """The strategies the advisor probes, in the config's order."""
    return tuple(name for name in NAMES if CLASSES[name].advisable)
