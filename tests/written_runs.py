"""Finished runs written as a session writes them (records, summary, config), without training: quick."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.config import Config


def write_run(runs: Path, name: str, cfg: Config, figures: list[dict[str, float]], result: dict[str, Any]) -> Path:
    """A finished run whose evaluations carry ``figures`` (one dict an epoch), its summary as a session writes
    it (``result``: the handed-on model's figures and the metric that chose it)."""
    run = runs / name
    run.mkdir(parents=True)
    (run / "config.toml").write_text(cfg.to_toml())
    recs: list[dict[str, Any]] = [{"kind": "state", "t": 1000.0, "worker": None, "state": "starting", "detail": ""}]
    for epoch, fig in enumerate(figures, start=1):
        t = 1000.0 + epoch
        recs.append({"kind": "step", "t": t, "worker": 0, "epoch": epoch, "step": epoch * 10, "samples": epoch * 640,
                     "loss": 1.0 / epoch, "lr": 0.05})  # fmt: skip
        recs.append({"kind": "eval", "t": t + 0.1, "worker": 0, "epoch": epoch, "val_loss": 0.5 / epoch, **fig})
    recs.append({"kind": "state", "t": 1100.0, "worker": None, "state": "finished", "detail": ""})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    regression = "val_rmse" in figures[-1]
    summary = {
        "status": "finished",
        "strategy": "single",
        "workers": 1,
        "epochs_done": len(figures),
        "samples_per_s": 1000.0,
        "wall_s": 3.0,
        "final": {"train_loss": 0.1, "val_loss": 0.5 / len(figures), "val_accuracy": None, **figures[-1]},
        "task": "regression" if regression else "classification",
        "result": {"checkpoint": "best", "epoch": 1, **result, "value": result[result["select_by"]]},
    }
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def regression_run(runs: Path, name: str, rmse: float) -> Path:
    cfg = Config().replace("data", source="csv:prices.csv", target="price").replace("train", task="regression")
    figures = [
        {"val_rmse": rmse + 0.5, "val_mae": 0.4, "val_r2": 0.8},
        {"val_rmse": rmse, "val_mae": 0.3, "val_r2": 0.9},
    ]
    return write_run(
        runs, name, cfg, figures, {"select_by": "val_rmse", "val_rmse": rmse, "val_mae": 0.3, "val_r2": 0.9}
    )


def classifier_run(runs: Path, name: str, acc: float) -> Path:
    figures = [{"val_accuracy": acc - 0.1}, {"val_accuracy": acc}]
    return write_run(runs, name, Config(), figures, {"select_by": "val_accuracy", "val_accuracy": acc})
