"""What the server knows of each inference process, and which model file a source serves."""

from __future__ import annotations

import asyncio
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.runfiles.layout import RunDir

if TYPE_CHECKING:
    import numpy as np

    from core.services.serve.batching import Batch


class WorkerHandle:
    """One inference process as the pool sees it: its pipe, its state, the batch it computes, its health."""

    def __init__(self, index: int, path: str) -> None:
        self.index = index
        self.path = path
        self.proc: Any = None
        self.conn: Connection | None = None
        self.state = "starting"  # starting | idle | busy | off
        self.reserved = False  # taken out of rotation (a reload): no new batches
        self.batch: Batch | None = None
        self.last_seen = 0.0
        self.version = ""
        self.canary_ok = False
        self.reply: asyncio.Future[tuple[str, Any]] | None = None  # a load/swap answer awaited
        self.canary: asyncio.Future[np.ndarray] | None = None
        self.idle_waiter: asyncio.Future[None] | None = None
        self.failures = 0  # restarts in a row that did not reach a served model
        self.restarts = 0
        self.busy_s = 0.0  # seconds spent computing batches, all processes of this slot together
        self.busy_since: float | None = None

    def computing(self, now: float) -> None:
        self.busy_since = now

    def computed(self, now: float) -> None:
        if self.busy_since is not None:
            self.busy_s += now - self.busy_since
            self.busy_since = None

    def info(self, now: float) -> dict[str, Any]:
        return {
            "worker": self.index,
            "pid": self.proc.pid if self.proc is not None else None,
            "state": "reloading" if self.reserved and self.state != "off" else self.state,
            "version": self.version,
            "canary": self.canary_ok,
            "restarts": self.restarts,
            "seen_s_ago": round(now - self.last_seen, 3) if self.last_seen else None,
            "busy_s": round(self.busy_s + (now - self.busy_since if self.busy_since is not None else 0.0), 4),
        }

    def wake_idle_waiter(self) -> None:
        """A reload waiting for this worker to be free hears that it is (or that it died)."""
        if self.idle_waiter is not None and not self.idle_waiter.done():
            self.idle_waiter.set_result(None)


def model_version(meta: dict[str, Any]) -> str:
    """A served model's version: the start of its weights' digest (the same weights, the same version)."""
    digest = str(meta.get("weights_sha256") or "")
    return digest[:12] or "unknown"


def is_run_source(path: Path) -> bool:
    """A source that is a run directory (as ``traindesk predict`` tells one), not an export folder."""
    from core.services.predict import is_run_dir

    return is_run_dir(path)


def model_file(source: str) -> str:
    """The file a source serves now: a run directory's default checkpoint (best once it exists), else the source."""
    path = Path(source).expanduser()
    if is_run_source(path):
        run = RunDir(path)
        return str(run.checkpoint(run.default_checkpoint()))
    return str(path)
