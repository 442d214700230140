"""The runs Compare overlays, read off the GUI thread (no Qt): each run's curves against step, epoch and wall
time, its figure, and the config keys that differ between runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.viewmodels.series import ema, without_spikes
from core.metric_names import higher_is_better, run_figures, run_metric


@dataclass
class CompareRun:
    path: Path
    name: str
    config: dict[str, Any]
    summary: dict[str, Any]
    # curve name -> {"step", "epoch", "time", "y"} arrays
    curves: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    metric: str = "val_accuracy"  # the run's figure: the metric that chose the model it hands on
    imported: bool = False  # read from another tool's TensorBoard logs: no config

    def figures(self) -> tuple[float, float]:
        """(the model it hands on's figure, the last evaluation's), NaN where unknown: summary.json's, else
        the curve's."""
        kept, last = run_figures(self.summary, self.metric)
        best = self.best(self.metric, higher_is_better(self.metric))
        c = self.curves.get(self.metric)
        if kept is None and best is not None:
            kept = best[0]
        if last is None and c is not None and len(c["y"]):
            last = float(c["y"][-1])
        return (math.nan if kept is None else kept, math.nan if last is None else last)

    def best(self, metric: str, higher: bool) -> tuple[float, int] | None:
        """(best value, index in the curve) or None."""
        c = self.curves.get(metric)
        if c is None or not len(c["y"]) or not np.isfinite(c["y"]).any():
            return None
        i = int(np.nanargmax(c["y"]) if higher else np.nanargmin(c["y"]))
        return float(c["y"][i]), i


def flatten(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def differing_keys(configs: list[dict[str, Any]]) -> list[str]:
    """Config keys ("optim.lr") whose values are not the same in every config."""
    flat = [flatten(c) for c in configs]
    keys = sorted(set().union(*flat)) if flat else []
    return [k for k in keys if len({repr(f.get(k)) for f in flat}) > 1]


def load_run(path: Path) -> CompareRun:
    """One run's comparable curves (background thread): its own records, without a fork's parent's. An imported
    run (another tool's TensorBoard logs) has no config: its one worker stands for it."""
    from app.viewmodels.run_index import read_notes
    from core.config import load_config, to_dict
    from core.services.runs.past import read_past_run
    from core.services.runs.shape import result_worker

    path = Path(path)
    past = read_past_run(path, with_parent=False)
    imported = past.config is None and past.run_dir.imported() is not None
    cfg = None if imported else past.config or load_config(past.run_dir.config)  # unreadable: raise why
    summary = past.summary or {}
    run = CompareRun(path, str(read_notes(path).get("name") or path.name), to_dict(cfg) if cfg else {}, summary)
    run.imported = imported
    run.metric = run_metric(run.summary, cfg)
    task = str(run.summary.get("task") or "classification")
    run.curves = run_curves(
        past.records,
        run.summary,
        separate=past.shape is not None and past.shape.separate,
        result_worker=result_worker(cfg, past.records, task=task) if cfg is not None else 0,
        figure=run.metric,
    )
    return run


def run_curves(
    records: list[dict[str, Any]],
    summary: dict[str, Any],
    separate: bool,
    result_worker: int = 0,
    smoothing: float = 0.6,
    figure: str = "val_accuracy",
) -> dict[str, dict[str, np.ndarray]]:
    """The curves that stand for a run, every point placed by the run's Timeline.

    The result's worker stands for the run: the summary's best_worker, else the one its strategy picks from
    the records (``result_worker``: a sweep's best model, the evaluating worker of a shared one), and of a
    search its best trial. Its training loss is the mean over the workers at each step when they
    share one model, else its own. Each curve's x values never go backwards on any axis. Its evaluations give
    val_accuracy, val_loss and ``figure`` (the run's own metric).
    """
    from core.services.runs.files import EVAL, STEP
    from core.services.runs.reading import Timeline

    placed = Timeline.of(records).place(records)
    evals = [(r, p) for r, p in placed if r.get("kind") == EVAL]
    workers = sorted({p.worker for _r, p in evals})
    w = summary.get("best_worker")
    if not isinstance(w, int) or w not in workers:
        w = result_worker if result_worker in workers else (workers[0] if workers else 0)
    trials = {p.trial for _r, p in evals if p.worker == w}
    trial = max(trials, key=lambda k: _best_acc(evals, w, k)) if len(trials) > 1 else next(iter(trials), None)
    steps = [
        (r, p)
        for r, p in placed
        if r.get("kind") == STEP
        and p.trial == trial
        and (p.worker == w or not separate)
        and isinstance(r.get("loss"), (int, float))
    ]
    by_step: dict[float, list[tuple[float, float, float]]] = {}
    for r, p in steps:  # workers of one model: the mean of their losses at each step
        by_step.setdefault(p.step, []).append((p.epoch, p.time, float(r["loss"])))
    order = sorted(by_step)
    rows = np.array(
        [
            [
                s,
                max(e for e, _t, _l in by_step[s]),
                max(t for _e, t, _l in by_step[s]),
                float(np.mean([loss for _e, _t, loss in by_step[s]])),
            ]
            for s in order
        ]
    ).reshape(-1, 4)
    curves = {"train_loss": _monotone(rows[:, 0], rows[:, 1], rows[:, 2], ema(without_spikes(rows[:, 3]), smoothing))}
    mine = [(r, p) for r, p in evals if p.worker == w and p.trial == trial]
    for metric in dict.fromkeys(("val_accuracy", "val_loss", figure)):
        pts = [(p.step, p.epoch, p.time, _value(r.get(metric))) for r, p in mine]
        arr = np.array(pts, dtype=np.float64).reshape(-1, 4)
        curves[metric] = _monotone(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3])
    return curves


def _best_acc(evals: list[tuple[dict[str, Any], Any]], worker: int, trial: Any) -> float:
    values = [_value(r.get("val_accuracy")) for r, p in evals if p.worker == worker and p.trial == trial]
    finite = [v for v in values if math.isfinite(v)]
    return max(finite) if finite else -math.inf


def _value(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _monotone(step: np.ndarray, epoch: np.ndarray, time: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """A curve's columns in step order, each x kept from going back (workers' clocks differ slightly)."""
    if not len(step):
        return {"step": step.copy(), "epoch": epoch.copy(), "time": time.copy(), "y": y.copy()}
    order = np.argsort(step, kind="stable")
    return {
        "step": np.maximum.accumulate(step[order]),
        "epoch": np.maximum.accumulate(epoch[order]),
        "time": np.maximum.accumulate(time[order]),
        "y": y[order].copy(),
    }


def load_runs(paths: list[Path]) -> list[CompareRun]:
    return [load_run(p) for p in paths]
