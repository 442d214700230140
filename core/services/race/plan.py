"""A race's plan: the variants of a run's settings (``--vary KEY=V1,V2,...``, their product), the rungs at which
the worse half stops, how many are kept at the end; every bad input a one-line ConfigError, before anything runs.

A value may be a multiple of the run's own (``optim.lr=0.3x,1x,3x``) or a value as ``--set`` takes it. Only the
keys a fork may change can vary (``optim.*``, ``train.*``), less those the race sets itself (``train.epochs``,
``train.schedule_epochs``, ``train.early_stop_patience``). A variant equal to the run's settings is the race's
control ("as is"); a ``--vary`` that varies nothing, a value given twice, or a value out of its bounds is refused.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.config import FIELDS, FORKABLE_SECTIONS, Config, ConfigError
from core.config.strategy_rules import STRATEGY_RULES
from core.config.toml_text import parse_override_value
from core.metric_names import MAXIMIZED
from core.runfiles.layout import RunDir

RACE_SETS = ("train.epochs", "train.schedule_epochs", "train.early_stop_patience")  # the race's own, per rung
SHORT = {"batch_size": "batch", "weight_decay": "wd", "momentum": "mom"}
RACEABLE = ("single", "hogwild", "ddp", "sweep")  # a search's trials differ in more than a fork may change


@dataclass(frozen=True)
class Variant:
    index: int
    changes: dict[str, Any]  # the settings it changes (empty: the run as it is)
    label: str  # "lr 0.15 × batch 256", "as is"


@dataclass
class RacePlan:
    run: Path  # the run raced (its directory)
    config: Config  # its config at the checkpoint the race starts from
    start_epoch: int  # epochs done at that checkpoint
    start_step: int  # the checkpoint's steps, every worker's together (its summary's count)
    variants: list[Variant]
    rungs: list[int]  # epochs after the start at which the variants are ranked
    keep: int = 1
    metric: str = "val_accuracy"  # what ranks them (the run's train.select_by, resolved)
    workers: int = 1  # processes per variant (the run's)
    from_worker: int | None = None  # a sweep: the worker whose model, optimizer and rate the variants clone
    notes: list[str] = field(default_factory=list)
    branch_step: int = 0  # where the race branches, as the plots' step axis counts: one worker's steps

    @property
    def maximize(self) -> bool:
        return self.metric in MAXIMIZED

    @property
    def horizon(self) -> int:
        """The epochs every variant's lr schedule spans: the run's own, or the race's end if later."""
        own = self.config.train.schedule_epochs or self.config.train.epochs
        return max(own, self.start_epoch + self.rungs[-1])

    def survivors(self, alive: int, rung: int) -> int:
        """How many of ``alive`` variants go on after rung number ``rung`` (0-based): half, ``keep`` at the last."""
        if rung == len(self.rungs) - 1:
            return min(alive, self.keep)
        return max(self.keep, math.ceil(alive / 2))


def parse_vary(spec: str, cfg: Config) -> tuple[str, list[Any]]:
    """``KEY=V1,V2,...`` to (key, values), each checked against the key's bounds."""
    key, sep, text = spec.partition("=")
    key = key.strip()
    if not sep or not text.strip():
        raise ConfigError(f"race: --vary {spec!r} must be KEY=V1,V2,... (e.g. --vary optim.lr=0.3x,1x,3x)")
    if key not in FIELDS:
        raise ConfigError(f"race: --vary {key}: no such config key")
    if key.split(".")[0] not in FORKABLE_SECTIONS or key in RACE_SETS:
        can = ", ".join(f"{s}.*" for s in FORKABLE_SECTIONS)
        raise ConfigError(
            f"race: --vary {key} cannot change in a race (these can: {can}, but not {', '.join(RACE_SETS)})"
        )
    own = cfg.value(key)
    values = []
    for item in _items(text):
        value = _value(key, item, own)
        try:
            values.append(cfg.with_changes({key: value}).value(key))
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("config: ", f"race: --vary {key}: ", 1)) from None
    seen: set[str] = set()
    for value in values:
        if repr(value) in seen:
            raise ConfigError(f"race: --vary {key} gives {_show(value)} twice")
        seen.add(repr(value))
    if all(v == own for v in values):
        raise ConfigError(f"race: --vary {key} varies nothing: every value is the run's own ({_show(own)})")
    return key, values


def _items(text: str) -> list[str]:
    """Comma-separated values; a list value keeps its commas inside brackets (model.hidden is no race key, but
    train.* may one day take lists)."""
    out, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    out.append(current.strip())
    return [v for v in out if v]


def _value(key: str, item: str, own: Any) -> Any:
    if item.endswith("x") and FIELDS[key].type in ("float", "int"):
        try:
            factor = float(item[:-1])
        except ValueError:
            factor = None
        if factor is not None:
            scaled = own * factor
            return max(1, round(scaled)) if FIELDS[key].type == "int" else float(f"{scaled:.6g}")
    return parse_override_value(item)


def _show(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def label_of(changes: dict[str, Any]) -> str:
    if not changes:
        return "as is"
    return " × ".join(f"{SHORT.get(k.split('.')[-1], k.split('.')[-1])} {_show(v)}" for k, v in changes.items())


def default_rungs(variants: int, keep: int) -> list[int]:
    """1, 2, 4, ... epochs: as many halvings as bring ``variants`` down to ``keep``."""
    rounds = max(1, math.ceil(math.log2(max(variants, 1) / max(keep, 1))))
    return [2**i for i in range(rounds)]


def plan_race(run: Path | str, vary: list[str], rungs: list[int] | None = None, keep: int = 1) -> RacePlan:
    """The race of ``run`` (a run directory) from its last consistent checkpoint; ConfigError (one line) on bad input."""
    from core.metric_names import run_metric
    from core.runfiles.control_file import active_run_pid
    from core.training.checkpoint import check_checkpoint, load_checkpoint  # torch: not at the window's start

    run_dir = RunDir(run)
    if not run_dir.metrics.is_file():
        raise ConfigError(f"race: {run} is not a run folder (no metrics.jsonl)")
    pid = active_run_pid(run_dir.path)
    if pid is not None:
        raise ConfigError(f"race: {run_dir.name} is running (pid {pid}); stop it first, then race from its checkpoint")
    if not run_dir.last.is_file():
        raise ConfigError(f"race: {run_dir.name} has no checkpoint to race from ({run_dir.last})")
    ckpt = load_checkpoint(run_dir.last)
    cfg = check_checkpoint(ckpt, f"checkpoint: {run_dir.last}")[0]
    if cfg.parallel.strategy not in RACEABLE:
        raise ConfigError(
            f'race: {run_dir.name} is a "{cfg.parallel.strategy}" run, whose trials differ in more than a fork may '
            f"change; a race starts from a run of one of: {', '.join(RACEABLE)}"
        )
    from_worker = None
    notes = []
    if STRATEGY_RULES[cfg.parallel.strategy].model_per_worker:  # a sweep: its best worker's model races
        from_worker = int(ckpt.get("best_worker", 0))
        cfg = sweep_worker_config(cfg, ckpt, from_worker)
        notes.append(
            f"a sweep races from its best worker ({from_worker}, lr {_show(cfg.optim.lr)}) as single runs; "
            "its winner goes on as a fork"
        )
    variants, chosen = plan_variants(cfg, vary, rungs, keep)
    start_epoch = min(int(p["epoch"]) for p in ckpt["progress"]) - 1
    return RacePlan(
        run=run_dir.path,
        config=cfg,
        start_epoch=start_epoch,
        start_step=int(ckpt.get("steps", 0)),
        variants=variants,
        rungs=chosen,
        keep=keep,
        metric=run_metric(run_dir.read_summary(), cfg),
        workers=cfg.parallel.workers,
        from_worker=from_worker,
        notes=notes,
        branch_step=branch_step(ckpt, from_worker),
    )


def branch_step(ckpt: dict[str, Any], from_worker: int | None) -> int:
    """The steps of the worker the race branches from (a sweep's cloned one, else the first), as the plots'
    step axis and the race's marker count them (the checkpoint's ``steps`` sums every worker's)."""
    progress = ckpt.get("progress") or []
    worker = from_worker or 0
    if worker < len(progress) and isinstance(progress[worker], dict) and "step" in progress[worker]:
        return int(progress[worker]["step"])
    return int(ckpt.get("steps", 0)) // max(1, len(progress))


def plan_variants(
    cfg: Config, vary: list[str], rungs: list[int] | None = None, keep: int = 1
) -> tuple[list[Variant], list[int]]:
    """The variants of ``cfg`` that ``vary`` asks for and the rungs: every check of a race's input that needs the
    run's settings alone (a live run's, before its stop writes the checkpoint); ConfigError (one line)."""
    if not vary:
        raise ConfigError("race: give at least one --vary KEY=V1,V2,...")
    axes = [parse_vary(spec, cfg) for spec in vary]
    keys = [k for k, _ in axes]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"race: --vary {next(k for k in keys if keys.count(k) > 1)} is given twice")
    variants = []
    for i, values in enumerate(itertools.product(*(v for _, v in axes))):
        changes = {k: v for k, v in zip(keys, values) if v != cfg.value(k)}
        variants.append(Variant(i, changes, label_of(changes)))
    if len(variants) < 2:
        raise ConfigError("race: a race needs two variants or more")
    if not 1 <= keep < len(variants):
        raise ConfigError(f"race: --keep must be from 1 to {len(variants) - 1} ({len(variants)} variants), got {keep}")
    chosen = sorted(rungs) if rungs else default_rungs(len(variants), keep)
    if any(r < 1 for r in chosen) or len(set(chosen)) != len(chosen):
        raise ConfigError(
            f"race: --rungs must be distinct epoch counts of 1 or more, got {','.join(map(str, rungs or []))}"
        )
    return variants, chosen


def sweep_worker_config(cfg: Config, ckpt: dict[str, Any], worker: int) -> Config:
    """A sweep's config as a single run of ``worker``'s model: its own rate, one process."""
    rates = ckpt.get("worker_lrs") or list(cfg.parallel.sweep_lr) or [cfg.optim.lr] * cfg.parallel.workers
    return cfg.with_changes(
        {
            "parallel.strategy": "single",
            "parallel.workers": 1,
            "parallel.sweep_lr": [],
            "optim.lr": float(rates[worker]),
        }
    )


def worker_checkpoint(ckpt: dict[str, Any], cfg: Config, worker: int) -> dict[str, Any]:
    """A sweep's checkpoint as a single run's of one of its workers (``cfg``: that run's config)."""
    from core.config import to_dict

    one = {k: v for k, v in ckpt.items() if k not in ("format", "version", "best_worker", "worker_lrs")}
    for key in ("models", "optimizers", "rng", "precisions", "progress"):
        if isinstance(ckpt.get(key), list):
            one[key] = [ckpt[key][worker]]
    one["model"] = ckpt["models"][worker]
    one["config"] = to_dict(cfg)
    return one
