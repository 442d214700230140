"""What the faces make of a run's records: its statistics, its timeline, its count, its figure in words.

The reducers are the engine's (:mod:`core.session.reading`), pure and torch-free; a face folds records into them
as they arrive, live or from a past run's log.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.runfiles.shape import RunShape
from core.session.reading.stats import TRIALS_DONE, RunCount, RunStats, run_count
from core.session.reading.timeline import Timeline
from core.training.validation import result_line

__all__ = ["TRIALS_DONE", "RunCount", "RunShape", "RunStats", "Timeline", "checkpoint_facts", "count", "result_line"]


def count(stats: RunStats, shape: RunShape, start: Mapping[int, int] | None = None) -> RunCount:
    """How far a run of ``shape`` got by ``stats``: epochs, or a search's trials."""
    return run_count(stats, shape, start)


def checkpoint_facts(run_dir: Path | str, which: str) -> dict[str, Any] | None:
    """``epoch``, ``steps`` and, for best.pt, ``monitor`` and ``value`` of a run's checkpoint (None when missing)."""
    from core.training.checkpoint import checkpoint_facts as facts  # torch: only when a checkpoint is asked about

    return facts(Path(run_dir), which)
