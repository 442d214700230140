"""The inference processes of a server, on the HTTP process's event loop, fed by the batching queue.

Batches come from the queue (core.services.serve.batching) as soon as a worker is
idle and the batching rule allows. A batch travels as raw float32 bytes on
the worker's pipe; the answers come back the same way and are split to
their requests. Everything here runs on the event loop thread: the pipes are
read by the loop's own readiness callbacks (no thread per worker).

A worker that dies is started again; the batch it held goes back to the
front of the queue once, each of its requests alone; a request whose batch
killed a worker twice gets 500.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from core.host.exits import exit_clause
from core.services.serve.batching import Batch, Limits, RequestQueue, ServeError
from core.services.serve.handles import WorkerHandle, model_file, model_version
from core.services.serve.schema import ModelSchema
from core.services.serve.worker import BATCH_HEAD, CANARY_ID, RESULT_HEAD, SERVE_PRELOAD, worker_main

__all__ = [
    "ALIVE_S",
    "HEARTBEAT_S",
    "InferencePool",
    "ModelPool",
    "LOAD_TIMEOUT_S",
    "Limits",
    "RESTART_BACKOFF_S",
    "ServeError",
    "StartError",
    "model_file",
    "model_version",
]

HEARTBEAT_S = 0.25  # how often each worker is asked to answer
ALIVE_S = 1.0  # a worker that answered nothing for this long is not ready
LOAD_TIMEOUT_S = 120.0  # loading a model (a cold forkserver imports torch first)
RESTART_BACKOFF_S = (0.1, 0.5, 1.0, 2.0, 5.0)


class StartError(Exception):
    """The model could not be loaded in a worker (the reason, one line)."""


class ModelPool(Protocol):
    """What the HTTP app (core.services.serve.app.Service) asks of the models behind it: this machine's
    inference processes (:class:`InferencePool`) or a Ray Serve deployment's replicas
    (:mod:`core.services.serve.on_ray`)."""

    source: str
    schema: ModelSchema | None
    meta: dict[str, Any]
    version: str

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def submit(self, x: np.ndarray, timeout_s: float) -> Awaitable[np.ndarray]: ...

    def not_ready(self) -> str | None: ...

    def workers_info(self) -> list[dict[str, Any]]: ...

    def ready_workers(self) -> int: ...

    @property
    def queued_rows(self) -> int: ...

    @property
    def in_flight_rows(self) -> int: ...

    async def reload(self, source: str | None = None) -> dict[str, Any]: ...


class InferencePool:
    """N inference processes behind a batching queue; every method runs on the event loop's thread."""

    def __init__(
        self,
        source: str,
        workers: int,
        limits: Limits,
        on_batch: Callable[[int], None] | None = None,
        on_restart: Callable[[], None] | None = None,
    ) -> None:
        self.source = source
        self.limits = limits
        self._on_batch = on_batch
        self._on_restart = on_restart
        self._workers = [WorkerHandle(i, model_file(source)) for i in range(workers)]
        self._requests = RequestQueue(limits, CANARY_ID + 1, self._kick)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ctx: Any = None
        self._closing = False
        self._kick_due = False  # a kick is called soon for the requests submitted this turn
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

        self._loop = self._requests.loop = asyncio.get_running_loop()
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

    async def _boot(self, w: WorkerHandle) -> None:
        """Start ``w``'s process, take the description of what it loaded and check it with a canary."""
        assert self._loop is not None
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=worker_main, args=(child, w.path, os.getpid()), name=f"traindesk-serve-{w.index}", daemon=False
        )
        w.reply = self._loop.create_future()
        w.state, w.canary_ok, w.batch = "starting", False, None
        proc.start()
        child.close()
        w.proc = proc
        w.attach(parent)
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

    async def _check_canary(self, w: WorkerHandle) -> None:
        """One row through the model (a table's example row): answers of the right shape and kind, else StartError."""
        assert self._loop is not None and self.schema is not None and w.conn is not None
        w.canary = self._loop.create_future()
        row = np.ascontiguousarray(self.schema.canary(), dtype=np.float32)
        w.conn.send_bytes(b"B" + BATCH_HEAD.pack(CANARY_ID, 1) + row.tobytes())
        probs = await asyncio.wait_for(w.canary, LOAD_TIMEOUT_S)
        if not self.schema.answers_right(probs):
            what = "a finite value" if self.schema.regression else "class probabilities"
            raise StartError(f"{w.path}: the canary row got {probs.tolist()[:1]}, not {what}")
        w.canary_ok = True

    async def close(self) -> None:
        """Stop every worker (asked, then killed after a while); requests still waiting get 503."""
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        self._requests.close(ServeError(503, "the server is stopping"))
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
                self._requests.fail_batch(w.batch, ServeError(503, "the server is stopping"))
                w.batch = None

    def _release(self, w: WorkerHandle, kill: bool) -> None:
        """Forget ``w``'s process: its pipe and sentinel off the loop, the process reaped (killed first)."""
        w.state = "off"
        if self._loop is not None and w.conn is not None:
            self._loop.remove_reader(w.conn.fileno())
            if w.proc is not None:
                self._loop.remove_reader(w.proc.sentinel)
        w.detach()
        if w.proc is not None:
            if kill and w.proc.is_alive():
                w.proc.kill()
            w.proc.join(5)
            w.proc = None

    # ------------------------------------------------------------------ the pipes

    def _readable(self, w: WorkerHandle) -> None:
        conn = w.conn
        if conn is None:
            return
        try:
            for msg in w.messages():
                if w.conn is not conn:  # a message before this one ended the process (or the pool)
                    return
                self._message(w, msg)
        except (EOFError, OSError):
            if w.conn is conn:
                self._died(w)

    def _message(self, w: WorkerHandle, msg: bytes) -> None:
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

    def _reply(self, w: WorkerHandle, value: tuple[str, Any]) -> None:
        if w.reply is not None and not w.reply.done():
            w.reply.set_result(value)

    def _answered(self, w: WorkerHandle, batch_id: int, result: np.ndarray | ServeError) -> None:
        batch = w.batch
        if batch is None or batch.id != batch_id:
            return
        w.batch = None
        w.state = "idle"
        w.computed(time.monotonic())
        if isinstance(result, ServeError):
            self._requests.fail_batch(batch, result)
        else:
            if self._on_batch is not None:
                self._on_batch(batch.rows)
            batch.resolve(result)
        w.wake_idle_waiter()
        self._kick()

    def _died(self, w: WorkerHandle) -> None:
        """``w``'s process ended: its batch goes back to the queue (once), and a new process starts."""
        if w.state == "off":
            return
        proc = w.proc
        booting = w.state == "starting"  # whoever boots it hears of this and decides
        batch = w.batch
        w.batch = None
        w.computed(time.monotonic())
        self._release(w, kill=True)
        code = exit_clause(proc.exitcode if proc is not None else None)
        for fut in (w.reply, w.canary):
            if fut is not None and not fut.done():
                fut.set_exception(StartError(f"the model process {code} while loading {w.path}"))
        w.wake_idle_waiter()
        if self._closing:
            return
        if batch is not None:
            self._requests.put_back(batch)
        sys.stderr.write(f"serve: model process {w.index} {code}; starting it again\n")
        w.restarts += 1
        if self._on_restart is not None:
            self._on_restart()
        if not booting:
            self._spawn(self._restart(w))
        self._kick()

    async def _restart(self, w: WorkerHandle) -> None:
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
        future = self._requests.submit(x, timeout_s)
        if not self._kick_due:  # once the requests this turn of the loop parses are queued: one batch of them
            self._kick_due = True
            assert self._loop is not None
            self._loop.call_soon(self._due_kick)
        return future

    def _due_kick(self) -> None:
        self._kick_due = False
        self._kick()

    @property
    def queued_rows(self) -> int:
        return self._requests.rows

    def _kick(self) -> None:
        """Send batches to idle workers while the batching rule allows."""
        if self._closing:
            return
        while True:
            idle = next((w for w in self._workers if w.state == "idle" and not w.reserved), None)
            if idle is None:
                return
            batch = self._requests.next_batch(computing=any(w.state == "busy" for w in self._workers))
            if batch is None:
                return
            self._send(idle, batch)

    def _send(self, w: WorkerHandle, batch: Batch) -> None:
        assert w.conn is not None
        w.state = "busy"
        w.batch = batch
        w.computing(time.monotonic())
        head = b"B" + BATCH_HEAD.pack(batch.id, batch.rows)
        try:
            w.conn.send_bytes(b"".join([head, *(r.x.data for r in batch.requests)]))
        except OSError:
            self._died(w)

    # ------------------------------------------------------------------ state

    def workers_info(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [w.info(now) for w in self._workers]

    def ready_workers(self) -> int:
        """Model processes serving now."""
        return sum(1 for w in self._workers if w.state in ("idle", "busy"))

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

    async def _take_out(self, w: WorkerHandle) -> None:
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

    async def _reload_one(self, w: WorkerHandle, target: str) -> str:
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
            raise ServeError(409, f"reload: {target} is a model of another schema ({diff}); the served model is kept")
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
