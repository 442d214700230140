"""Run recording: the run directory, metrics.jsonl, its TensorBoard files, checkpoints and summary.json (paths from
core.runfiles.layout).

A run with an MLflow tracking URI (``tracking.mlflow`` or ``MLFLOW_TRACKING_URI``) is also mirrored there as it
trains (:class:`~core.tracking.live_mirror.LiveMirror`, a thread reading metrics.jsonl); its warnings come back
as the recorder's own records, like the TensorBoard files'.

The records written to metrics.jsonl also go to the run's TensorBoard files (``tb/``,
:class:`~core.runfiles.tensorboard_log.TensorBoardLog`), written in batches, on disk at each checkpoint and
completed at the end. Those files are a mirror: the first error writing them stops them, and the run goes on
with one warning in its log (a record of the recorder's own, passed on with the records that met the error).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from core.config import Config, to_dict, to_toml
from core.errors import RunError
from core.runfiles.layout import RunDir
from core.runfiles.records import Record, log_record
from core.runfiles.tensorboard_log import TensorBoardLog
from core.runfiles.writing import MetricsLog, RunsLock, atomic_write_text, check_free_space, make_run_dir, write_summary
from core.tracking.live_mirror import LiveMirror, mlflow_uri
from core.training.checkpoint import load_checkpoint, save_checkpoint, state_from_bytes
from core.worker.position import Position

if TYPE_CHECKING:
    from core.session.start_point import StartPoint

POSITION_KEYS = Position.COUNTERS
TENSORBOARD = True  # every run writes RUN/tb/ (bench/tracking_cost.py turns it off to measure what it costs)


class RunRecorder:
    """Owns one run directory while the run is active (and the runs directory's lock)."""

    def __init__(self) -> None:
        self.run_dir: Path | None = None
        self._log: MetricsLog | None = None
        self._pending: list[dict[str, Any]] = []  # records announced before the directory exists
        self._lock: RunsLock | None = None
        self._tb: TensorBoardLog | None = None
        self._notes: list[Record] = []  # the recorder's own records (a warning) for the next write to pass on
        self._notes_lock = threading.Lock()  # the collector (checkpoints, the end) and the emitting threads
        self._mirror: LiveMirror | None = None

    def open(self, runs_dir: Path, name: str, config: Config, parameters: int, workers: int, start: StartPoint) -> Path:
        """Take the runs directory's lock, make (or reuse: a continued run) the run directory, write config.toml,
        open the TensorBoard files."""
        existing = start.continues.path if start.continues is not None else None
        uri = mlflow_uri(config)  # a URI that is not one, or no MLflow: one line before anything is made
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
        self._open_tensorboard(start, workers)
        pending, self._pending = self._pending, []
        self._log.write(pending)
        self._tensorboard(lambda tb: tb.add(pending))  # a warning of its own waits for the next write
        if uri:
            self._mirror = LiveMirror(run_dir, uri, self._note, start.parent, continued=existing is not None)
            self._mirror.start()
        return run_dir

    def _note(self, level: str, message: str) -> None:
        """A record of the recorder's own (the mirror's warnings), passed on with the next write."""
        with self._notes_lock:
            self._notes.append(log_record(None, level, message))

    def _open_tensorboard(self, start: StartPoint, workers: int) -> None:
        assert self.run_dir is not None
        if not TENSORBOARD:
            return
        folder = RunDir(self.run_dir).tensorboard
        try:
            self._tb = TensorBoardLog(folder, [start.position(r).step for r in range(workers)])
        except Exception as exc:
            self._tensorboard_failed(folder, exc)
            return
        where = _start_marker(start)
        if where:
            self._tensorboard(lambda tb: tb.marker(where))

    def write(self, records: list[dict[str, Any]]) -> list[Record]:
        """Append ``records`` to metrics.jsonl and the TensorBoard files; the recorder's own records to pass on
        with them (a warning that the TensorBoard files stopped), already written."""
        if self._log is None:
            if self.run_dir is None:
                self._pending.extend(records)
            return []
        self._log.write(records)
        self._tensorboard(lambda tb: tb.add(records))
        with self._notes_lock:
            notes, self._notes = self._notes, []
        self._log.write(notes)
        return notes

    def _tensorboard(self, action: Callable[[TensorBoardLog], None]) -> None:
        """Do ``action`` on the TensorBoard files, unless they have stopped; its error stops them."""
        tb = self._tb
        if tb is None:
            return
        try:
            action(tb)
        except Exception as exc:
            with self._notes_lock:
                if self._tb is not tb:  # another thread met an error first: one warning
                    return
                self._tb = None
            try:
                tb.close()
            except Exception:
                pass
            self._tensorboard_failed(tb.folder, exc)

    def _tensorboard_failed(self, folder: Path, exc: Exception) -> None:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
        message = f"tensorboard: cannot write {folder}: {reason}; the run goes on without its TensorBoard files"
        with self._notes_lock:
            self._notes.append(log_record(None, "warning", message))

    def finish(self, config: Config, summary: dict[str, Any] | None, evaluation: dict[str, Any] | None) -> None:
        """Complete the TensorBoard files with the run's end (its figures, hparams and evaluation) and send it
        to MLflow; their warnings go out with the run's last state."""
        if summary is not None:
            self._tensorboard(lambda tb: tb.finish(to_dict(config), summary, evaluation))
        self._tb = None
        self._finish_mirror()

    def _finish_mirror(self) -> None:
        mirror, self._mirror = self._mirror, None
        if mirror is not None:
            mirror.finish()  # summary.json and eval.json are written: the run's end and files go too

    def checkpoint(self, payload: dict[str, Any]) -> None:
        assert self.run_dir is not None
        save_checkpoint(RunDir(self.run_dir).last, payload)
        self._tensorboard(lambda tb: tb.flush())

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
        self._finish_mirror()  # a run that ended before its end was written (it failed to start)
        self._tensorboard(lambda tb: tb.close())
        self._tb = None
        if self._log is not None:
            with self._notes_lock:
                notes, self._notes = self._notes, []
            self._log.write(notes)
            self._log.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def _start_marker(start: StartPoint) -> str:
    """Where a run that does not start at the beginning starts, for the TensorBoard markers ("" for a new run)."""
    if start.checkpoint is None:
        return ""
    p = start.position(0)
    if start.parent is not None:
        parent = start.parent
        changes = ", ".join(f"{k} = {v}" for k, v in (parent.get("changes") or {}).items())
        return f"forked from {parent['name']} at epoch {parent['epoch']}, step {parent['step']}" + (
            f" ({changes})" if changes else ""
        )
    # TensorBoard keeps the newest text at a step: the earlier part's markers from here on give way to this one
    before = (start.continues.read_summary() or {}) if start.continues is not None else {}
    ended = f" (its earlier part ended {before['status']})" if before.get("status") else ""
    return f"continued from {start.where} at epoch {p.epoch}, batch {p.batch}, step {p.step}{ended}"


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
