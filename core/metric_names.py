"""Metric names, which way is better, and which metric a run selects by: a leaf module (no imports of core).

The config validates its metric keys against these; strategies, the session and the workers ask here
which metric picks best.pt, a sweep's result and a search's objective.
"""

from __future__ import annotations

from typing import Any

# every metric an evaluation may report; higher is better for those in MAXIMIZED
METRICS = ("val_loss", "val_accuracy", "val_balanced_accuracy", "val_macro_f1", "val_rmse", "val_mae", "val_r2")
MAXIMIZED = ("val_accuracy", "val_balanced_accuracy", "val_macro_f1", "val_r2")
CLASSIFICATION_ONLY = ("val_accuracy", "val_balanced_accuracy", "val_macro_f1")
REGRESSION_ONLY = ("val_rmse", "val_mae", "val_r2")


def higher_is_better(metric: str) -> bool:
    return metric in MAXIMIZED


def selection_metric(cfg: Any, task: str, skewed: bool = False) -> str:
    """The metric that picks best.pt (the model a run hands on: its figure everywhere), a sweep's winner, early
    stopping and the plateau schedule (cfg: a Config; ``skewed``: the largest class has at least
    ``IMBALANCE_RATIO`` times the smallest's training samples).

    ``train.select_by``, else ``train.monitor``, else what a user means by the best model: the lowest RMSE of
    a regression, the accuracy of a classifier, its balanced accuracy when the classes are skewed.
    """
    for chosen in (cfg.train.select_by, cfg.train.monitor):
        if chosen != "auto":
            return str(chosen)
    if task == "regression":
        return "val_rmse"
    return "val_balanced_accuracy" if skewed else "val_accuracy"


def search_metric(cfg: Any, task: str) -> str:
    """What a search optimises: search.metric, or the selection metric where it makes no sense for the task."""
    metric = str(cfg.search.metric)
    if task == "regression" and metric in CLASSIFICATION_ONLY:
        return selection_metric(cfg, task)
    if task != "regression" and metric in REGRESSION_ONLY:
        return selection_metric(cfg, task)
    return metric
