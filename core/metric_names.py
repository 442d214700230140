"""Metric names, which way is better, and which metric a run selects by: a leaf module (no imports of core).

The config validates its metric keys against these; strategies, the session and the workers ask here
which metric picks best.pt, a sweep's result and a search's objective.
"""

from __future__ import annotations

from typing import Any, TypeGuard

# every metric an evaluation may report; higher is better for those in MAXIMIZED
METRICS = ("val_loss", "val_accuracy", "val_balanced_accuracy", "val_macro_f1", "val_rmse", "val_mae", "val_r2")
MAXIMIZED = ("val_accuracy", "val_balanced_accuracy", "val_macro_f1", "val_r2")
CLASSIFICATION_ONLY = ("val_accuracy", "val_balanced_accuracy", "val_macro_f1")
REGRESSION_ONLY = ("val_rmse", "val_mae", "val_r2")
# how a metric is named to a person: in a sentence, and in a column's header
FIGURE_NAMES = {
    "val_accuracy": "val accuracy",
    "val_balanced_accuracy": "balanced accuracy",
    "val_macro_f1": "macro F1",
    "val_loss": "val loss",
    "val_rmse": "RMSE",
    "val_mae": "MAE",
    "val_r2": "R²",
}
SHORT_NAMES = {**FIGURE_NAMES, "val_accuracy": "val acc", "val_balanced_accuracy": "balanced acc"}


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


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def run_metric(summary: dict[str, Any] | None, cfg: Any = None) -> str:
    """The metric that is a past or live run's figure (cfg: its Config, or None when unreadable).

    The one that chose the model the run hands on (summary.json's ``result``, else its ``best``), else
    what the run's config selects by for its task (summary.json's ``task``, else the config's ``train.task``,
    else what its final figures say).
    """
    summary = summary or {}
    for chosen in ((summary.get("result") or {}).get("select_by"), (summary.get("best") or {}).get("monitor")):
        if chosen in METRICS:
            return str(chosen)
    final = summary.get("final") or {}
    task = str(summary.get("task") or getattr(getattr(cfg, "train", None), "task", "auto"))
    if task == "auto":
        regression = _number(final.get("val_rmse")) and not _number(final.get("val_accuracy"))
        task = "regression" if regression else "classification"
    if cfg is not None:
        return selection_metric(cfg, task)
    return "val_rmse" if task == "regression" else "val_accuracy"


def run_figures(summary: dict[str, Any] | None, metric: str) -> tuple[float | None, float | None]:
    """(the handed-on model's value, the last evaluation's value) of ``metric`` in summary.json, None where
    it holds none."""
    summary = summary or {}
    result, final = summary.get("result") or {}, summary.get("final") or {}
    kept = result.get(metric)
    last = final.get(metric)
    return (float(kept) if _number(kept) else None, float(last) if _number(last) else None)


def figure_text(metric: str, value: float | None, named: bool = True) -> str:
    """A figure as a table cell shows it: "R² 0.9091", "val acc 0.9828" (``named`` false: the number)."""
    if value is None or value != value:  # none, or NaN
        return ""
    number = f"{value:.4f}" if abs(value) < 1000 else f"{value:,.1f}"
    return f"{SHORT_NAMES.get(metric, metric)} {number}" if named else number
