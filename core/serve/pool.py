"""The inference processes of a server and the batcher in front of them, on the HTTP process's event loop.

Requests wait in one bounded queue (rows). A batch goes to an idle worker
as soon as it holds ``max_batch`` rows, its oldest request has waited
``max_wait_s``, or no batch is being computed at all (a lone request on an
idle server goes at once). The batch travels as raw float32 bytes on the
worker's pipe; the answers come back the same way and are split to their
requests. Everything here runs on the event loop thread: the pipes are read
by the loop's own readiness callbacks (no thread per worker).

A worker that dies is started again; the batch it held goes back to the
front of the queue once, each of its requests alone; a request whose batch
killed a worker twice gets 500. A request still waiting at its deadline gets
504 and is never computed.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import struct
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

import numpy as np

from core.serve.schema import ModelSchema
from core.serve.worker import BATCH_HEAD, CANARY_ID, RESULT_HEAD, SERVE_PRELOAD, worker_main

HEARTBEAT_S = 0.25       # how often each worker is asked to answer
ALIVE_S = 1.0            # a worker that answered nothing for this long is not ready
LOAD_TIMEOUT_S = 120.0   # loading a model (a cold forkserver imports torch first)
RESTART_BACKOFF_S = (0.1, 0.5, 1.0, 2.0, 5.0)


class ServeError(Exception):
    """A request that gets an error answer: its HTTP status, one line, and extra headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class StartError(Exception):
    """The model could not be loaded in a worker (the reason, one line)."""


@dataclass(frozen=True)
class Limits:
    max_batch: int = 64          # rows per batch
    max_wait_s: float = 0.0      # how long a batch may wait for more rows while another one computes
    queue_rows: int = 1024       # rows waiting at most; more get 429
    timeout_s: float = 10.0      # a request's deadline unless it sends X-Request-Timeout


class _Request:
    __slots__ = ("x", "n", "future", "deadline", "timer", "crashes", "queued", "t0")

    def __init__(self, x: np.ndarray, future: asyncio.Future[np.ndarray], deadline: float, t0: float) -> None:
        self.x = x
        self.n = len(x)
        self.future = future
        self.deadline = deadline
        self.timer: asyncio.TimerHandle | None = None
        self.crashes = 0
        self.queued = True
        self.t0 = t0


class _Batch:
    __slots__ = ("id", "requests", "rows")

    def __init__(self, batch_id: int, requests: list[_Request], rows: int) -> None:
        self.id = batch_id
        self.requests = requests
        self.rows = rows


class _Worker:
    def __init__(self, index: int, path: str) -> None:
        self.index = index
        self.path = path
        self.proc: Any = None
        self.conn: Connection | None = None
        self.state = "starting"        # starting | idle | busy | off
        self.reserved = False          # taken out of rotation (a reload): no new batches
        self.batch: _Batch | None = None
        self.last_seen = 0.0
        self.version = ""
        self.canary_ok = False
        self.reply: asyncio.Future[tuple[str, Any]] | None = None   # a load/swap answer awaited
        self.canary: asyncio.Future[np.ndarray] | None = None
        self.idle_waiter: asyncio.Future[None] | None = None
        self.failures = 0               # restarts in a row that did not reach a served model
        self.restarts = 0

    def info(self, now: float) -> dict[str, Any]:
        return {"worker": self.index, "pid": self.proc.pid if self.proc is not None else None,
                "state": "reloading" if self.reserved and self.state != "off" else self.state,
                "version": self.version, "canary": self.canary_ok, "restarts": self.restarts,
                "seen_s_ago": round(now - self.last_seen, 3) if self.last_seen else None}


def _exit_text(code: int | None) -> str:
    if code is None:
        return "ended"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def model_version(meta: dict[str, Any]) -> str:
    """A served model's version: the start of its weights' digest (the same weights, the same version)."""
    digest = str(meta.get("weights_sha256") or "")
    return digest[:12] or "unknown"


def model_file(source: str) -> str:
    """The file a source serves now: a run directory's best.pt once it exists, else its last.pt."""
    from core.predict import is_run_dir

    path = Path(source).expanduser()
    if is_run_dir(path):
        best = path / "checkpoints" / "best.pt"
        return str(best if best.is_file() else path / "checkpoints" / "last.pt")
    return str(path)


class InferencePool:
    """N inference processes behind a batching queue; every method runs on the event loop's thread."""

    def __init__(self, source: str, workers: int, limits: Limits,
                 on_batch: Callable[[int], None] | None = None,
                 on_restart: Callable[[], None] | None = None) -> None:
        self.source = source
        self.limits = limits
        self._on_batch = on_batch
        self._on_restart = on_restart
        self._workers = [_Worker(i, model_file(source)) for i in range(workers)]
        self._queue: collections.deque[_Request] = collections.deque()
        self.queued_rows = 0
        self._next_id = CANARY_ID + 1
        self._wait_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ctx: Any = None
        self._closing = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reload_lock = asyncio.Lock()
        self.schema: ModelSchema | None = None
        self.meta: dict[str, Any] = {}
        self.version = ""
        self.loaded_at = 0.0

    # ------------------------------------------------------------------ start and stop

    async def start(self) -> None:
        """Start every worker and wait until each has loaded the model and passed its canary."""
        from core.launchers import local as launcher

        self._loop = asyncio.get_running_loop()
        self._ctx = launcher.get_context(SERVE_PRELOAD)
        try:
            await asyncio.gather(*(self._boot(w) for w in self._workers))
        except BaseException:
            await self.close()
            raise
        self.loaded_at = time.time()
        self._spawn(self._heartbeats())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _boot(self, w: _Worker) -> None:
        """Start ``w``'s process, take the description of what it loaded and check it with a canary."""
        assert self._loop is not None
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=worker_main, args=(child, w.path, os.getpid()),
                                 name=f"traindesk-serve-{w.index}", daemon=False)
        w.reply = self._loop.create_future()
        w.state, w.canary_ok, w.batch = "starting", False, None
        proc.start()
        child.close()
        w.proc, w.conn = proc, parent
        w.last_seen = time.monotonic()
        self._loop.add_reader(parent.fileno(), self._readable, w)
        self._loop.add_reader(proc.sentinel, self._died, w)
        # uvloop makes a watched fd non-blocking; the pipe's messages are read and written whole (a reader
        # that is woken by a message's first bytes waits for the rest, a batch larger than the socket's
        # buffer is written while the idle worker reads it), so it goes back to blocking
        os.set_blocking(parent.fileno(), True)
        kind, payload = await asyncio.wait_for(w.reply, LOAD_TIMEOUT_S)
        if kind != "M":
            raise StartError(str(payload))
        meta = payload
        schema = ModelSchema.from_meta(meta)
        if self.schema is None:
            self.schema, self.meta, self.version = schema, meta, model_version(meta)
        elif (diff := self.schema.difference(schema)) is not None:
            raise StartError(f"{w.path} now holds a model of another schema ({diff})")
        w.version = model_version(meta)
        await self._check_canary(w)
        w.state = "idle"
        w.failures = 0
        self._kick()

    async def _check_canary(self, w: _Worker) -> None:
        """One row through the model: answers of the right shape that are probabilities, else StartError."""
        assert self._loop is not None and self.schema is not None and w.conn is not None
        w.canary = self._loop.create_future()
        row = np.zeros((1, *self.schema.shape), dtype=np.float32)
        w.conn.send_bytes(b"B" + BATCH_HEAD.pack(CANARY_ID, 1) + row.tobytes())
        probs = await asyncio.wait_for(w.canary, LOAD_TIMEOUT_S)
        ok = probs.shape == (1, len(self.schema.classes)) and bool(np.isfinite(probs).all())
        if not ok or abs(float(probs.sum()) - 1.0) > 1e-3:
            raise StartError(f"{w.path}: the canary row got {probs.tolist()[:1]}, not class probabilities")
        w.canary_ok = True

    async def close(self) -> None:
        """Stop every worker (asked, then killed after a while); requests still waiting get 503."""
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        if self._wait_timer is not None:
            self._wait_timer.cancel()
        for r in list(self._queue):
            self._fail(r, ServeError(503, "the server is stopping"))
        self._queue.clear()
        self.queued_rows = 0
        for w in self._workers:
            if w.conn is not None and w.state != "off":
                try:
                    w.conn.send_bytes(b"Q")
                except OSError:
                    pass
        deadline = time.monotonic() + 5.0
        for w in self._workers:
            while w.proc is not None and w.proc.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            self._release(w, kill=True)
            if w.batch is not None:
                for r in w.batch.requests:
                    self._fail(r, ServeError(503, "the server is stopping"))
                w.batch = None

    def _release(self, w: _Worker, kill: bool) -> None:
        """Forget ``w``'s process: its pipe and sentinel off the loop, the process reaped (killed first)."""
        w.state = "off"
        if self._loop is not None and w.conn is not None:
            self._loop.remove_reader(w.conn.fileno())
            if w.proc is not None:
                self._loop.remove_reader(w.proc.sentinel)
        if w.conn is not None:
            w.conn.close()
            w.conn = None
        if w.proc is not None:
            if kill and w.proc.is_alive():
                w.proc.kill()
            w.proc.join(5)
            w.proc = None

    # ------------------------------------------------------------------ the pipes

    def _readable(self, w: _Worker) -> None:
        conn = w.conn
        try:
            while conn is not None and w.conn is conn and conn.poll():
                self._message(w, conn.recv_bytes())
        except (EOFError, OSError):
            self._died(w)

    def _message(self, w: _Worker, msg: bytes) -> None:
        w.last_seen = time.monotonic()
        kind = msg[:1]
        if kind == b"R":
            batch_id, n, k = RESULT_HEAD.unpack_from(msg, 1)
            probs = np.frombuffer(msg, dtype=np.float32, count=n * k, offset=1 + RESULT_HEAD.size).reshape((n, k))
            if batch_id == CANARY_ID:
                if w.canary is not None and not w.canary.done():
                    w.canary.set_result(probs)
                return
            self._answered(w, batch_id, probs)
        elif kind == b"E":
            (batch_id,) = struct.unpack_from("<Q", msg, 1)
            text = msg[9:].decode(errors="replace")
            if batch_id == CANARY_ID:
                if w.canary is not None and not w.canary.done():
                    w.canary.set_exception(StartError(f"{w.path}: the canary row failed: {text}"))
                return
            self._answered(w, batch_id, ServeError(500, f"the model failed on this input: {text}"))
        elif kind == b"M":
            self._reply(w, ("M", json.loads(msg[1:])))
        elif kind == b"F":
            self._reply(w, ("F", msg[1:].decode(errors="replace")))
        elif kind == b"S":
            self._reply(w, ("S", None))

    def _reply(self, w: _Worker, value: tuple[str, Any]) -> None:
        if w.reply is not None and not w.reply.done():
            w.reply.set_result(value)

    def _answered(self, w: _Worker, batch_id: int, result: np.ndarray | ServeError) -> None:
        batch = w.batch
        if batch is None or batch.id != batch_id:
            return
        w.batch = None
        w.state = "idle"
        if isinstance(result, ServeError):
            for r in batch.requests:
                self._fail(r, result)
        else:
            if self._on_batch is not None:
                self._on_batch(batch.rows)
            start = 0
            for r in batch.requests:
                if not r.future.done():
                    r.future.set_result(result[start:start + r.n])
                if r.timer is not None:
                    r.timer.cancel()
                start += r.n
        if w.idle_waiter is not None and not w.idle_waiter.done():
            w.idle_waiter.set_result(None)
        self._kick()

    def _died(self, w: _Worker) -> None:
        """``w``'s process ended: its batch goes back to the queue (once), and a new process starts."""
        if w.state == "off":
            return
        proc = w.proc
        booting = w.state == "starting"  # whoever boots it hears of this and decides
        batch = w.batch
        w.batch = None
        self._release(w, kill=True)
        code = _exit_text(proc.exitcode if proc is not None else None)
        for fut in (w.reply, w.canary):
            if fut is not None and not fut.done():
                fut.set_exception(StartError(f"the model process {code} while loading {w.path}"))
        if w.idle_waiter is not None and not w.idle_waiter.done():
            w.idle_waiter.set_result(None)
        if self._closing:
            return
        if batch is not None:
            back: list[_Request] = []
            for r in batch.requests:
                if r.future.done():
                    continue
                r.crashes += 1
                if r.crashes >= 2:
                    self._fail(r, ServeError(500, "the model process crashed on this input"))
                else:
                    back.append(r)
            for r in reversed(back):  # at the front, in their order, each alone (see _take)
                r.queued = True
                self.queued_rows += r.n
                self._queue.appendleft(r)
        sys.stderr.write(f"serve: model process {w.index} {code}; starting it again\n")
        w.restarts += 1
        if self._on_restart is not None:
            self._on_restart()
        if not booting:
            self._spawn(self._restart(w))
        self._kick()

    async def _restart(self, w: _Worker) -> None:
        delay = RESTART_BACKOFF_S[min(w.failures, len(RESTART_BACKOFF_S) - 1)]
        w.failures += 1
        await asyncio.sleep(delay)
        if self._closing:
            return
        try:
            await self._boot(w)
        except (StartError, asyncio.TimeoutError, OSError) as exc:
            sys.stderr.write(f"serve: model process {w.index} did not start again: {exc}\n")
            if w.state != "off":
                self._release(w, kill=True)
            if not self._closing:
                self._spawn(self._restart(w))

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            stamp = b"H" + str(time.monotonic()).encode()
            for w in self._workers:
                if w.conn is not None and w.state in ("idle", "busy"):
                    try:
                        w.conn.send_bytes(stamp)
                    except OSError:
                        self._died(w)

    # ------------------------------------------------------------------ the queue

    def submit(self, x: np.ndarray, timeout_s: float) -> asyncio.Future[np.ndarray]:
        """Queue rows ``x``; the future gets their probabilities, or a ServeError (429 at once when full)."""
        assert self._loop is not None
        n = len(x)
        limit = self.limits.queue_rows
        if n > limit:
            raise ServeError(413, f"the request has {n} rows; at most {limit} fit in the queue")
        if self.queued_rows + n > limit:
            raise ServeError(429, f"the queue is full ({self.queued_rows} of {limit} rows waiting); retry later",
                             {"Retry-After": "1"})
        loop = self._loop
        now = loop.time()
        r = _Request(x, loop.create_future(), now + timeout_s, now)
        r.timer = loop.call_at(r.deadline, self._expire, r, timeout_s)
        self._queue.append(r)
        self.queued_rows += n
        self._kick()
        return r.future

    def _expire(self, r: _Request, timeout_s: float) -> None:
        if r.future.done():
            return
        where = "in the queue" if r.queued else "while the model computed it"
        self._fail(r, ServeError(504, f"the deadline of {timeout_s:g} s passed {where}"))

    def _fail(self, r: _Request, error: ServeError) -> None:
        if r.queued:
            r.queued = False
            self.queued_rows -= r.n
        if r.timer is not None:
            r.timer.cancel()
        if not r.future.done():
            r.future.set_exception(error)
            r.future.exception()  # retrieved: a request whose client left logs nothing

    def _kick(self) -> None:
        """Send batches to idle workers while the batching rule allows."""
        if self._closing:
            return
        queue = self._queue
        limits = self.limits
        while queue:
            while queue and not queue[0].queued:  # answered already (deadline): dropped here
                queue.popleft()
            if not queue:
                return
            idle = next((w for w in self._workers if w.state == "idle" and not w.reserved), None)
            if idle is None:
                return
            if self.queued_rows < limits.max_batch and queue[0].crashes == 0:
                computing = any(w.state == "busy" for w in self._workers)
                assert self._loop is not None
                wait_until = queue[0].t0 + limits.max_wait_s
                if computing and self._loop.time() < wait_until:
                    if self._wait_timer is None:
                        self._wait_timer = self._loop.call_at(wait_until, self._waited)
                    return
            self._send(idle, self._take())

    def _waited(self) -> None:
        self._wait_timer = None
        self._kick()

    def _take(self) -> _Batch:
        """Requests from the front of the queue, up to max_batch rows (at least one request); a request
        back from a crash goes alone, so that it can only take its own batch down with it."""
        queue = self._queue
        taken: list[_Request] = []
        rows = 0
        while queue:
            r = queue[0]
            if not r.queued:
                queue.popleft()
                continue
            if taken and (rows + r.n > self.limits.max_batch or r.crashes or taken[0].crashes):
                break
            queue.popleft()
            r.queued = False
            self.queued_rows -= r.n
            taken.append(r)
            rows += r.n
        batch_id = self._next_id
        self._next_id += 1
        return _Batch(batch_id, taken, rows)

    def _send(self, w: _Worker, batch: _Batch) -> None:
        assert w.conn is not None
        w.state = "busy"
        w.batch = batch
        head = b"B" + BATCH_HEAD.pack(batch.id, batch.rows)
        try:
            w.conn.send_bytes(b"".join([head, *(r.x for r in batch.requests)]))
        except OSError:
            self._died(w)

    # ------------------------------------------------------------------ state

    def workers_info(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [w.info(now) for w in self._workers]

    def not_ready(self) -> str | None:
        """None when every worker answered within the last second and passed its canary; else why not."""
        now = time.monotonic()
        for w in self._workers:
            if w.state not in ("idle", "busy"):
                return f"model process {w.index} is {w.state}"
            if not w.canary_ok:
                return f"model process {w.index} has not passed its canary since its last load"
            if now - w.last_seen > ALIVE_S:
                return f"model process {w.index} answered nothing for {now - w.last_seen:.1f} s"
        return None

    @property
    def in_flight_rows(self) -> int:
        return sum(w.batch.rows for w in self._workers if w.batch is not None)

    # ------------------------------------------------------------------ reload

    async def reload(self, source: str | None = None) -> dict[str, Any]:
        """Load ``source`` (default: what is served, read again) into every worker, one at a time.

        A model of another schema, or one that does not load, is refused
        (ServeError 409 / 422) by the first worker and nothing changes. The
        other workers serve while one loads.
        """
        async with self._reload_lock:
            target = model_file(source or self.source)
            if not Path(target).exists():
                raise ServeError(422, f"reload: file not found: {target}")
            new_version = ""
            for w in self._workers:
                await self._take_out(w)
                try:
                    new_version = await self._reload_one(w, target)
                finally:
                    w.reserved = False
                    self._kick()
            if source is not None:
                self.source = source
            self.version = new_version
            self.loaded_at = time.time()
            return {"version": new_version, "model": target}

    async def _take_out(self, w: _Worker) -> None:
        """Mark ``w`` reserved and wait until it computes nothing (or a restart brought it back)."""
        assert self._loop is not None
        w.reserved = True
        deadline = self._loop.time() + LOAD_TIMEOUT_S
        while w.state != "idle":
            if self._loop.time() > deadline:
                w.reserved = False
                raise ServeError(503, f"reload: model process {w.index} did not become free")
            w.idle_waiter = self._loop.create_future()
            try:
                await asyncio.wait_for(w.idle_waiter, 1.0)
            except asyncio.TimeoutError:
                pass

    async def _reload_one(self, w: _Worker, target: str) -> str:
        assert self._loop is not None and w.conn is not None and self.schema is not None
        w.reply = self._loop.create_future()
        w.conn.send_bytes(b"L" + target.encode())
        try:
            kind, payload = await asyncio.wait_for(w.reply, LOAD_TIMEOUT_S)
        except StartError as exc:
            raise ServeError(500, f"reload: {exc}") from None
        if kind != "M":
            raise ServeError(422, f"reload: {payload}; the served model is kept")
        diff = self.schema.difference(ModelSchema.from_meta(payload))
        if diff is not None:
            w.conn.send_bytes(b"D")
            raise ServeError(409, f"reload: {target} is a model of another schema ({diff}); "
                                  "the served model is kept")
        w.reply = self._loop.create_future()
        w.conn.send_bytes(b"S")
        await asyncio.wait_for(w.reply, LOAD_TIMEOUT_S)
        w.path = target
        w.version = model_version(payload)
        w.canary_ok = False
        try:
            await self._check_canary(w)
        except StartError as exc:
            raise ServeError(500, f"reload: {exc}") from None
        self.meta = payload
        return w.version
