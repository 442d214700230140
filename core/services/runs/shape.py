"""A run's shape, for a face that draws or counts it: from its summary, a live run's handle or a config.

:class:`RunShape` (workers, models, labels, the task and its figure) is written into every summary; a run from
before has it computed here from its config. The strategies' facts a settings panel shows (a description, the
keys only it reads, a fixed worker count) come from :func:`strategy_facts`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from core.config import Config
from core.config.strategy_rules import STRATEGY_RULES
from core.runfiles.records import EVAL
from core.runfiles.shape import RunShape

__all__ = ["RunShape", "StrategyFacts", "result_worker", "shape_of", "shape_of_run", "strategy_facts"]


@dataclass(frozen=True)
class StrategyFacts:
    name: str
    description: str  # one line: the window's tooltip
    own_keys: tuple[str, ...]  # config keys only it reads
    fixed_workers: int  # the worker count it always has (0: parallel.workers)


def strategy_facts(name: str) -> StrategyFacts:
    rules = STRATEGY_RULES[name]  # plain data: the strategy classes load torch, which the window's start does without
    return StrategyFacts(name, rules.description, tuple(rules.own_keys), int(rules.fixed_workers))


def shape_of(cfg: Config, task: str = "classification") -> RunShape:
    """The shape a run of ``cfg`` has (before it starts, or a run that saved none)."""
    from core.strategies import get_strategy

    return RunShape.of(get_strategy(cfg, task=task))


def shape_of_run(summary: dict[str, Any] | None, cfg: Config | None) -> RunShape | None:
    """A past run's shape: its summary's, else its config's (None with neither)."""
    saved = RunShape.from_dict((summary or {}).get("shape"))
    if saved is not None:
        return saved
    if cfg is None:
        return None
    return shape_of(cfg, task=str((summary or {}).get("task") or "classification"))


def result_worker(cfg: Config, records: Iterable[dict[str, Any]], task: str = "classification") -> int:
    """The worker whose model is a past run's result, from its records (a sweep's winner; else worker 0)."""
    from core.strategies import get_strategy

    strategy = get_strategy(cfg, task=task)
    return strategy.result_worker_of(r for r in records if r.get("kind") == EVAL)
