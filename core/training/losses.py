"""Losses and validation metrics for the two tasks, and which metric picks the best checkpoint.

Classification reports loss, accuracy, balanced accuracy and macro F1 (as
scikit-learn defines them, computed from the confusion matrix so that ranks
can sum their parts); regression reports loss (on the standardised target),
RMSE, MAE and R² in the target's own units. Everything is summed into one
float64 vector per evaluation (:func:`eval_stats`), reduced across ranks by
addition, then turned into the record's metrics (:func:`eval_metrics`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from core.config import Config
from core.metric_names import higher_is_better, search_metric, selection_metric  # noqa: F401 - one place to ask
from core.training.scores import regression_report  # noqa: F401 - the scores of whole prediction sets live there

HUBER_DELTA = 1.0


def class_weights(y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Inverse-frequency ("balanced") weights: n / (k * count), as scikit-learn's compute_class_weight."""
    counts = torch.bincount(y.long(), minlength=num_classes).double()
    present = counts > 0
    weights = torch.ones(num_classes, dtype=torch.float64)
    weights[present] = counts.sum() / (present.sum() * counts[present])
    return weights.float()


class TaskLoss:
    """The training loss of a task: cross-entropy (optionally weighted) or MSE/Huber on the scaled target."""

    def __init__(self, task: str, loss: str = "mse", weights: torch.Tensor | None = None) -> None:
        self.task, self.loss, self.weights = task, loss, weights

    def to(self, device: torch.device) -> TaskLoss:
        if self.weights is not None:
            self.weights = self.weights.to(device)
        return self

    def __call__(self, out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        if self.task == "regression":
            pred = out.reshape(-1).float()
            if self.loss in ("huber", "auto"):  # auto: huber, see TrainConfig.loss
                return F.huber_loss(pred, y.float(), reduction=reduction, delta=HUBER_DELTA)
            return F.mse_loss(pred, y.float(), reduction=reduction)
        if self.weights is not None and reduction == "mean":
            return F.cross_entropy(out, y, weight=self.weights.to(out.dtype))
        return F.cross_entropy(out, y, reduction=reduction)


def make_loss(cfg: Config, info: Any, y_train: torch.Tensor | None) -> TaskLoss:
    task = getattr(info, "task", "classification")
    weights = None
    if task != "regression" and cfg.train.class_weights == "balanced" and y_train is not None:
        weights = class_weights(y_train, info.num_classes)
    return TaskLoss(task, cfg.train.loss, weights)


def eval_stats(
    out: torch.Tensor, y: torch.Tensor, loss: TaskLoss, num_classes: int, target_scale: tuple[float, float] = (0.0, 1.0)
) -> torch.Tensor:
    """One batch's parts of the metrics, float64 on the CPU (summable across batches and ranks)."""
    n = float(len(y))
    loss_sum = F.cross_entropy(out, y, reduction="sum") if loss.task != "regression" else loss(out, y, "sum")
    head = torch.stack([loss_sum.double().cpu(), torch.tensor(n, dtype=torch.float64)])
    if loss.task == "regression":
        mean, std = target_scale
        pred = out.reshape(-1).double().cpu() * std + mean
        true = y.double().cpu() * std + mean
        err = pred - true
        parts = torch.stack([(err * err).sum(), err.abs().sum(), true.sum(), (true * true).sum()])
        return torch.cat([head, parts])
    pred = out.argmax(1).cpu()
    cm = torch.bincount(y.cpu().long() * num_classes + pred, minlength=num_classes * num_classes)
    return torch.cat([head, cm.double()])


def eval_metrics(stats: torch.Tensor, task: str, num_classes: int) -> dict[str, float]:
    """The record's metrics from summed :func:`eval_stats`."""
    n = max(1.0, float(stats[1]))
    out = {"val_loss": float(stats[0]) / n}
    if task == "regression":
        sse, sae, s, s2 = (float(v) for v in stats[2:6])
        ss_tot = s2 - s * s / n
        out.update(val_rmse=(sse / n) ** 0.5, val_mae=sae / n, val_r2=1.0 - sse / ss_tot if ss_tot > 1e-12 else 0.0)
        return out
    cm = stats[2:].reshape(num_classes, num_classes)
    out.update(confusion_metrics(cm))
    return out


def confusion_metrics(cm: torch.Tensor) -> dict[str, float]:
    """Accuracy, balanced accuracy and macro F1 from a confusion matrix (rows true, columns predicted).

    As scikit-learn: balanced accuracy averages recall over the classes present
    in the true labels; macro F1 averages F1 over classes present in either.
    """
    cm = cm.double()
    total = float(cm.sum())
    tp = torch.diagonal(cm)
    true_n = cm.sum(1)
    pred_n = cm.sum(0)
    present = true_n > 0
    recall = torch.where(present, tp / true_n.clamp(min=1), torch.zeros_like(tp))
    either = present | (pred_n > 0)
    denom = true_n + pred_n
    f1 = torch.where(denom > 0, 2 * tp / denom.clamp(min=1), torch.zeros_like(tp))
    return {
        "val_accuracy": float(tp.sum()) / max(1.0, total),
        "val_balanced_accuracy": float(recall[present].mean()) if bool(present.any()) else 0.0,
        "val_macro_f1": float(f1[either].mean()) if bool(either.any()) else 0.0,
    }
