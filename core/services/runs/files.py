"""A run's folder as the faces read it: its files, its records as they grow, its notes, whether it is live.

What a run directory holds is :mod:`core.runfiles` (the contract: docs/reference/run-directory.md); the faces
read and change it through these names alone: the record kinds, :class:`RunDir`, the runs of a folder, the
log as it grows, the user's notes (``notes.json``: name, notes, tags) and the trash.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from core.runfiles import records as kinds
from core.runfiles.control_file import active_run_pid
from core.runfiles.layout import CHECKPOINTS, RunDir, list_runs
from core.runfiles.records import CONFIG, EVAL, LOG, RECOVERY, STATE, STEP, TRIAL
from core.runfiles.writing import ACTIVE_STATES, END_STATES, MetricsTail, atomic_write, atomic_write_json

__all__ = [
    "ACTIVE_STATES",
    "CHECKPOINTS",
    "CONFIG",
    "END_STATES",
    "EVAL",
    "LOG",
    "RECOVERY",
    "STATE",
    "STEP",
    "TRASH_DIR",
    "TRIAL",
    "MetricsTail",
    "RunDir",
    "atomic_write",
    "is_live",
    "kinds",
    "list_runs",
    "not_a_run",
    "parse_tags",
    "read_notes",
    "trash_run",
    "write_notes",
]

TRASH_DIR = ".trash"


def is_live(run_dir: Path | str) -> bool:
    """Another process runs it now (its lock is held)."""
    return active_run_pid(Path(run_dir)) is not None


def not_a_run(run_dir: Path | str) -> str | None:
    """Why ``run_dir`` cannot be opened as a run, in one line; None when it is one."""
    if not RunDir(run_dir).metrics.is_file():
        return f"{run_dir} has no metrics.jsonl: not a run folder"
    return None


def read_notes(run_dir: Path | str) -> dict[str, Any]:
    """The user's notes of a run (``notes.json``: ``name``, ``notes``, ``tags``); empty when it has none."""
    try:
        data = json.loads(RunDir(run_dir).notes.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_notes(run_dir: Path | str, **fields: Any) -> dict[str, Any]:
    """Update the run's notes.json (``notes``, ``tags``, ``name``); returns what it now holds."""
    data = read_notes(run_dir)
    data.update(fields)
    if "tags" in data:
        data["tags"] = sorted({str(t).strip() for t in data["tags"] if str(t).strip()})
    atomic_write_json(RunDir(run_dir).notes, data)
    return data


def parse_tags(text: str) -> list[str]:
    return sorted({t.strip() for t in re.split(r"[,;]", text) if t.strip()})


def trash_run(run_dir: Path | str) -> Path:
    """Move a run into the runs directory's trash folder (not deleted: the user can take it back)."""
    run_dir = Path(run_dir)
    trash = run_dir.parent / TRASH_DIR
    trash.mkdir(exist_ok=True)
    target = trash / run_dir.name
    n = 1
    while target.exists():
        target = trash / f"{run_dir.name}-{n}"
        n += 1
    shutil.move(str(run_dir), str(target))
    return target
