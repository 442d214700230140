"""Where a run starts: the beginning, a stopped run's last checkpoint (resume), or another run's (fork).

:func:`resume_point` and :func:`fork_point` read and check the checkpoint once
and return a :class:`StartPoint`; the session asks it for each worker's
:class:`~core.worker.position.Position` and optimizer, RNG and precision states, and for the
models' weights. A fresh run's start point is ``StartPoint()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.config import FORKABLE_SECTIONS, Config, ConfigError
from core.errors import RunError
from core.runfiles.layout import RunDir
from core.runfiles.writing import fork_name
from core.strategies import get_strategy
from core.training.checkpoint import check_checkpoint, load_checkpoint, state_to_bytes
from core.worker.position import START, Position


def config_value(config: Config, key: str) -> Any:
    """The value of a dotted key ("optim.lr")."""
    section, _, name = key.partition(".")
    return getattr(getattr(config, section), name)


@dataclass(frozen=True)
class StartPoint:
    """The checkpoint a run continues (none: it starts at the beginning)."""

    checkpoint: dict[str, Any] | None = None
    where: str = "checkpoint"  # how messages name the checkpoint
    continues: RunDir | None = None  # resume: the run directory the run goes on in
    parent: dict[str, Any] | None = None  # fork: the run and step it branched from

    @property
    def resuming(self) -> bool:
        return self.checkpoint is not None

    def position(self, rank: int) -> Position:
        """Where worker ``rank`` starts."""
        if self.checkpoint is None:
            return START
        return Position.of(self.checkpoint["progress"][rank])

    def states(self, rank: int, workers: int) -> tuple[bytes | None, bytes | None]:
        """Worker ``rank``'s optimizer and RNG states (serialised), None for fresh ones."""
        if self.checkpoint is None:
            return None, None
        opt = (self.checkpoint.get("optimizers") or [None] * workers)[rank]
        rng = (self.checkpoint.get("rng") or [None] * workers)[rank]
        return (state_to_bytes(opt) if opt is not None else None, state_to_bytes(rng) if rng is not None else None)

    def precision_state(self, rank: int) -> bytes | None:
        """Worker ``rank``'s precision state (a gradient scaler's scale; serialised), None for a fresh one (a
        fresh run, or a checkpoint written before checkpoints held it)."""
        states = (self.checkpoint or {}).get("precisions") or []
        state = states[rank] if rank < len(states) else None
        return state_to_bytes(state) if state is not None else None

    def worker_fields(self, rank: int, workers: int) -> dict[str, Any]:
        """A worker's WorkerSpec fields for where it starts (position, optimizer, RNG and precision states)."""
        optimizer, rng = self.states(rank, workers)
        return {
            "start": self.position(rank),
            "optimizer_state": optimizer,
            "rng_state": rng,
            "precision_state": self.precision_state(rank),
        }

    def model_states(self, n_models: int) -> list[Any]:
        """The weights each model starts from (None: freshly initialised)."""
        if self.checkpoint is None:
            return [None] * n_models
        states = self.checkpoint.get("models") or [self.checkpoint["model"]] * n_models
        if not isinstance(states, list) or len(states) != n_models:
            raise RunError(f"{self.where}: holds {len(states)} model(s), the run has {n_models}")
        return states

    def describe(self) -> str:
        """What the start-up log line adds: where the run resumes, what it was forked from."""
        detail = ""
        if self.checkpoint is not None:
            p0 = self.position(0)
            detail += f"; resuming at epoch {p0.epoch}, batch {p0.batch}"
        if self.parent is not None:
            detail += f"; forked from {self.parent['name']} at step {self.parent['step']}"
        return detail


def _check_progress(ckpt: dict[str, Any], cfg: Config, path: Path, where: str) -> None:
    progress = ckpt.get("progress") or []
    workers = get_strategy(cfg).num_workers
    if not isinstance(progress, list) or not all(Position.holds(p) for p in progress):
        raise RunError(f"{where}: its progress table is unusable")
    if len(progress) != workers:
        raise RunError(f"checkpoint: {path}: holds no resumable progress for {workers} worker(s)")
    if min(p["epoch"] for p in progress) > cfg.train.epochs:
        raise RunError(
            f"resume: {path} already finished all {cfg.train.epochs} epochs; pass --epochs N to train further"
        )


def _located(ckpt: dict[str, Any], path: Path, run: RunDir | None) -> dict[str, Any]:
    """The checkpoint with its run's tuned text encoder (named relative to the run) named by its folder."""
    from core.schema.sentences import located

    info = ckpt.get("info")
    if not isinstance(info, dict) or not info.get("schema"):
        return ckpt
    return {**ckpt, "info": {**info, "schema": located(info["schema"], run.path if run else path.parent)}}


def _run_of(path: Path) -> RunDir | None:
    """The run directory a path names or a checkpoint belongs to (None for a loose checkpoint file)."""
    return RunDir(path) if path.is_dir() else RunDir.of_checkpoint(path)


def resume_point(
    path: str | Path, epochs: int | None = None, runs_dir: str | Path | None = None
) -> tuple[Config, StartPoint, Path, str]:
    """(config, start point, runs directory, run name) to continue a stopped or failed run.

    ``path`` is a run directory (the run continues there) or a checkpoint file
    (a new run directory is made under ``runs_dir``).
    """
    path = Path(path)
    where = f"checkpoint: {path}"
    ckpt = load_checkpoint(path)
    cfg = check_checkpoint(ckpt, where)[0]
    if epochs is not None:
        cfg = cfg.replace("train", epochs=epochs)
    _check_progress(ckpt, cfg, path, where)
    run = _run_of(path)
    ckpt = _located(ckpt, path, run)
    base = run.path.parent if run is not None else Path(runs_dir or "runs")
    return cfg, StartPoint(ckpt, where, continues=run), base, (run.name if run else "resumed")


def fork_point(
    path: str | Path, changes: dict[str, Any] | None = None, runs_dir: str | Path | None = None, name: str | None = None
) -> tuple[Config, StartPoint, Path, str]:
    """(config, start point, runs directory, run name) of a new run from a run's last checkpoint (or a
    checkpoint file) with edited settings; the start point records the parent run and the step it branched at."""
    path = Path(path)
    where = f"checkpoint: {path}"
    ckpt = load_checkpoint(path)
    parent_cfg = check_checkpoint(ckpt, where)[0]
    changes = dict(changes or {})
    refused = sorted(k for k in changes if k.split(".")[0] not in FORKABLE_SECTIONS)
    if refused:
        raise ConfigError(
            f"config: {refused[0]} cannot change in a fork (the model and workers stay); "
            f"these can: {', '.join(s + '.*' for s in FORKABLE_SECTIONS)}"
        )
    cfg = parent_cfg.with_changes(changes)
    if cfg.optim.name != parent_cfg.optim.name:  # another optimizer starts with fresh states
        ckpt = {**ckpt, "optimizers": None}
    _check_progress(ckpt, cfg, path, where)
    run = _run_of(path)
    ckpt = _located(ckpt, path, run)
    base = Path(runs_dir) if runs_dir is not None else (run.path.parent if run is not None else Path("runs"))
    origin = run.path if run is not None else path
    parent = {
        "run": str(origin),
        "name": origin.name,
        "epoch": int(ckpt["epoch"]),
        "step": int(ckpt["steps"]),
        "changes": {k: config_value(cfg, k) for k in changes},
    }
    return cfg, StartPoint(ckpt, where, parent=parent), base, name or fork_name(run.name if run else "run")
