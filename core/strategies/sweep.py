"""sweep: each worker trains its own model with its own learning rate or seed; the best is kept."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.strategies.base import Strategy
from core.strategies.collectives import Collectives, SingleProcess

if TYPE_CHECKING:
    from pathlib import Path

    import torch


class Sweep(Strategy):
    name = "sweep"

    def model_index(self, rank: int) -> int:
        return rank

    def collectives(self, device: torch.device) -> Collectives:
        return SingleProcess()  # each worker trains a model of its own

    def worker_lr(self, rank: int) -> float:
        rates = self.config.parallel.sweep_lr
        return rates[rank] if rates else self.config.optim.lr

    def permutation_seed(self, rank: int) -> int:
        return self.config.train.seed + rank

    def worker_label(self, rank: int) -> str:
        if self.config.parallel.sweep_lr:
            return f"lr {self.worker_lr(rank):g}"
        return f"seed {self.worker_seed(rank)}"

    def result_worker(self, last_eval: dict[int, dict[str, Any]]) -> int:
        if not last_eval:
            return 0
        from core.metric_names import higher_is_better, selection_metric

        metric = selection_metric(self.config, self.task, self.skewed)
        sign = 1.0 if higher_is_better(metric) else -1.0
        return max(last_eval, key=lambda w: (sign * last_eval[w][metric], -last_eval[w]["val_loss"], -w))

    def summary_extra(
        self, last_eval: dict[int, dict[str, Any]], run_dir: Path | None, result: int | None = None
    ) -> dict[str, Any]:
        best = self.result_worker(last_eval) if result is None else result
        return {
            "best_worker": best,
            "best_lr": self.worker_lr(best),
            "sweep": [
                {
                    "worker": w,
                    "lr": self.worker_lr(w),
                    "label": self.worker_label(w),
                    "val_accuracy": e.get("val_accuracy"),
                    "val_loss": e["val_loss"],
                    **{k: v for k, v in e.items() if k in ("val_rmse", "val_mae", "val_r2")},
                }
                for w, e in sorted(last_eval.items())
            ],
        }
