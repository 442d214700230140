"""Scores of predictions against the truth, as scikit-learn defines them; torch-free.

``classification_scores`` is the one place classification figures are computed
(accuracy, per-class precision/recall/F1/support, macro and weighted averages,
the confusion matrix): a run's evaluation (eval.json) and a labelled prediction
input (a test set) both report it. ``regression_report`` gives RMSE, MAE and R².
The training loop's own running figures (``core.training.losses``) are sums over batches
and ranks, computed on tensors; these are for whole prediction sets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

CONFUSION_AXES = "rows: true class, columns: predicted class"


def classification_scores(
    y_true: np.ndarray | Sequence[int], y_pred: np.ndarray | Sequence[int], classes: Sequence[str]
) -> dict[str, Any]:
    """Accuracy, per-class precision/recall/F1/support, macro and weighted averages, confusion matrix.

    ``y_true`` and ``y_pred`` index ``classes``. ``zero_division=0``: a class never predicted has
    precision 0, not NaN (JSON has no NaN).
    """
    import numpy as np

    k = len(classes)
    y_true = np.asarray(y_true, dtype=np.int64)
    y_pred = np.asarray(y_pred, dtype=np.int64)
    n = int(len(y_true))
    if n == 0:
        cm = np.zeros((len(classes), len(classes)), dtype=np.int64)
        zeros = {"precision": 0.0, "recall": 0.0, "f1": 0.0}
        return {
            "n": 0,
            "accuracy": 0.0,
            "per_class": [{"class": str(c), **zeros, "support": 0} for c in classes],
            "macro": dict(zeros),
            "weighted": dict(zeros),
            "confusion": cm.tolist(),
            "confusion_axes": CONFUSION_AXES,
        }
    if not _indices_of(y_true, k) or not _indices_of(y_pred, k):
        return _sklearn_scores(y_true, y_pred, classes)
    # scikit-learn's definitions (precision_recall_fscore_support, zero_division=0) on the confusion matrix,
    # without importing it: scikit-learn and scipy held about 100 MB in the process at a run's end
    cm = np.bincount(y_true * k + y_pred, minlength=k * k).reshape(k, k)
    tp, predicted, support = np.diagonal(cm), cm.sum(axis=0), cm.sum(axis=1)
    p, r = _divided(tp, predicted), _divided(tp, support)
    f = _divided(2.0 * tp, support + predicted.astype(np.float64))
    weights = support.astype(np.float64)  # n > 0 rows, each of a class: they never sum to 0

    def weighted(v: np.ndarray) -> float:
        return float(np.sum(v * weights) / np.sum(weights))

    macro = {"precision": float(np.mean(p)), "recall": float(np.mean(r)), "f1": float(np.mean(f))}
    return _scores(
        cm, n, (p, r, f, support), classes, macro, {"precision": weighted(p), "recall": weighted(r), "f1": weighted(f)}
    )


def _scores(
    cm: np.ndarray,
    n: int,
    prfs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    classes: Sequence[str],
    macro: dict[str, float],
    weighted: dict[str, float],
) -> dict[str, Any]:
    import numpy as np

    p, r, f, support = prfs
    per_class = [
        {
            "class": str(name),
            "precision": float(p[j]),
            "recall": float(r[j]),
            "f1": float(f[j]),
            "support": int(support[j]),
        }
        for j, name in enumerate(classes)
    ]
    return {
        "n": n,
        "accuracy": float(np.trace(cm)) / n,
        "per_class": per_class,
        "macro": macro,
        "weighted": weighted,
        "confusion": cm.astype(int).tolist(),
        "confusion_axes": CONFUSION_AXES,
    }


def _indices_of(y: np.ndarray, k: int) -> bool:
    """Every value indexes one of ``k`` classes."""
    return bool(len(y) == 0 or (int(y.min()) >= 0 and int(y.max()) < k))


def _divided(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` in float64, 0 where ``den`` is 0 (scikit-learn's ``zero_division=0``)."""
    import numpy as np

    den = np.asarray(den, dtype=np.float64)
    out = np.asarray(num, dtype=np.float64) / np.where(den == 0, 1.0, den)
    out[den == 0] = 0.0
    return out


def _sklearn_scores(y_true: np.ndarray, y_pred: np.ndarray, classes: Sequence[str]) -> dict[str, Any]:
    """``classification_scores`` by scikit-learn itself, where a value indexes no class (it is then left out
    of every count but ``n``)."""
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    labels = list(range(len(classes)))
    cm = confusion_matrix(y_true, y_pred, labels=labels)
    prfs = precision_recall_fscore_support(y_true, y_pred, labels=labels, zero_division=0)

    def average(how: str) -> dict[str, float]:
        ap, ar, af, _ = precision_recall_fscore_support(y_true, y_pred, labels=labels, average=how, zero_division=0)
        return {"precision": float(ap), "recall": float(ar), "f1": float(af)}

    return _scores(cm, int(len(y_true)), prfs, classes, average("macro"), average("weighted"))


def label_scores(truth: Sequence[str], predicted: Sequence[str], classes: Sequence[str]) -> dict[str, Any]:
    """``classification_scores`` of class names; true classes the model does not know are added, sorted."""
    return pair_scores(Counter(zip(truth, predicted)), classes)


def pair_scores(pairs: Mapping[tuple[str, str], int], classes: Sequence[str]) -> dict[str, Any]:
    """``label_scores`` from counts of (true class, predicted class) pairs: what a stream of rows too long
    to keep is scored from."""
    import numpy as np

    known = list(classes) + sorted({t for t, _ in pairs} - set(classes))
    index = {c: k for k, c in enumerate(known)}
    counts = np.fromiter(pairs.values(), dtype=np.int64, count=len(pairs))
    y_true = np.repeat(np.fromiter((index[t] for t, _ in pairs), dtype=np.int64, count=len(pairs)), counts)
    y_pred = np.repeat(np.fromiter((index[p] for _, p in pairs), dtype=np.int64, count=len(pairs)), counts)
    return classification_scores(y_true, y_pred, known)


def regression_report(pred: Sequence[float], true: Sequence[float]) -> dict[str, float]:
    """RMSE, MAE and R² of predictions (scikit-learn's definitions)."""
    from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score

    return {
        "rmse": float(mean_squared_error(true, pred) ** 0.5),
        "mae": float(mean_absolute_error(true, pred)),
        "r2": float(r2_score(true, pred)),
        "n": len(true),
    }
