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


def selection_metric(cfg: Any, task: str) -> str:
    """The metric that picks best.pt and drives early stopping and the plateau schedule (cfg: a Config)."""
    chosen = cfg.train.select_by
    if chosen != "auto":
        return str(chosen)
    if task == "regression":
        return "val_rmse"
    return str(cfg.train.monitor)


def search_metric(cfg: Any, task: str) -> str:
    """What a search optimises: search.metric, or the selection metric where it makes no sense for the task."""
    metric = str(cfg.search.metric)
    if task == "regression" and metric in CLASSIFICATION_ONLY:
        return selection_metric(cfg, task)
    if task != "regression" and metric in REGRESSION_ONLY:
        return str(cfg.train.monitor)
    return metric
