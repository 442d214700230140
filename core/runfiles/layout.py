"""A run's directory: every path in it, whether a folder is a run, whether it can go on (reading a whole past
run, config included, is core.services.past_run's).

The layout (DESIGN's run directory)::

    RUN/config.toml          the config the run was started with
    RUN/metrics.jsonl        one record per line (core.session.machinery.recording writes it)
    RUN/summary.json         written once at the end (and rewritten by an evaluation)
    RUN/checkpoints/last.pt  the run's end: what resume, fork and export default to
    RUN/checkpoints/best.pt  the weights of its best evaluation (kept when select_by says so)
    RUN/exports/             what export writes by default
    RUN/control.json         pause / resume / stop requests to a live run
    RUN/notes.json           the window's name and note for the run
    RUN/eval.json            the last full evaluation (core.training.validation)
    RUN/exports/             exported models with their model.json (core.services.export)
    RUN/search.json          a search's plan; RUN/study.journal its Optuna study, RUN/study.lock guarding it
                             (core.strategies.search)
    RUN/torchrun.json        a torchrun run's rendezvous id and restarts (core.launchers.torchrun)
    RUN/tb/                  TensorBoard event files, one per opening of the run (core.runfiles.tensorboard_log)

A run imported from another tool's TensorBoard logs (core.runfiles.tensorboard_import) holds metrics.jsonl and
summary.json alone, its summary saying where it came from (``imported``).

This module is the only place these names are written (summary.json's name is core.runfiles.writing's, which
reads and writes that file); everything else asks a ``RunDir``.
It imports nothing heavy (no torch): the command line and the window's threads read runs with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.runfiles.writing import SUMMARY_FILE, read_metrics, read_summary

CHECKPOINTS = ("last", "best")  # the checkpoints a run may hold, by the name --checkpoint takes


@dataclass(frozen=True)
class RunDir:
    path: Path

    def __init__(self, path: Path | str | RunDir) -> None:
        object.__setattr__(self, "path", Path(path.path if isinstance(path, RunDir) else path))

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    # ---- the paths -------------------------------------------------------------------------------
    @property
    def config(self) -> Path:
        return self.path / "config.toml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY_FILE

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def last(self) -> Path:
        return self.checkpoint("last")

    @property
    def best(self) -> Path:
        return self.checkpoint("best")

    def checkpoint(self, which: str = "last") -> Path:
        """checkpoints/<which>.pt (``which`` is "last" or "best")."""
        if which not in CHECKPOINTS:
            raise ValueError(f"checkpoint: {which!r} is not one of {', '.join(CHECKPOINTS)}")
        return self.checkpoints / f"{which}.pt"

    @property
    def exports(self) -> Path:
        """The run's own folder of exported models (made with the run; what an export writes by default)."""
        return self.path / "exports"

    @property
    def control(self) -> Path:
        return self.path / "control.json"

    @property
    def notes(self) -> Path:
        return self.path / "notes.json"

    @property
    def evaluation(self) -> Path:
        return self.path / "eval.json"

    @property
    def search_plan(self) -> Path:
        return self.path / "search.json"

    @property
    def study_journal(self) -> Path:
        return self.path / "study.journal"

    @property
    def study_lock(self) -> Path:
        return self.path / "study.lock"

    @property
    def torchrun_file(self) -> Path:
        return self.path / "torchrun.json"

    @property
    def tensorboard(self) -> Path:
        """The run's TensorBoard event files (``tensorboard --logdir`` the runs folder shows every run's)."""
        return self.path / "tb"

    @property
    def mlflow(self) -> Path:
        """Where the run is mirrored to MLflow: per tracking URI, its run id and how far it was sent."""
        return self.path / "mlflow.json"

    @property
    def mlflow_lock(self) -> Path:
        """Held by the process that mirrors the run to MLflow (one at a time)."""
        return self.path / "mlflow.lock"

    # ---- what it is ------------------------------------------------------------------------------
    def is_run(self) -> bool:
        """A folder is a run once its config is written (the first thing a run writes), or once an import of
        another tool's logs wrote its summary (the last thing an import writes)."""
        return self.config.is_file() or self.imported() is not None

    def imported(self) -> dict[str, Any] | None:
        """Where an imported run came from (summary.json's ``imported``: ``from``, ``path``, ``tags``, ...); None
        for a run TrainDesk trained. An imported run is read-only: no config, no checkpoint."""
        if self.config.is_file():
            return None
        found = (self.read_summary() or {}).get("imported")
        return found if isinstance(found, dict) else None

    def has_weights(self) -> bool:
        """Whether the run saved its end (last.pt): what resume, continue, fork and export need."""
        return self.last.is_file()

    def default_checkpoint(self) -> str:
        """What a run's model means when nobody chose: its best evaluation once best.pt exists, else its end."""
        return "best" if self.best.is_file() else "last"

    @classmethod
    def of_checkpoint(cls, path: Path | str) -> RunDir | None:
        """The run a checkpoint file belongs to (RUN/checkpoints/X.pt), None for a loose file."""
        path = Path(path)
        run = cls(path.parent.parent)
        return run if path.parent.name == run.checkpoints.name and run.is_run() else None

    @staticmethod
    def weights_file(path: Path | str, which: str = "last") -> Path:
        """A checkpoint file as given, or a run directory's checkpoint ``which``."""
        path = Path(path)
        return RunDir(path).checkpoint(which) if path.is_dir() else path

    # ---- reading ---------------------------------------------------------------------------------
    def read_summary(self) -> dict[str, Any] | None:
        return read_summary(self.path)

    def read_records(self) -> list[dict[str, Any]]:
        return list(read_metrics(self.metrics)) if self.metrics.is_file() else []


def list_runs(runs_dir: Path | str) -> list[RunDir]:
    """The runs in a folder, newest first (by folder name: names start with their start time)."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    found = [RunDir(p) for p in runs_dir.iterdir() if p.is_dir()]
    return sorted((r for r in found if r.is_run()), key=lambda r: r.name, reverse=True)
