"""``traindesk serve SOURCE --on ray``: the served model as a Ray Serve application on a cluster.

Two deployments make the application:

- ``TrainDeskModel`` (``--workers`` replicas, or autoscaled between ``--min-workers`` and ``--max-workers``):
  the model loaded as ``predict`` loads it, computing on one thread beside the replica's event loop.
  Its ``check_health`` runs the canary row through the model itself, so a replica whose model stalls
  fails Ray's health check instead of passing a ping.
- ``TrainDeskIngress``: the local server's HTTP app itself (:class:`core.services.serve.app.Service`):
  the same parsing, answers, errors, OpenAPI page, ``/metrics``, token and drain. Its pool
  (:class:`RayPool`) gathers requests with ``@serve.batch`` (rows counted against ``--max-batch``,
  ``--max-wait-ms``) and sends each batch to a model replica; a batch whose replica dies on the way is
  sent once more, to another.

:mod:`core.services.serve.ray_deploy` builds the application of these and deploys it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.services.serve.app import ServeOptions, Service
from core.services.serve.batching import Limits, ServeError
from core.services.serve.handles import model_version
from core.services.serve.schema import ModelSchema

APP_NAME = "traindesk"
HEALTH_PERIOD_S = 2.0  # how often Ray asks a model replica for its health
HEALTH_TIMEOUT_S = 10.0  # a canary still unanswered after this long: the replica is unhealthy, and replaced
STATUS_EVERY_S = 1.0  # how often the ingress asks the model replicas for a canary answer (its /ready)


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide on Ray: the cluster's address (None: ``RAY_ADDRESS``, else a Ray of this
    machine's own), and the model replicas' bounds when they autoscale."""

    address: str | None = None
    min_workers: int | None = None
    max_workers: int | None = None
    app_name: str = APP_NAME
    cpus_per_worker: float = 1.0


# ---------------------------------------------------------------------------- the model replicas


class ModelReplica:
    """One model replica: the model loaded once, one compute thread, a health check that predicts."""

    def __init__(self, model_path: str, file_version: str = "") -> None:
        from core.services.formats import load_predictor

        self.file_version = file_version  # a new one makes Serve roll out new replicas

        if not Path(model_path).exists():
            raise FileNotFoundError(
                f"serve --on ray: {model_path} is not on node {os.uname().nodename}: the model's path must be "
                "reachable from every node of the cluster (a shared folder), or give an export folder that is"
            )
        self.predictor = load_predictor(Path(model_path), threads=1)
        self.meta = {k: v for k, v in self.predictor.meta.items() if k != "export"}
        self.schema = ModelSchema.from_meta(self.meta)
        self.version = model_version(self.meta)
        self._compute = ThreadPoolExecutor(1, thread_name_prefix="traindesk-model")
        out = self.predictor.probabilities(self.schema.canary())
        if not self.schema.answers_right(np.asarray(out, dtype=np.float32)):
            raise RuntimeError(f"serve --on ray: {model_path}: the canary row got {np.asarray(out).tolist()[:1]}")

    def describe(self) -> dict[str, Any]:
        return {"meta": self.meta, "version": self.version, "pid": os.getpid(), "node": os.uname().nodename}

    async def predict(self, x: np.ndarray) -> tuple[np.ndarray, str]:
        """Probabilities of rows ``x`` (float32), and the version of the model that gave them."""
        loop = asyncio.get_running_loop()
        probs = await loop.run_in_executor(self._compute, self._probabilities, x)
        return probs, self.version

    def _probabilities(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(self.predictor.probabilities(x), dtype=np.float32)

    async def check_health(self) -> None:
        """The canary row through the model, on the thread that computes: a stalled model fails it."""
        loop = asyncio.get_running_loop()
        out = await asyncio.wait_for(
            loop.run_in_executor(self._compute, self._probabilities, self.schema.canary()), HEALTH_TIMEOUT_S
        )
        if not self.schema.answers_right(out):
            raise RuntimeError(f"the canary row got {out.tolist()[:1]}")


# ---------------------------------------------------------------------------- the HTTP ingress


def _replica_gone(exc: BaseException) -> bool:
    """Whether a call failed because its replica died or went away (the batch can go to another)."""
    from ray import exceptions as rex

    return isinstance(exc, (rex.RayActorError, rex.ActorUnavailableError))


class RayPool:
    """The ingress's pool: requests batched by ``@serve.batch`` and sent to the model deployment."""

    def __init__(self, handle: Any, source: str, limits: Limits, replicas: int) -> None:
        from ray import serve

        self._handle = handle
        self.source = source
        self.limits = limits
        self.on_batch: Callable[[int], None] = lambda rows: None  # the service's metrics, once it has them
        self.schema: ModelSchema | None = None
        self.meta: dict[str, Any] = {}
        self.version = ""
        self._queued = 0
        self._in_flight = 0
        self._why: str | None = "the model replicas have not answered yet"
        self._replicas: list[dict[str, Any]] = []
        self._status_task: asyncio.Task[None] | None = None
        self._batched = serve.batch(
            max_batch_size=limits.max_batch,
            batch_wait_timeout_s=limits.max_wait_s,
            max_concurrent_batches=max(1, replicas),
            batch_size_fn=lambda xs: sum(len(x) for x in xs),
        )(self._many)

    async def start(self) -> None:
        described = await self._handle.describe.remote()
        self._take(described)
        self._status_task = asyncio.ensure_future(self._follow())

    async def close(self) -> None:
        if self._status_task is not None:
            self._status_task.cancel()

    def _take(self, described: dict[str, Any]) -> None:
        self.meta = described["meta"]
        self.version = described["version"]
        schema = ModelSchema.from_meta(self.meta)
        if self.schema is None or self.schema.difference(schema) is None:
            self.schema = schema

    async def _call(self, x: np.ndarray) -> tuple[np.ndarray, str]:
        """Rows to one model replica; sent once more (to another) when that replica dies."""
        try:
            return await self._handle.predict.remote(x)
        except Exception as exc:
            if not _replica_gone(exc):
                raise
            return await self._handle.predict.remote(x)

    async def _many(self, xs: list[np.ndarray]) -> list[tuple[np.ndarray, int]]:
        """One batch: the requests' rows together to one replica, then each request's share."""
        rows = sum(len(x) for x in xs)
        self._in_flight += rows
        try:
            probs, version = await self._call(xs[0] if len(xs) == 1 else np.concatenate(xs))
        finally:
            self._in_flight -= rows
        self.version = version
        self.on_batch(rows)
        out, lo = [], 0
        for x in xs:
            out.append((probs[lo : lo + len(x)], rows))
            lo += len(x)
        return out

    async def submit(self, x: np.ndarray, timeout_s: float) -> np.ndarray:
        """Rows ``x`` batched with others (a request larger than a batch goes alone); 413/429 when the queue
        cannot take them, 504 at the deadline, 500 when the model fails on them (or its replica died twice)."""
        n = len(x)
        limit = self.limits.queue_rows
        if n > limit:  # the local queue's words, for the same requests
            raise ServeError(413, f"the request has {n} rows; at most {limit} fit in the queue")
        if self._queued + n > limit:
            raise ServeError(
                429, f"the queue is full ({self._queued} of {limit} rows waiting); retry later", {"Retry-After": "1"}
            )
        self._queued += n
        try:
            work = self._call(x) if n > self.limits.max_batch else self._batched(x)
            answer = await asyncio.wait_for(work, timeout_s)
        except asyncio.TimeoutError:
            raise ServeError(504, f"the deadline of {timeout_s:g} s passed while the model computed it") from None
        except ServeError:
            raise
        except Exception as exc:  # the local pool's words: a process lost twice, or the model's own error
            if _replica_gone(exc):
                raise ServeError(500, "the model process crashed on this input") from None
            cause = getattr(exc, "cause", None) or exc
            text = " ".join(str(cause).split())[:200] or type(cause).__name__
            raise ServeError(500, f"the model failed on this input: {text}") from None
        finally:
            self._queued -= n
        return answer[0] if isinstance(answer[0], np.ndarray) else np.asarray(answer[0])

    async def _follow(self) -> None:
        """Keep /ready true: a canary through a replica every second, and the deployment's replicas."""
        while True:
            try:
                described = await asyncio.wait_for(self._handle.describe.remote(), HEALTH_TIMEOUT_S)
                self._take(described)
                assert self.schema is not None
                probs, _ = await asyncio.wait_for(self._call(self.schema.canary()), HEALTH_TIMEOUT_S)
                self._why = None if self.schema.answers_right(probs) else f"the canary row got {probs.tolist()[:1]}"
            except Exception as exc:
                self._why = "no model replica answered the canary row: " + (
                    " ".join(str(exc).split())[:160] or type(exc).__name__
                )
            self._replicas = _replica_states()
            if self._why is None and any(r["state"] != "RUNNING" for r in self._replicas):
                starting = [r for r in self._replicas if r["state"] != "RUNNING"]
                self._why = f"{len(starting)} model replica(s) {starting[0]['state'].lower()}"
            await asyncio.sleep(STATUS_EVERY_S)

    def not_ready(self) -> str | None:
        return self._why

    def workers_info(self) -> list[dict[str, Any]]:
        return list(self._replicas)

    def ready_workers(self) -> int:
        return sum(1 for r in self._replicas if r["state"] == "RUNNING")

    @property
    def queued_rows(self) -> int:
        return self._queued

    @property
    def in_flight_rows(self) -> int:
        return self._in_flight

    async def reload(self, source: str | None = None) -> dict[str, Any]:
        raise ServeError(
            409,
            "on Ray a new model rolls out as a new deployment version: serve a run directory with --watch, "
            "or run `traindesk serve --on ray` again with the new model",
        )


def _replica_states() -> list[dict[str, Any]]:
    """The model deployment's replicas by state, as Ray Serve's controller counts them."""
    from ray import serve

    try:
        status = serve.status()
    except Exception:
        return []
    out: list[dict[str, Any]] = []
    for app in status.applications.values():
        for name, dep in app.deployments.items():
            if name != "TrainDeskModel":
                continue
            for state, count in sorted(dep.replica_states.items()):
                out.extend({"worker": len(out), "state": str(state)} for _ in range(count))
    return out


class Ingress:
    """The ingress replica: the local server's :class:`Service`, over a :class:`RayPool` that it starts with
    its first request (the deploying command's first look at /ready)."""

    def __init__(self, model: Any, options: ServeOptions, replicas: int) -> None:
        self.pool = RayPool(model, options.source, options.limits(), replicas)
        self.service = Service(options, pool=self.pool)
        self.pool.on_batch = self.service.metrics.batch_done
        self._started: asyncio.Task[None] | None = None

    def __serve_build_asgi_app__(self) -> Any:
        return _AsgiApp(self)

    async def asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self._started is None or (self._started.done() and self._started.exception() is not None):
            self._started = asyncio.ensure_future(self._start())
        if not self._started.done():
            with contextlib.suppress(Exception):  # said by /ready (not ready) until a start succeeds
                await asyncio.wait_for(asyncio.shield(self._started), HEALTH_TIMEOUT_S)
        await self.service.asgi(scope, receive, send)

    async def _start(self) -> None:
        await self.pool.start()
        self.service.describe_model()


class _AsgiApp:
    """The ingress as an ASGI 3 object (a bound method reads to uvicorn as ASGI 2)."""

    def __init__(self, ingress: Ingress) -> None:
        self.ingress = ingress

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.ingress.asgi(scope, receive, send)
