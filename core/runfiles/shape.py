"""A run's shape: what its workers are, as the faces draw and count them, computed once from its strategy.

The session writes it into ``summary.json`` (``shape``) and a live run's handle gives it, so a face learns a run's
workers, models, labels, task and figure without asking a strategy class.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from core.metric_names import selection_metric

if TYPE_CHECKING:
    from core.strategies.base import Strategy


@dataclass(frozen=True)
class RunShape:
    strategy: str
    workers: int
    models: int  # 1: the workers train one model; workers: each trains its own (a sweep, a search)
    labels: tuple[str, ...]  # each worker's name in plots and tables ("worker 0", "lr 0.05", …)
    separate: bool  # each worker's model is a run of its own (a sweep): its curves are drawn apart
    sweep_lr: tuple[float, ...] | None  # a sweep of learning rates: each worker's
    trials: int | None  # a search: the trials it trains (its progress counts trials, not epochs)
    epochs: int
    task: str
    figure: str  # the metric that picks the run's model (its figure everywhere)
    samples_per_epoch: int | None = None  # once the data is known: what one epoch of the run trains on

    @classmethod
    def of(cls, strategy: Strategy, n_train: int | None = None) -> RunShape:
        cfg = strategy.config
        n = strategy.num_workers
        separate = strategy.num_models > 1
        return cls(
            strategy=strategy.name,
            workers=n,
            models=strategy.num_models,
            labels=tuple(strategy.worker_label(i) for i in range(n)),
            separate=strategy.model_per_worker,
            sweep_lr=tuple(strategy.worker_lr(i) for i in range(n)) if separate and cfg.parallel.sweep_lr else None,
            trials=strategy.trial_budget(),
            epochs=cfg.train.epochs,
            task=strategy.task,
            figure=selection_metric(cfg, strategy.task, strategy.skewed),
            samples_per_epoch=strategy.samples_per_epoch(n_train) if n_train is not None else None,
        )

    @property
    def counts_trials(self) -> bool:
        return self.trials is not None

    @property
    def slowest(self) -> bool:
        """Its progress is its slowest worker's: each trains a model of its own for the run's epochs."""
        return self.models > 1

    def label_map(self) -> dict[int, str]:
        return dict(enumerate(self.labels))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> RunShape | None:
        """The shape a summary saved; None when it has none (a run from before) or it is not one."""
        if not isinstance(data, dict):
            return None
        try:
            sweep = data.get("sweep_lr")
            return cls(
                strategy=str(data["strategy"]),
                workers=int(data["workers"]),
                models=int(data["models"]),
                labels=tuple(str(x) for x in data["labels"]),
                separate=bool(data["separate"]),
                sweep_lr=tuple(float(x) for x in sweep) if sweep is not None else None,
                trials=int(data["trials"]) if data.get("trials") is not None else None,
                epochs=int(data["epochs"]),
                task=str(data["task"]),
                figure=str(data["figure"]),
                samples_per_epoch=int(data["samples_per_epoch"]) if data.get("samples_per_epoch") is not None else None,
            )
        except (KeyError, TypeError, ValueError):
            return None
