"""The strategies by name, and the rules each makes of a config: :data:`STRATEGY_RULES` (plain data).

The config validates ``parallel.strategy`` and what the chosen strategy asks
of the other keys from this table alone, so it never loads a strategy. Each
strategy class (:mod:`core.strategies`) is named here and takes its rules
from here: its worker count, the keys only it reads, whether each worker
trains a model of its own. Adding a strategy adds its line here and its
module there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.errors import ConfigError

if TYPE_CHECKING:
    from core.config.document import Config


def _no_check(config: Config) -> None:
    """Most strategies ask nothing more of a config."""


def _one_rate_per_worker(config: Config) -> None:
    p = config.parallel
    if p.sweep_lr and len(p.sweep_lr) != p.workers:
        raise ConfigError(
            f"config: parallel.sweep_lr must have one learning rate per worker ({p.workers}), got {len(p.sweep_lr)}"
        )


def _a_space_to_search(config: Config) -> None:
    if not config.search.space:
        raise ConfigError(
            'config: [search] needs at least one key to vary, e.g. "optim.lr" = {low = 0.0001, high = 0.3, log = true}'
        )


@dataclass(frozen=True)
class StrategyRules:
    """What a strategy asks of a config, known without loading the strategy."""

    name: str
    description: str  # one line: the window's tooltip (the window shows it at its start, loading no strategy)
    fixed_workers: int = 0  # the worker count it always has (0: parallel.workers)
    own_keys: tuple[str, ...] = ()  # config keys that only this strategy reads
    model_per_worker: bool = False  # each worker trains a model of its own (a sweep)
    check: Callable[[Config], None] = _no_check  # refuse a config its keys make no sense with (ConfigError)


STRATEGY_RULES: dict[str, StrategyRules] = {
    rules.name: rules
    for rules in (
        StrategyRules("single", "One worker process: the baseline, and the easiest to debug.", fixed_workers=1),
        StrategyRules("hogwild", "Workers train one shared-memory model lock-free, each on its own data shard."),
        StrategyRules("ddp", "DistributedDataParallel: gradients averaged over ranks (gloo on CPU, nccl on GPUs)."),
        StrategyRules(
            "sweep",
            "Each worker trains its own model (one learning rate each); the best one is kept.",
            own_keys=("parallel.sweep_lr",),
            model_per_worker=True,
            check=_one_rate_per_worker,
        ),
        StrategyRules(
            "search",
            "Hyperparameter search: Optuna trials run in parallel in the workers, weak ones pruned early.",
            check=_a_space_to_search,
        ),
    )
}
NAMES: tuple[str, ...] = tuple(STRATEGY_RULES)
