"""The HTTP face of a served model: a Starlette app on uvicorn, with its metrics, auth, drain and reload.

One process, one event loop: uvicorn parses HTTP, the handlers parse the
body into rows (core.services.serve.schema), queue them on the pool
(core.services.serve.pool) and await their answers; the inference runs in the
pool's processes. Nothing here knows the command line: ``serve(options)``
is what ``traindesk serve`` and the window's Serve tab call.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from core.host.lifeline import alive
from core.runfiles.layout import RunDir
from core.services.serve.batching import Limits, ServeError
from core.services.serve.handles import is_run_source, model_file
from core.services.serve.openapi import docs_html, openapi
from core.services.serve.pool import InferencePool, ModelPool, StartError
from core.services.serve.schema import BadRequest

TOKEN_ENV = "TRAINDESK_SERVE_TOKEN"
MAX_BODY_BYTES = 8 << 20
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    2.0,
    5.0,
    10.0,
)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
WATCH_EVERY_S = 1.0
DRAIN_GRACE_S = 30.0
DRAIN_QUIET_S = 0.25  # a drain ends once no request came for this long


@dataclass
class ServeOptions:
    """What ``serve`` needs: the model (a run directory or a model file) and how to serve it."""

    source: str
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 2
    max_batch: int = 64
    max_wait_ms: float = 0.0
    queue: int = 1024
    timeout_s: float = 10.0
    token: str | None = None
    watch: bool = False
    die_with: int | None = None  # a process whose end stops the server (the window that started it)
    max_body_bytes: int = MAX_BODY_BYTES
    log: Callable[[str], None] = field(default=lambda text: print(text, file=sys.stderr))

    def limits(self) -> Limits:
        return Limits(self.max_batch, self.max_wait_ms / 1000.0, self.queue, self.timeout_s)


class ServeConfigError(ValueError):
    """An option that cannot work (one line, naming it)."""


def check_options(o: ServeOptions) -> None:
    """Refuse options that cannot work, one line each, before anything starts."""
    path = Path(o.source).expanduser()
    if not path.exists():
        raise ServeConfigError(f"serve: not found: {o.source}")
    run = RunDir(path)
    best = run.best.relative_to(run.path).as_posix()
    if is_run_source(path) and not Path(model_file(str(path))).is_file():
        raise ServeConfigError(f"serve: {o.source} has no {best} or {run.last.name}: the run saved no weights")
    if o.watch and not is_run_source(path):
        raise ServeConfigError(f"serve: --watch follows a run directory's {run.best.name}; give a run directory")
    for name, value, low in (
        ("--workers", o.workers, 1),
        ("--max-batch", o.max_batch, 1),
        ("--queue", o.queue, 1),
        ("--port", o.port, 0),
    ):
        if value < low:
            raise ServeConfigError(f"serve: {name} must be at least {low}, got {value}")
    if o.port > 65535:
        raise ServeConfigError(f"serve: --port must be at most 65535, got {o.port}")
    if o.max_wait_ms < 0 or o.timeout_s <= 0:
        raise ServeConfigError("serve: --max-wait-ms must be >= 0 and --timeout-s > 0")
    if o.die_with is not None and not alive(o.die_with):
        raise ServeConfigError(f"serve: --die-with {o.die_with}: no such process")


class _Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "traindesk_serve_requests", "requests answered, by endpoint and status", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "traindesk_serve_latency_seconds", "time to answer a /predict request", buckets=LATENCY_BUCKETS, registry=r
        )
        self.batch = Histogram(
            "traindesk_serve_batch_rows", "rows per batch sent to a model process", buckets=BATCH_BUCKETS, registry=r
        )
        self.rows = Counter("traindesk_serve_rows", "rows predicted", registry=r)
        self.queue = Gauge("traindesk_serve_queue_rows", "rows waiting for a model process", registry=r)
        self.in_flight = Gauge("traindesk_serve_in_flight_rows", "rows being computed", registry=r)
        self.restarts = Counter(
            "traindesk_serve_worker_restarts", "model processes started again after dying", registry=r
        )
        self.workers_ready = Gauge("traindesk_serve_workers_ready", "model processes serving", registry=r)
        self.model = Info("traindesk_serve_model", "the model served", registry=r)
        self.reloads = Counter("traindesk_serve_reloads", "reloads by result", ["result"], registry=r)
        self.unseen = Counter(
            "traindesk_serve_unseen_values",
            "a table's category values training never saw, by column",
            ["column"],
            registry=r,
        )
        self.predict_ok = self.requests.labels("predict", "200")  # the hot path's counter, labelled once

    def batch_done(self, rows: int) -> None:
        self.batch.observe(rows)
        self.rows.inc(rows)


class Service:
    """A served model: the pool of models (inference processes, unless another is given) and the HTTP app in
    front of it."""

    def __init__(self, options: ServeOptions, pool: ModelPool | None = None) -> None:
        self.options = options
        self.metrics = _Metrics()
        self.pool: ModelPool = pool or InferencePool(
            options.source,
            options.workers,
            options.limits(),
            on_batch=self.metrics.batch_done,
            on_restart=self.metrics.restarts.inc,
        )
        self.token = options.token or os.environ.get(TOKEN_ENV) or None
        self._bearer = f"Bearer {self.token}".encode() if self.token else None
        self.draining = False
        self.active = 0  # /predict requests being answered
        self.last_arrival = 0.0  # when the last /predict request came (monotonic)
        self.url = ""
        self._idle = asyncio.Event()
        self._watch_task: asyncio.Task[None] | None = None
        self.app = Starlette(
            routes=[
                Route("/predict", self.predict, methods=["POST"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/ready", self.ready, methods=["GET"]),
                Route("/metrics", self.metrics_page, methods=["GET"]),
                Route("/openapi.json", self.openapi, methods=["GET"]),
                Route("/docs", self.docs, methods=["GET"]),
                Route("/admin/reload", self.reload, methods=["POST"]),
            ]
        )

    # ------------------------------------------------------------------ helpers

    def _error(self, endpoint: str, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
        self.metrics.requests.labels(endpoint, str(status)).inc()
        return Response(
            orjson.dumps({"error": message}), status_code=status, headers=headers, media_type="application/json"
        )

    def _unauthorised(self, request: Request) -> bool:
        if self._bearer is None:
            return False
        for key, value in request.scope["headers"]:
            if key == b"authorization":
                return not hmac.compare_digest(value, self._bearer)
        return True

    def _auth_error(self, endpoint: str) -> Response:
        return self._error(
            endpoint, 401, "a bearer token is required: Authorization: Bearer TOKEN", {"WWW-Authenticate": "Bearer"}
        )

    async def _body(self, receive: Any, length: bytes | None) -> bytes:
        """The body, refused with 413 once it passes the limit (by its Content-Length or as it arrives)."""
        limit = self.options.max_body_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            raise ServeError(413, f"the body has {int(length):,} bytes; at most {limit:,} are taken")
        chunks = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise ServeError(413, f"the body passed {limit:,} bytes; at most {limit:,} are taken")
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _timeout(self, given: bytes | None) -> float:
        if given is None:
            return self.options.timeout_s
        text = given.decode("latin-1")
        try:
            value = float(text)
        except ValueError:
            raise ServeError(400, f"X-Request-Timeout: {text[:30]!r} is not a number of seconds") from None
        if not value >= 0:
            raise ServeError(400, f"X-Request-Timeout: must be >= 0 seconds, got {text[:30]!r}")
        return min(value, self.options.timeout_s)

    # ------------------------------------------------------------------ endpoints

    async def asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The ASGI app: POST /predict straight to its handler (the hot path, no framework objects), the rest
        through Starlette."""
        if scope["type"] == "http" and scope["path"] == "/predict" and scope["method"] == "POST":
            status, body, headers = await self._predict(scope["headers"], receive)
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        *headers,
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
        else:
            await self.app(scope, receive, send)

    async def predict(self, request: Request) -> Response:  # the same through Starlette (not the hot path)
        status, body, headers = await self._predict(request.scope["headers"], request.receive)
        return Response(
            body,
            status_code=status,
            media_type="application/json",
            headers={k.decode(): v.decode() for k, v in headers},
        )

    def _refusal(
        self, status: int, message: str, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        self.metrics.requests.labels("predict", str(status)).inc()
        return (
            status,
            orjson.dumps({"error": message}),
            [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        )

    async def _predict(
        self, headers: list[tuple[bytes, bytes]], receive: Any
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        t0 = time.perf_counter()
        self.last_arrival = time.monotonic()
        auth = length = timeout_header = None
        for key, value in headers:
            if key == b"authorization":
                auth = value
            elif key == b"content-length":
                length = value
            elif key == b"x-request-timeout":
                timeout_header = value
        if self._bearer is not None and (auth is None or not hmac.compare_digest(auth, self._bearer)):
            return self._refusal(
                401, "a bearer token is required: Authorization: Bearer TOKEN", {"WWW-Authenticate": "Bearer"}
            )
        if self.draining:
            return self._refusal(
                503, "the server is draining: it answers what it holds, then stops", {"Connection": "close"}
            )
        self.active += 1
        try:
            pool = self.pool
            if pool.schema is None:
                return self._refusal(503, "the model is not loaded yet")
            try:
                timeout = self._timeout(timeout_header)
                body = await self._body(receive, length)
                x, notes = pool.schema.parse(body)
                probs = await pool.submit(x, timeout)
            except ClientDisconnect:  # gone before its body was in: nobody to answer
                return self._refusal(499, "the client closed the connection")
            except BadRequest as exc:
                return self._refusal(exc.status, exc.message)
            except ServeError as exc:
                return self._refusal(exc.status, exc.message, exc.headers)
            if notes is not None and "unseen" in notes:
                for column, count in notes["unseen"].items():
                    self.metrics.unseen.labels(column).inc(count)
            answer = pool.schema.answer(probs, pool.version, notes)
            self.metrics.predict_ok.inc()
            self.metrics.latency.observe(time.perf_counter() - t0)
            # while draining the client reconnects, and meets a closed door once the drain is done
            return 200, answer, [(b"connection", b"close")] if self.draining else []
        finally:
            self.active -= 1
            if self.active == 0:
                self._idle.set()

    async def health(self, request: Request) -> Response:
        self.metrics.requests.labels("health", "200").inc()
        return Response(b'{"status":"up"}', media_type="application/json")

    async def ready(self, request: Request) -> Response:
        if self._unauthorised(request):
            return self._auth_error("ready")
        why = "the server is draining" if self.draining else self.pool.not_ready()
        body = {"ready": why is None, "model_version": self.pool.version, "workers": self.pool.workers_info()}
        if why is not None:
            body["reason"] = why
        status = 200 if why is None else 503
        self.metrics.requests.labels("ready", str(status)).inc()
        return Response(orjson.dumps(body), status_code=status, media_type="application/json")

    async def metrics_page(self, request: Request) -> Response:
        if self._unauthorised(request):
            return self._auth_error("metrics")
        m = self.metrics
        m.queue.set(self.pool.queued_rows)
        m.in_flight.set(self.pool.in_flight_rows)
        m.workers_ready.set(self.pool.ready_workers())
        m.requests.labels("metrics", "200").inc()
        return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    def _title(self) -> str:
        run = (self.pool.meta.get("source") or {}).get("run")
        return f"TrainDesk model {run}" if run else "TrainDesk model"

    async def openapi(self, request: Request) -> Response:
        if self._unauthorised(request):
            return self._auth_error("openapi")
        assert self.pool.schema is not None
        self.metrics.requests.labels("openapi", "200").inc()
        return Response(
            orjson.dumps(openapi(self.pool.schema, self._title(), self.pool.version)), media_type="application/json"
        )

    async def docs(self, request: Request) -> Response:
        if self._unauthorised(request):
            return self._auth_error("docs")
        assert self.pool.schema is not None
        self.metrics.requests.labels("docs", "200").inc()
        return HTMLResponse(docs_html(self.pool.schema, self._title(), self.pool.version, self.url))

    async def reload(self, request: Request) -> Response:
        if self._bearer is None:
            return self._error(
                "reload", 403, f"reload needs the server started with --token (or {TOKEN_ENV}) and that bearer token"
            )
        if self._unauthorised(request):
            return self._auth_error("reload")
        body = await request.body()
        source = None
        if body.strip():
            try:
                doc = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                return self._error("reload", 400, f"the body is not valid JSON: {exc}")
            if not isinstance(doc, dict) or not isinstance(doc.get("path", ""), str):
                return self._error("reload", 422, 'the body takes {"path": "RUN_DIR or MODEL_FILE"} or nothing')
            source = doc.get("path") or None
        try:
            result = await self.reload_model(source)
        except ServeError as exc:
            return self._error("reload", exc.status, exc.message)
        self.metrics.requests.labels("reload", "200").inc()
        return Response(orjson.dumps(result), media_type="application/json")

    async def reload_model(self, source: str | None = None) -> dict[str, Any]:
        try:
            result = await self.pool.reload(source)
        except ServeError as exc:
            self.metrics.reloads.labels("refused").inc()
            self.options.log(exc.message)
            raise
        self.metrics.reloads.labels("done").inc()
        self.describe_model()
        self.options.log(f"serve: now serving {result['model']} (version {result['version']})")
        return result

    def describe_model(self) -> None:
        """The model served, as the metrics page says it (version, file, run, epoch)."""
        source = self.pool.meta.get("source") or {}
        self.metrics.model.info(
            {
                "version": self.pool.version,
                "path": model_file(self.pool.source),
                "run": str(source.get("run") or ""),
                "epoch": str(source.get("epoch") or ""),
            }
        )

    # ------------------------------------------------------------------ life

    def start_watching(self) -> None:
        """Follow the run's best checkpoint (``--watch``) until :meth:`stop_watching`."""
        self._watch_task = asyncio.ensure_future(self.watch())

    def stop_watching(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()

    async def watch(self) -> None:
        """Follow the run's best checkpoint: a new one (another mtime or size) is reloaded."""
        best = RunDir(Path(self.options.source).expanduser()).best

        def stamp() -> tuple[int, int] | None:
            try:
                st = best.stat()
            except OSError:
                return None
            return (st.st_mtime_ns, st.st_size)

        seen = stamp()
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            now = stamp()
            if now is None or now == seen:
                continue
            await asyncio.sleep(0.2)  # let a writer finish (checkpoints are written atomically anyway)
            seen = stamp()
            try:
                await self.reload_model(None)
            except ServeError:
                pass  # logged; the served model is kept

    async def drain(self) -> None:
        """Refuse new requests (503), answer those held, until none is left and none came for a moment
        (clients told 503 stop sending), or the grace time ends."""
        self.draining = True
        deadline = time.monotonic() + max(DRAIN_GRACE_S, self.options.timeout_s + 1.0)
        while time.monotonic() < deadline:
            if self.active:
                self._idle.clear()
                try:
                    await asyncio.wait_for(self._idle.wait(), 0.5)
                except asyncio.TimeoutError:
                    pass
                continue
            quiet = time.monotonic() - self.last_arrival
            if quiet >= DRAIN_QUIET_S:
                return
            await asyncio.sleep(DRAIN_QUIET_S - quiet)


__all__ = ["ModelPool", "ServeConfigError", "ServeOptions", "Service", "StartError", "check_options"]
