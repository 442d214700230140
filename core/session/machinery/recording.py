"""Run recording: the run directory, metrics.jsonl, checkpoints and summary.json (paths from core.runfiles.layout)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from core.config import Config, to_dict, to_toml
from core.errors import RunError
from core.runfiles.layout import RunDir
from core.runfiles.writing import MetricsLog, RunsLock, atomic_write_text, check_free_space, make_run_dir, write_summary
from core.training.checkpoint import load_checkpoint, save_checkpoint, state_from_bytes
from core.worker.position import Position

POSITION_KEYS = Position.COUNTERS


class RunRecorder:
    """Owns one run directory while the run is active (and the runs directory's lock)."""

    def __init__(self) -> None:
        self.run_dir: Path | None = None
        self._log: MetricsLog | None = None
        self._pending: list[dict[str, Any]] = []  # records announced before the directory exists
        self._lock: RunsLock | None = None

    def open(
        self, runs_dir: Path, name: str, config: Config, parameters: int, workers: int, existing: Path | None = None
    ) -> Path:
        """Take the runs directory's lock, make (or reuse) the run directory, write config.toml."""
        self._lock = RunsLock.acquire(runs_dir, name)
        try:
            check_free_space(runs_dir, parameters, workers)
            run_dir = existing if existing is not None else make_run_dir(runs_dir, name)
            self._lock.name_run(run_dir.name)
            atomic_write_text(RunDir(run_dir).config, to_toml(config))
            self._log = MetricsLog(RunDir(run_dir).metrics)
        except BaseException:
            self._lock.release()
            self._lock = None
            raise
        self.run_dir = run_dir
        self._log.write(self._pending)
        self._pending = []
        return run_dir

    def write(self, records: list[dict[str, Any]]) -> None:
        if self._log is not None:
            self._log.write(records)
        elif self.run_dir is None:
            self._pending.extend(records)

    def checkpoint(self, payload: dict[str, Any]) -> None:
        assert self.run_dir is not None
        save_checkpoint(RunDir(self.run_dir).last, payload)

    def best(self, payload: dict[str, Any]) -> None:
        """checkpoints/best.pt: the weights of the run's best evaluation so far."""
        assert self.run_dir is not None
        save_checkpoint(RunDir(self.run_dir).best, payload)

    def best_so_far(self) -> dict[str, Any] | None:
        """What a continued run has to beat: monitor, value, worker, epoch of its best.pt (None without one)."""
        assert self.run_dir is not None
        path = RunDir(self.run_dir).best
        if not path.is_file():
            return None
        try:
            data = load_checkpoint(path)
        except RunError:
            return None
        keys = ("monitor", "value", "best_worker", "epoch")
        if not all(k in data for k in keys):
            return None
        return {
            "monitor": data["monitor"],
            "value": float(data["value"]),
            "worker": int(data["best_worker"]),
            "epoch": int(data["epoch"]),
        }

    def summary(self, summary: dict[str, Any]) -> None:
        if self.run_dir is not None:
            write_summary(self.run_dir, summary)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def weights_finite(states: list[dict[str, torch.Tensor]]) -> bool:
    return all(torch.isfinite(v).all() for s in states for v in s.values() if v.is_floating_point())


def checkpoint_payload(
    config: Config,
    info: dict[str, Any],
    states: list[dict[str, torch.Tensor]],
    result: int,
    parts: list[dict[str, Any]],
    worker_lrs: list[float],
) -> dict[str, Any]:
    """A checkpoint of one consistent point of the run.

    ``states`` are the models' weights (one, or one per worker), ``result`` the
    index of the model that is the run's result, ``parts`` per worker: its
    position and its optimizer, RNG and precision states (bytes, or None before
    its first step) taken at the same point as the weights.
    """
    progress = [
        {
            **{k: int(p[k]) for k in (*POSITION_KEYS, "offset") if k in p},
            **{k: float(p[k]) for k in ("lr_scale", "lr_factor") if k in p},
        }
        for p in parts
    ]
    return {
        "config": to_dict(config),
        "info": info,
        "model": states[result if len(states) > 1 else 0],
        "models": states if len(states) > 1 else None,
        "optimizers": [state_from_bytes(p["optimizer"]) if p.get("optimizer") else None for p in parts],
        "rng": [state_from_bytes(p["rng"]) if p.get("rng") else None for p in parts],
        "precisions": [state_from_bytes(p["precision"]) if p.get("precision") else None for p in parts],
        "progress": progress,
        "epoch": min(p["epoch"] for p in progress) - 1,  # epochs completed by every worker
        "steps": sum(p["step"] for p in progress),
        "best_worker": result,
        "worker_lrs": worker_lrs,
    }
