"""What the server knows of each inference process, and which model file a source serves."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.runfiles.layout import RunDir

READ_BYTES = 1 << 16  # what one read of a worker's pipe takes at most
_SIZE = struct.Struct("!i")  # multiprocessing's framing: a message's size, or -1 and then a 64-bit size
_BIG_SIZE = struct.Struct("!Q")

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
        self._reader: socket.socket | None = None  # the pipe's read side, read without blocking
        self._inbox = bytearray()  # the start of a message whose rest has not come yet
        self._buffer = bytearray(READ_BYTES)  # what one read takes: the messages are copied out of it

    def attach(self, conn: Connection) -> None:
        """Talk to a new process on ``conn``: messages are written with its ``send_bytes`` and read by
        :meth:`messages`."""
        self.conn = conn
        self._reader = socket.socket(fileno=os.dup(conn.fileno()))
        self._inbox = bytearray()

    def detach(self) -> None:
        """Close the pipe (both sides of this end)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def messages(self) -> list[bytes]:
        """The whole messages the pipe holds now, in order, read in one call that never waits (the pipe
        stays blocking for the batches written to it): one system call for every message a wake-up brings,
        where ``Connection.poll`` and ``recv_bytes`` take three for each. EOFError once the process closed
        its end; an empty list on a wake-up that brought only part of a message."""
        assert self._reader is not None
        try:
            got = self._reader.recv_into(self._buffer, READ_BYTES, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return []
        if not got:
            raise EOFError
        buf: memoryview | bytearray = memoryview(self._buffer)[:got]
        if self._inbox:
            self._inbox += buf
            buf = self._inbox
        out: list[bytes] = []
        at, end = 0, len(buf)
        while end - at >= 4:
            (size,) = _SIZE.unpack_from(buf, at)
            head = 4
            if size == -1:
                if end - at < 12:
                    break
                (size,) = _BIG_SIZE.unpack_from(buf, at + 4)
                head = 12
            if end - at - head < size:
                break
            out.append(bytes(buf[at + head : at + head + size]))
            at += head + size
        self._inbox = bytearray(buf[at:]) if at < end else bytearray()
        return out

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
