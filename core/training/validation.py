"""A model's evaluation on a validation split, and where it is kept: eval.json and summary.json's figures.

The run's end (``attach_evaluation``, called by the session) and an evaluation
of a past run (``core.services.evaluate_run``) both compute it here: classification scores
(``core.training.scores``) with the most confident mistakes, or a regression's RMSE,
MAE and R² with (actual, predicted) pairs for the plots. The full report is
``RunDir.evaluation`` (eval.json); a compact one goes into summary.json's
``evaluation`` key through ``core.runfiles.writing``, the one writer of that file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import RunError
from core.metric_names import FIGURE_NAMES
from core.runfiles.layout import RunDir
from core.training.scores import classification_scores

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from core.data import PreparedData

EVAL_FILE = RunDir("").evaluation.name  # what summary.json's "evaluation" names as its full report
EVAL_FORMAT = "traindesk.eval"
MISCLASSIFIED_KEPT = 500  # eval.json lists at most this many misclassified samples (the least confident first)
RESIDUALS_KEPT = 2000  # (actual, predicted) pairs eval.json keeps for the window's plots: a seeded sample
BATCH = 4096


def report(
    y_true: np.ndarray, probs: np.ndarray, classes: Sequence[str], paths: Sequence[str] | None = None
) -> dict[str, Any]:
    """The full evaluation of predicted ``probs`` against ``y_true``."""
    import numpy as np

    y_true = np.asarray(y_true, dtype=np.int64)
    y_pred = probs.argmax(axis=1)
    out = classification_scores(y_true, y_pred, classes)
    wrong = np.flatnonzero(y_pred != y_true)
    confidence = probs[wrong, y_pred[wrong]] if len(wrong) else np.empty(0)
    order = wrong[np.argsort(-confidence, kind="stable")][:MISCLASSIFIED_KEPT]  # most confident mistakes first
    out["misclassified_total"] = int(len(wrong))
    out["misclassified"] = [
        {
            "index": int(i),
            "true": str(classes[y_true[i]]),
            "predicted": str(classes[y_pred[i]]),
            "confidence": round(float(probs[i, y_pred[i]]), 6),
            **({"path": paths[i]} if paths else {}),
        }
        for i in order
    ]
    return out


def compact(full: dict[str, Any]) -> dict[str, Any]:
    """The few figures summary.json carries; eval.json has the rest."""
    if full.get("task") == "regression":
        return {
            "split": full.get("split", "validation"),
            "n": full["n"],
            "rmse": round(full["rmse"], 6),
            "mae": round(full["mae"], 6),
            "r2": round(full["r2"], 6),
            "file": EVAL_FILE,
        }
    worst = min(full["per_class"], key=lambda c: (c["f1"], c["class"])) if full["per_class"] else None
    return {
        "split": full.get("split", "validation"),
        "n": full["n"],
        "accuracy": round(full["accuracy"], 6),
        "macro_precision": round(full["macro"]["precision"], 6),
        "macro_recall": round(full["macro"]["recall"], 6),
        "macro_f1": round(full["macro"]["f1"], 6),
        "worst_class": {"class": worst["class"], "f1": round(worst["f1"], 6)} if worst else None,
        "misclassified": full["misclassified_total"],
        "file": EVAL_FILE,
    }


# ----------------------------------------------------------------------------- model on a split


def predict_probs(model: nn.Module, x: torch.Tensor, batch: int = BATCH) -> np.ndarray:
    """Softmax outputs of ``model`` (eval mode, no grad) on standardised ``x``, in batches."""
    import numpy as np
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            outs = [torch.softmax(model(xb), dim=1) for xb in x.split(batch)] if len(x) else []
    finally:
        model.train(was_training)
    return torch.cat(outs).numpy() if outs else np.empty((0, 0), dtype=np.float32)


def _header(**extra: Any) -> dict[str, Any]:
    return {"format": EVAL_FORMAT, "version": 1, "t": round(time.time(), 3), "split": "validation", **extra}


def evaluate_split(model: nn.Module, data: PreparedData) -> dict[str, Any]:
    """The full report of ``model`` on ``data``'s validation split."""
    from core.data import FeatureSplit, ImageSplit, full_tensors

    val = data.val
    if len(val) == 0:
        raise RunError("evaluate: the run has no validation split (data.val_fraction = 0)")
    x, y = full_tensors(val, data.info)
    if data.info.task == "regression":
        return _regression_split(model, x, y, data)
    probs = predict_probs(model, x)
    # the image files, also where a frozen backbone's cached features stand for them: what a gallery shows
    paths = list(val.paths) if isinstance(val, (ImageSplit, FeatureSplit)) and val.paths else None
    full = {**_header(), **report(y.numpy(), probs, data.info.class_names, paths)}
    full["loss"] = cross_entropy(probs, y.numpy())
    return full


def cross_entropy(probs: np.ndarray, y: np.ndarray) -> float:
    """The mean cross-entropy of class probabilities against the true classes (what val_loss measures)."""
    import numpy as np

    if len(y) == 0:
        return 0.0
    p = probs[np.arange(len(y)), np.asarray(y, dtype=np.int64)].astype(np.float64)
    return float(-np.log(np.maximum(p, 1e-12)).mean())


def sample_rows(n: int, k: int, seed: int = 0, keep: Sequence[int] = ()) -> np.ndarray:
    """``k`` of ``n`` row indices drawn at random (seeded) across the whole split, in order; all when n <= k.
    The rows in ``keep`` are among them (a plot's extremes: its axes then reach the split's)."""
    import numpy as np

    if n <= k:
        return np.arange(n)
    must = np.unique(np.asarray(keep, dtype=np.int64))[:k]
    rest = np.setdiff1d(np.arange(n), must, assume_unique=True)
    drawn = np.random.default_rng(seed).choice(rest, size=k - must.size, replace=False)
    return np.sort(np.concatenate([must, drawn]))


def _regression_split(model: nn.Module, x: torch.Tensor, y: torch.Tensor, data: PreparedData) -> dict[str, Any]:
    """RMSE, MAE and R² in the target's units, and (actual, predicted) pairs for the plots."""
    import torch

    from core.training.scores import regression_report

    mean, std = data.info.target_scale
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(xb).reshape(-1) for xb in x.split(BATCH)]) * std + mean
    true = y.double() * std + mean
    out = regression_report(pred.tolist(), true.tolist())
    extremes = [int(v.argmin()) for v in (true, pred)] + [int(v.argmax()) for v in (true, pred)]
    keep = torch.from_numpy(sample_rows(len(true), RESIDUALS_KEPT, keep=extremes))  # a plot's rows: the whole split
    return {
        **_header(task="regression"),
        **out,
        "pairs": [[round(float(a), 6), round(float(p), 6)] for a, p in zip(true[keep].tolist(), pred[keep].tolist())],
        "pairs_axes": "actual, predicted",
        "pairs_sample": "seeded random rows of the whole split, its lowest and highest included",
    }


# ----------------------------------------------------------------------------- keeping it


def save_evaluation(run_dir: Path, full: dict[str, Any], result: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Write eval.json and the compact figures (and ``result``) into summary.json (when it exists); the new
    summary."""
    from core.runfiles.writing import atomic_write_json, update_summary

    run = RunDir(run_dir)
    try:
        atomic_write_json(run.evaluation, full)
        return update_summary(run.path, {"evaluation": compact(full), **({"result": result} if result else {})})
    except OSError as exc:
        raise RunError(f"evaluate: cannot write {run.evaluation}: {exc.strerror or exc}") from None


def result_figures(full: dict[str, Any]) -> dict[str, float]:
    """An evaluation's figures under the names of the records' metrics (val_accuracy, val_rmse, ...)."""
    if full.get("task") == "regression":
        return {"val_rmse": full["rmse"], "val_mae": full["mae"], "val_r2": full["r2"]}
    out = {
        "val_accuracy": full["accuracy"],
        "val_balanced_accuracy": full["macro"]["recall"],
        "val_macro_f1": full["macro"]["f1"],
    }
    if "loss" in full:
        out["val_loss"] = full["loss"]
    return out


def run_result(full: dict[str, Any], checkpoint: str, epoch: Any, select_by: str) -> dict[str, Any]:
    """summary.json's ``result``: the model the run hands on (its checkpoint and epoch), the metric that chose
    it and its figures, measured on those very weights as ``traindesk evaluate`` measures them."""
    figures = {k: round(float(v), 6) for k, v in result_figures(full).items()}
    out: dict[str, Any] = {"checkpoint": checkpoint, "epoch": epoch, "select_by": select_by, **figures}
    if select_by in figures:
        out["value"] = figures[select_by]
    return out


def result_line(summary: dict[str, Any]) -> str:
    """The run's figure in words: its handed-on model's, e.g. "val accuracy 0.9828 (checkpoints/best.pt, epoch
    8, chosen by val_accuracy)"; "" when the run kept none (failed, or stopped before an evaluation)."""
    result = summary.get("result")
    if not isinstance(result, dict):
        return ""
    if "val_r2" in result:
        shown = ["val_r2", "val_rmse", "val_mae"]
    else:
        shown = ["val_accuracy"] + [k for k in ("val_balanced_accuracy",) if result.get("select_by") == k]
    if result.get("select_by") in FIGURE_NAMES and result["select_by"] not in shown and result["select_by"] in result:
        shown.append(result["select_by"])
    figures = ", ".join(f"{FIGURE_NAMES[k]} {result[k]:.4g}" for k in shown if isinstance(result.get(k), (int, float)))
    where = f"checkpoints/{result.get('checkpoint', 'last')}.pt"
    epoch = f", epoch {result['epoch']}" if result.get("epoch") is not None else ""
    return f"{figures} ({where}{epoch}, chosen by {result.get('select_by')})"


def attach_evaluation(
    run_dir: Path | None,
    model: Callable[[], tuple[nn.Module, str, Any]],
    data: PreparedData | None,
    summary: dict[str, Any] | None,
    select_by: str = "",
) -> dict[str, Any] | None:
    """Session hook, after summary.json is written: evaluate the model the run hands on, write eval.json and
    add ``evaluation`` and ``result`` to summary.json.

    ``model()`` gives that model, which checkpoint it is (``best`` once the run kept one, else ``last``) and its
    epoch; it is called here, inside the guard. Never raises: a problem is recorded in summary.json and the
    run's status stands. A failed run is not evaluated. Returns the summary to keep (``summary`` itself when
    nothing was added).
    """
    if run_dir is None or data is None or summary is None or summary.get("status") == "failed":
        return summary
    try:
        module, which, epoch = model()
        full = evaluate_split(module, data)
        full["checkpoint"] = {"which": which, "epoch": epoch}
        return save_evaluation(Path(run_dir), full, run_result(full, which, epoch, select_by)) or summary
    except Exception as exc:  # the run is over and its checkpoint written: never fail it here
        from core.runfiles.writing import write_summary

        summary = {**summary, "evaluation": {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}}
        try:
            write_summary(Path(run_dir), summary)
        except OSError:
            pass
        return summary


def load_evaluation(run_dir: Path) -> dict[str, Any] | None:
    """eval.json of a run, or None when absent or unreadable."""
    try:
        data = json.loads(RunDir(run_dir).evaluation.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == EVAL_FORMAT else None
