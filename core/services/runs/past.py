"""A past run as a face shows it: its records (a fork's preceded by its parent's), summary, config and shape.

The one reader of a finished or stopped run; safe on a background thread, missing parts empty or None.
It stands above ``core.runfiles.layout`` (which names the files and imports no config), so the strategies can
use ``RunDir`` while this module reads a run's config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.config import Config, ConfigError, load_config
from core.runfiles.shape import RunShape
from core.services.runs.files import CONFIG, EVAL, LOG, STEP, RunDir, is_live, list_runs, not_a_run, read_notes
from core.services.runs.shape import shape_of, shape_of_run

__all__ = [
    "CONFIG",
    "EVAL",
    "LOG",
    "STEP",
    "PastRun",
    "RunDir",
    "display_name",
    "is_live",
    "list_runs",
    "not_a_run",
    "read_config",
    "read_past_run",
    "shape_of",
]


@dataclass
class PastRun:
    run_dir: RunDir
    records: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    config: Config | None = None
    shape: RunShape | None = None  # None when its config cannot be read

    @property
    def name(self) -> str:
        return display_name(self.run_dir.path)


def display_name(run_dir: Any) -> str:
    """The name the user gave the run (Runs' Rename), else its folder's."""
    return str(read_notes(run_dir).get("name") or RunDir(run_dir).name)


def read_config(run_dir: RunDir | Any) -> Config | None:
    """A run's config.toml, None when it is missing or unreadable."""
    try:
        return load_config(RunDir(run_dir).config)
    except (ConfigError, OSError):
        return None


def read_past_run(run_dir: RunDir | Any, with_parent: bool = True) -> PastRun:
    """Records (a fork's preceded by its parent's up to the branch, unless ``with_parent`` is false: the
    run's own alone), summary and config."""
    run = RunDir(run_dir)
    records = run.read_records()
    summary = run.read_summary()
    cfg = read_config(run)
    parent = (summary or {}).get("parent")
    if with_parent and isinstance(parent, dict) and parent.get("run"):
        records = _parent_records(RunDir(parent["run"]), records) + records
    return PastRun(run, records, summary, cfg, shape_of_run(summary, cfg))


def _parent_records(parent: RunDir, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parent's step and eval records up to where the fork branched (each worker's first step)."""
    if not parent.metrics.is_file():
        return []
    first_step: dict[int, float] = {}
    first_epoch = min((r.get("epoch", 1) for r in records if r.get("kind") == EVAL), default=10**9)
    for r in records:
        if r.get("kind") == STEP:
            first_step.setdefault(int(r.get("worker") or 0), float(r.get("step", 0)))
    t_end = min((r["t"] for r in records if isinstance(r.get("t"), (int, float))), default=float("inf"))
    out = []
    for r in parent.read_records():
        kind = r.get("kind")
        if not isinstance(r.get("t"), (int, float)) or r["t"] > t_end:
            continue
        if kind == STEP and float(r.get("step", 0)) < first_step.get(int(r.get("worker") or 0), float("inf")):
            out.append(r)
        elif kind == EVAL and r.get("epoch", 0) < first_epoch:
            out.append(r)
        elif kind == CONFIG:
            out.append(r)
    return out
