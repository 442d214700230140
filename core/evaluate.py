"""Evaluation on the validation split: accuracy, per-class precision/recall/F1, confusion matrix.

At the end of a run (``attach_evaluation``, called by the session) and on
demand for a past run (``traindesk evaluate RUN_DIR``). The split is rebuilt
with ``load_data(cfg.data, seed=cfg.train.seed)``: it is seeded, so it is the
split the run validated on. The full report goes to ``eval.json``; a compact
one to the ``evaluation`` key of ``summary.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from core.errors import RunError

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from core.data import PreparedData

EVAL_FILE = "eval.json"
MISCLASSIFIED_KEPT = 500     # eval.json lists at most this many misclassified samples (the least confident first)
BATCH = 4096


# ----------------------------------------------------------------------------- metrics (scikit-learn)


def metrics(y_true: np.ndarray, y_pred: np.ndarray, classes: Sequence[str]) -> dict[str, Any]:
    """Accuracy, per-class precision/recall/F1/support, macro and weighted averages, confusion matrix.

    ``zero_division=0``: a class never predicted has precision 0, not NaN (JSON has no NaN).
    """
    import numpy as np
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    labels = list(range(len(classes)))
    y_true = np.asarray(y_true, dtype=np.int64)
    y_pred = np.asarray(y_pred, dtype=np.int64)
    n = int(len(y_true))
    if n == 0:
        cm = np.zeros((len(classes), len(classes)), dtype=np.int64)
        zeros = {"precision": 0.0, "recall": 0.0, "f1": 0.0}
        return {"n": 0, "accuracy": 0.0,
                "per_class": [{"class": str(c), **zeros, "support": 0} for c in classes],
                "macro": dict(zeros), "weighted": dict(zeros), "confusion": cm.tolist(),
                "confusion_axes": "rows: true class, columns: predicted class"}
    cm = confusion_matrix(y_true, y_pred, labels=labels)
    p, r, f, support = precision_recall_fscore_support(y_true, y_pred, labels=labels, zero_division=0)
    per_class = [{"class": str(name), "precision": float(p[k]), "recall": float(r[k]), "f1": float(f[k]),
                  "support": int(support[k])} for k, name in enumerate(classes)]

    def average(how: str) -> dict[str, float]:
        ap, ar, af, _ = precision_recall_fscore_support(y_true, y_pred, labels=labels, average=how, zero_division=0)
        return {"precision": float(ap), "recall": float(ar), "f1": float(af)}

    return {
        "n": n,
        "accuracy": float(np.trace(cm)) / n,
        "per_class": per_class,
        "macro": average("macro"),
        "weighted": average("weighted"),
        "confusion": cm.astype(int).tolist(),
        "confusion_axes": "rows: true class, columns: predicted class",
    }


def report(y_true: np.ndarray, probs: np.ndarray, classes: Sequence[str],
           paths: Sequence[str] | None = None) -> dict[str, Any]:
    """The full evaluation of predicted ``probs`` against ``y_true``."""
    import numpy as np

    y_true = np.asarray(y_true, dtype=np.int64)
    y_pred = probs.argmax(axis=1)
    out = metrics(y_true, y_pred, classes)
    wrong = np.flatnonzero(y_pred != y_true)
    confidence = probs[wrong, y_pred[wrong]] if len(wrong) else np.empty(0)
    order = wrong[np.argsort(-confidence, kind="stable")][:MISCLASSIFIED_KEPT]  # most confident mistakes first
    out["misclassified_total"] = int(len(wrong))
    out["misclassified"] = [
        {"index": int(i), "true": str(classes[y_true[i]]), "predicted": str(classes[y_pred[i]]),
         "confidence": round(float(probs[i, y_pred[i]]), 6), **({"path": paths[i]} if paths else {})}
        for i in order
    ]
    return out


def compact(full: dict[str, Any]) -> dict[str, Any]:
    """The few figures summary.json carries; eval.json has the rest."""
    if full.get("task") == "regression":
        return {"split": full.get("split", "validation"), "n": full["n"], "rmse": round(full["rmse"], 6),
                "mae": round(full["mae"], 6), "r2": round(full["r2"], 6), "file": EVAL_FILE}
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


def evaluate_split(model: nn.Module, data: PreparedData) -> dict[str, Any]:
    """The full report of ``model`` on ``data``'s validation split."""
    from core.data import ImageSplit, full_tensors

    val = data.val
    if len(val) == 0:
        raise RunError("evaluate: the run has no validation split (data.val_fraction = 0)")
    x, y = full_tensors(val, data.info)
    if data.info.task == "regression":
        return _regression_split(model, x, y, data)
    probs = predict_probs(model, x)
    paths = list(val.paths) if isinstance(val, ImageSplit) else None
    full = report(y.numpy(), probs, data.info.class_names, paths)
    return {"format": "traindesk.eval", "version": 1, "t": round(time.time(), 3), "split": "validation", **full}


RESIDUALS_KEPT = 2000  # (actual, predicted) pairs eval.json keeps for the window's plots


def _regression_split(model: nn.Module, x: torch.Tensor, y: torch.Tensor, data: PreparedData) -> dict[str, Any]:
    """RMSE, MAE and R² in the target's units, and (actual, predicted) pairs for the plots."""
    import torch

    from core.metrics import regression_report

    mean, std = data.info.target_scale
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(xb).reshape(-1) for xb in x.split(BATCH)]) * std + mean
    true = y.double() * std + mean
    out = regression_report(pred.tolist(), true.tolist())
    return {"format": "traindesk.eval", "version": 1, "t": round(time.time(), 3), "split": "validation",
            "task": "regression", **out,
            "pairs": [[round(float(a), 6), round(float(p), 6)]
                      for a, p in zip(true[:RESIDUALS_KEPT].tolist(), pred[:RESIDUALS_KEPT].tolist())],
            "pairs_axes": "actual, predicted"}


def _check_same_data(data: PreparedData, info: dict[str, Any], run_dir: Path) -> None:
    """The data must still be what the run trained on, or the "same split" is another one."""
    import numpy as np

    now = data.info
    same = (list(now.class_names) == [str(c) for c in info["class_names"]]
            and list(now.input_shape) == list(info["input_shape"])
            and np.allclose(now.mean, info["mean"], rtol=1e-4, atol=1e-5)
            and np.allclose(now.std, info["std"], rtol=1e-4, atol=1e-5))
    if not same:
        raise RunError(f"evaluate: {run_dir}: the data source has changed since the run (classes, features "
                       "or statistics differ), so its validation split cannot be rebuilt")


def evaluate_run(run_dir: Path, write: bool = True, checkpoint: str = "last") -> dict[str, Any]:
    """Evaluate a past run's checkpoint (last or best) on its validation split; write eval.json and summary.json."""
    from core.checkpoint import checkpoint_file, load_checkpoint, model_from_checkpoint
    from core.config import from_dict
    from core.data import load_data

    run_dir = Path(run_dir).expanduser()
    if not run_dir.is_dir():
        raise RunError(f"evaluate: run directory not found: {run_dir}")
    ckpt = load_checkpoint(checkpoint_file(run_dir, checkpoint, "evaluate"))
    model = model_from_checkpoint(ckpt, where=f"evaluate: {run_dir}")
    cfg = from_dict(ckpt["config"])
    data = load_data(cfg.data, seed=cfg.train.seed, share=False, task=cfg.train.task)
    _check_same_data(data, ckpt["info"], run_dir)
    full = evaluate_split(model, data)
    full["checkpoint"] = {"which": checkpoint, "epoch": ckpt.get("epoch"), "steps": ckpt.get("steps")}
    if write:
        save_evaluation(run_dir, full)
    return full


def save_evaluation(run_dir: Path, full: dict[str, Any]) -> dict[str, Any] | None:
    """Write eval.json and the compact figures into summary.json (when it exists); the new summary."""
    from core.runlog import atomic_write_json, read_summary

    try:
        atomic_write_json(run_dir / EVAL_FILE, full)
        summary = read_summary(run_dir)
        if summary is not None:
            summary["evaluation"] = compact(full)
            atomic_write_json(run_dir / "summary.json", summary)
    except OSError as exc:
        raise RunError(f"evaluate: cannot write {run_dir / EVAL_FILE}: {exc.strerror or exc}") from None
    return summary


def attach_evaluation(run_dir: Path | None, final_model: Callable[[], nn.Module], data: PreparedData | None,
                      summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """Session hook, after summary.json is written: evaluate, write eval.json, add ``evaluation``.

    In ``Session._finish``, after ``self._write_summary(status)``::

        self.summary = attach_evaluation(self.run_dir, self.final_model, self._data, self.summary)

    ``final_model`` is called here, inside the guard. Never raises: a problem is recorded in
    summary.json and the run's status stands. A failed run is not evaluated. Returns the
    summary to keep (``summary`` itself when nothing was added).
    """
    if run_dir is None or data is None or summary is None or summary.get("status") == "failed":
        return summary
    try:
        full = evaluate_split(final_model(), data)
        return save_evaluation(Path(run_dir), full) or summary
    except Exception as exc:  # the run is over and its checkpoint written: never fail it here
        from core.runlog import atomic_write_json

        summary = {**summary, "evaluation": {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}}
        try:
            atomic_write_json(Path(run_dir) / "summary.json", summary)
        except OSError:
            pass
        return summary


def load_evaluation(run_dir: Path) -> dict[str, Any] | None:
    """eval.json of a run, or None when absent or unreadable."""
    try:
        data = json.loads((Path(run_dir) / EVAL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == "traindesk.eval" else None


# ----------------------------------------------------------------------------- images of the mistakes (for the GUI)


def misclassified_images(run_dir: Path, full: dict[str, Any], limit: int = 48) -> list[tuple[np.ndarray, str]]:
    """(uint8 HxW or HxWx3 image, caption) for the first misclassified samples; [] for non-image data."""
    import numpy as np

    from core.checkpoint import load_checkpoint
    from core.config import from_dict
    from core.data import ImageSplit, decode_image, load_data

    items = full.get("misclassified", [])[:limit]
    if not items:
        return []
    ckpt = load_checkpoint(run_dir)
    info = ckpt["info"]
    if not info.get("image_shape"):
        return []
    shape = tuple(int(s) for s in info["image_shape"])
    out: list[tuple[np.ndarray, str]] = []
    if all("path" in it for it in items):
        for it in items:
            out.append((_to_uint8(decode_image(it["path"], shape)), _caption(it)))
        return out
    cfg = from_dict(ckpt["config"])
    data = load_data(cfg.data, seed=cfg.train.seed, share=False, task=cfg.train.task)
    if isinstance(data.val, ImageSplit):
        return []
    x = data.val.x.numpy()
    mean, std = info.get("mean"), info.get("std")
    if mean is not None and std is not None and x.ndim >= 2:
        # back to the pixels the user gave, not standardised ones (per feature or per channel)
        if np.size(mean) == int(np.prod(x.shape[1:])):
            stats: tuple[int, ...] = (1, *x.shape[1:])
        elif np.size(mean) in (1, x.shape[1]):
            stats = (1, -1) + (1,) * (x.ndim - 2)
        else:
            stats = ()
        if stats:
            x = x * np.asarray(std, dtype=np.float32).reshape(stats) \
                + np.asarray(mean, dtype=np.float32).reshape(stats)
    lo, hi = _pixel_range(x)
    for it in items:
        if it["index"] < len(x):
            out.append((_to_uint8(x[it["index"]].reshape(shape), lo, hi), _caption(it)))
    return out


def _pixel_range(x: np.ndarray) -> tuple[float, float]:
    """The range pixels live in: 0-1 or 0-255 when the data fits one, else the data's own (one for all images)."""
    lo, hi = float(x.min()), float(x.max())
    if lo >= -1e-3 and hi <= 1.0 + 1e-3:
        return 0.0, 1.0
    if lo >= -1e-3 and hi <= 255.0 + 1e-3:
        return 0.0, 255.0 if hi > 16.0 else hi  # digits are 0-16
    return lo, hi


def _to_uint8(img: np.ndarray, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """(C, H, W) floats -> HxW or HxWx3 uint8 over [lo, hi] (default: the image's own range)."""
    import numpy as np

    lo = float(img.min()) if lo is None else lo
    hi = float(img.max()) if hi is None else hi
    arr = (np.clip((img - lo) / (hi - lo or 1.0), 0.0, 1.0) * 255).astype(np.uint8)
    return arr[0] if arr.shape[0] == 1 else np.ascontiguousarray(arr.transpose(1, 2, 0))


def _caption(item: dict[str, Any]) -> str:
    return f"true {item['true']} → {item['predicted']} ({item['confidence']:.0%})"
