"""The records of a run: their kinds, their fields and the one place each kind is built.

A record is a JSON object with ``kind`` and ``t`` (unix seconds); the public
kinds are the lines of ``metrics.jsonl`` (DESIGN's metrics records), the
internal ones (a leading ``_``) travel only from a worker to its session and
are never written or forwarded. Records stay plain dicts on the wire and on
disk (the hot loop builds one every 10 ms and the queue pickles them); the
``TypedDict`` classes say what each kind holds, and the constructors below
build them with their keys in the order ``metrics.jsonl`` has always had, as
the ``Record`` (a plain dict) that every sender, reducer and writer takes.

Readers fold records into facts with :class:`core.session.reading.stats.RunStats`
and place them on a run's axes with :class:`core.session.reading.timeline.Timeline`.
Standard library only: workers, the session, the command line and the
window's threads all import it.
"""

from __future__ import annotations

import time
from typing import Any, TypedDict

# -- kinds ------------------------------------------------------------------------------------------
STEP = "step"
EVAL = "eval"
STATE = "state"
LOG = "log"
CONFIG = "config"
TRIAL = "trial"
RECOVERY = "recovery"  # a worker rolled back from a diverged loss and lowered its own rate
PUBLIC = (STEP, EVAL, STATE, LOG, CONFIG, TRIAL, RECOVERY)

DONE = "_done"  # a worker ended: how, and where to continue from
SNAPSHOT = "_snapshot"  # a worker's part of a consistent checkpoint
BEST = "_best"  # the weights of a worker's new best evaluation
DIVERGED = "_diverged"  # a worker's loss stopped being finite
INTERNAL = (DONE, DIVERGED, SNAPSHOT, BEST)  # worker -> session only, never written or forwarded

Record = dict[str, Any]


class StepRecord(TypedDict, total=False):
    kind: str
    t: float
    worker: int
    epoch: int
    step: int
    samples: int
    loss: float
    lr: float
    trial: int  # a search's trial


class EvalRecord(TypedDict, total=False):
    kind: str
    t: float
    worker: int
    epoch: int
    val_loss: float
    val_accuracy: float  # classification (plus what the task adds: val_rmse, val_mae, val_r2, ...)
    val_rmse: float  # regression
    samples: int
    trial: int


class StateRecord(TypedDict, total=False):
    kind: str
    t: float
    worker: int | None  # None: the session's own state
    state: str  # starting | running | paused | stopping | finishing | finished | stopped | failed
    detail: str
    launcher: str  # where a worker was started (a starting record)
    pid: int
    node: str
    local_rank: int


class RecoveryRecord(TypedDict, total=False):
    kind: str
    t: float
    worker: int
    epoch: int
    step: int  # the worker's last step before the diverged one
    lr_from: float
    lr_to: float
    loss: str  # "nan", "inf": JSON has no number for it
    weights_from: int  # the step whose weights came back


class LogRecord(TypedDict, total=False):
    kind: str
    t: float
    worker: int | None
    level: str  # info | warning | error
    message: str
    topic: str  # "data": what the data is, shown at the start whatever its level
    progress: dict[str, Any]  # a step before the workers start, how far it got: what, done, total, unit, seconds


class ConfigRecord(TypedDict, total=False):
    kind: str
    t: float
    worker: None
    changes: dict[str, dict[str, Any]]  # key -> {"from": old, "to": new}
    steps: dict[str, int]  # worker -> its step when the change took effect


class TrialRecord(TypedDict, total=False):
    kind: str
    t: float
    worker: int
    trial: int
    state: str  # running | complete | pruned | failed | stopped


def _now(t: float | None) -> float:
    return time.time() if t is None else t


# -- public records ---------------------------------------------------------------------------------
def step_record(
    worker: int, epoch: int, step: int, samples: int, loss: float, lr: float, t: float | None = None, **extra: Any
) -> Record:
    return {
        "kind": STEP,
        "t": _now(t),
        "worker": worker,
        "epoch": epoch,
        "step": step,
        "samples": samples,
        "loss": loss,
        "lr": lr,
        **extra,
    }


def eval_record(
    worker: int, epoch: int, metrics: dict[str, Any], samples: int, t: float | None = None, **extra: Any
) -> Record:
    """``metrics``: val_loss and the task's scores (val_accuracy, or val_rmse and the rest)."""
    return {"kind": EVAL, "t": _now(t), "worker": worker, "epoch": epoch, **metrics, "samples": samples, **extra}


def imported_step_record(epoch: int, step: int, loss: float, t: float, lr: float | None = None) -> Record:
    """A training step of a run imported from another tool's logs (core.runfiles.tensorboard_import): worker 0,
    no ``samples`` (such logs count steps, not samples), ``lr`` only where the logs hold one."""
    rec: Record = {"kind": STEP, "t": t, "worker": 0, "epoch": epoch, "step": step, "loss": loss}
    if lr is not None:
        rec["lr"] = lr
    return rec


def imported_eval_record(epoch: int, step: int, metrics: dict[str, float], t: float) -> Record:
    """An evaluation of an imported run: at the step the logs put it, with the figures they hold."""
    return {"kind": EVAL, "t": t, "worker": 0, "epoch": epoch, "step": step, **metrics}


def state_record(worker: int | None, state: str, detail: str = "", t: float | None = None, **extra: Any) -> Record:
    return {"kind": STATE, "t": _now(t), "worker": worker, "state": state, "detail": detail, **extra}


def log_record(worker: int | None, level: str, message: str, t: float | None = None, **extra: Any) -> Record:
    return {"kind": LOG, "t": _now(t), "worker": worker, "level": level, "message": message, **extra}


def progress_record(what: str, done: int, total: int, unit: str, seconds: float, message: str) -> Record:
    """A log line of a long step before the workers start (a backbone's features) that also says how far the
    step got, for a progress bar: ``done`` of ``total`` ``unit`` in ``seconds``."""
    counts = {"what": what, "done": done, "total": total, "unit": unit, "seconds": round(seconds, 3)}
    return log_record(None, "info", message, topic="data", progress=counts)


def config_record(changes: dict[str, dict[str, Any]], steps: dict[str, int], t: float | None = None) -> Record:
    return {"kind": CONFIG, "t": _now(t), "worker": None, "changes": changes, "steps": steps}


def recovery_record(
    worker: int,
    epoch: int,
    step: int,
    lr_from: float,
    lr_to: float,
    loss: float,
    weights_from: int,
    t: float | None = None,
) -> Record:
    """``loss`` (not finite) at the step after ``step``; the weights of step ``weights_from`` came back."""
    return {
        "kind": RECOVERY,
        "t": _now(t),
        "worker": worker,
        "epoch": epoch,
        "step": step,
        "lr_from": lr_from,
        "lr_to": lr_to,
        "loss": str(loss),
        "weights_from": weights_from,
    }


def trial_record(worker: int, trial: int, state: str, t: float | None = None, **extra: Any) -> Record:
    return {"kind": TRIAL, "t": _now(t), "worker": worker, "trial": trial, "state": state, **extra}


# -- worker -> session ------------------------------------------------------------------------------
def snapshot_record(
    worker: int,
    request: int,
    position: dict[str, Any],
    optimizer: bytes,
    rng: bytes,
    precision: bytes,
    t: float | None = None,
) -> Record:
    """A worker's part of a checkpoint: its position and its optimizer, RNG and precision (gradient scaler) states."""
    return {
        "kind": SNAPSHOT,
        "t": _now(t),
        "worker": worker,
        "request": request,
        **position,
        "optimizer": optimizer,
        "rng": rng,
        "precision": precision,
    }


def best_record(worker: int, epoch: int, step: int, value: float, weights: bytes, t: float | None = None) -> Record:
    return {
        "kind": BEST,
        "t": _now(t),
        "worker": worker,
        "epoch": epoch,
        "step": step,
        "value": value,
        "weights": weights,
    }


def diverged_record(worker: int, message: str, t: float | None = None) -> Record:
    return {"kind": DIVERGED, "t": _now(t), "worker": worker, "message": message}


def done_record(
    worker: int,
    status: str,
    error: str | None,
    epochs_done: int,
    position: dict[str, Any],
    optimizer: bytes | None = None,
    rng: bytes | None = None,
    precision: bytes | None = None,
    t: float | None = None,
) -> Record:
    """A worker's last record: how it ended (finished | stopped | failed) and where to continue from."""
    return {
        "kind": DONE,
        "t": _now(t),
        "worker": worker,
        "status": status,
        "error": error,
        "epochs_done": epochs_done,
        **position,
        "optimizer": optimizer,
        "rng": rng,
        "precision": precision,
    }


def lost_record(worker: int, status: str, error: str | None, t: float | None = None) -> Record:
    """The last record of a worker that ended without sending its own (it died, or the stop escalation ended
    it): how it ended, and no position to continue from."""
    return {"kind": DONE, "t": _now(t), "worker": worker, "status": status, "error": error}


def is_internal(record: Record) -> bool:
    return record.get("kind") in INTERNAL
