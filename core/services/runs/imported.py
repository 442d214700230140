"""Runs imported from other tools' TensorBoard logs (a Lightning ``lightning_logs/version_N``): read-only runs
that Runs lists and Compare overlays on TrainDesk's, with no config and no checkpoint to continue, fork,
export or evaluate.

``traindesk runs --import-tensorboard DIR`` and the Runs tab's Import call :func:`import_tensorboard`; the
reading and the records are :mod:`core.runfiles.tensorboard_import`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.runfiles.layout import RunDir
from core.runfiles.tensorboard_import import EVENT_FILES, IMPORTED, ImportedRun, import_tensorboard

__all__ = ["EVENT_FILES", "IMPORTED", "ImportedRun", "import_tensorboard", "imported_from", "read_only_reason"]


def imported_from(run_dir: Path | str) -> dict[str, Any] | None:
    """Where an imported run came from (summary.json's ``imported``: ``from``, ``path``, ``tags``, ``not_drawn``,
    ``hparams``); None for a run TrainDesk trained."""
    return RunDir(run_dir).imported()


def read_only_reason(run_dir: Path | str | None) -> str:
    """Why a run cannot be continued, forked or exported because it was imported ("" when it was not)."""
    if run_dir is None:
        return ""
    source = imported_from(run_dir)
    if source is None:
        return ""
    return (
        f"{Path(run_dir).name} was imported from the TensorBoard logs in {source.get('path')}: "
        "it has no checkpoint to continue, fork, export or evaluate"
    )
