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

The command's process deploys the application, prints its URL, follows ``--watch`` (each new
``best.pt`` rolls out as a new version of the model deployment, replica by replica) and, on SIGTERM or
Ctrl-C, deletes the application (Ray lets the replicas answer what they hold) and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.services.serve.app import ServeConfigError, ServeOptions, Service, StartError, check_options
from core.services.serve.batching import Limits, ServeError
from core.services.serve.handles import is_run_source, model_file, model_version
from core.services.serve.schema import ModelSchema

APP_NAME = "traindesk"
HEALTH_PERIOD_S = 2.0  # how often Ray asks a model replica for its health
HEALTH_TIMEOUT_S = 10.0  # a canary still unanswered after this long: the replica is unhealthy, and replaced
STATUS_EVERY_S = 1.0  # how often the ingress asks the model replicas for a canary answer (its /ready)
DEPLOY_TIMEOUT_S = 180.0


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
        self.retries = 0  # batches sent again after their replica died
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
            self.retries += 1
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
        """Rows ``x`` batched with others (a request larger than a batch goes alone); 429 when the queue is
        full, 504 at the deadline, 503 when no replica answers."""
        n = len(x)
        if self._queued + n > self.limits.queue_rows:
            raise ServeError(429, f"the queue is full ({self._queued} rows wait)", {"Retry-After": "1"})
        self._queued += n
        try:
            work = self._call(x) if n > self.limits.max_batch else self._batched(x)
            answer = await asyncio.wait_for(work, timeout_s)
        except asyncio.TimeoutError:
            raise ServeError(504, f"no answer within {timeout_s:g} s") from None
        except ServeError:
            raise
        except Exception as exc:
            text = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise ServeError(503, f"the model replicas could not answer: {text}") from None
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


# ---------------------------------------------------------------------------- the command's process


def _file_version(path: str) -> str:
    """A model file's deployment version: its size, time and name (a new best.pt is a new version)."""
    st = Path(path).stat()
    return hashlib.sha256(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]


def _free_port(host: str) -> int:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _replica_cpus(ray_options: RayOptions, replicas: int) -> float:
    """Each model replica's CPU share: one (it computes on one thread; ``cpus_per_worker``), less where the
    cluster has fewer CPUs than replicas (one machine), so that every replica asked for starts."""
    import ray

    total = float(ray.cluster_resources().get("CPU", 1.0))
    return max(0.1, min(ray_options.cpus_per_worker, total / max(1, replicas)))


def _application(options: ServeOptions, ray_options: RayOptions, path: str) -> Any:
    """The Ray Serve application: the ingress in front of the model deployment serving ``path``."""
    from ray import serve

    scaling: dict[str, Any] = {}
    if ray_options.min_workers is not None or ray_options.max_workers is not None:
        low = ray_options.min_workers if ray_options.min_workers is not None else 1
        high = ray_options.max_workers if ray_options.max_workers is not None else max(low, options.workers)
        scaling = {
            "autoscaling_config": {
                "min_replicas": low,
                "initial_replicas": min(max(options.workers, low), high),
                "max_replicas": high,
                "target_ongoing_requests": 2,
            }
        }
    else:
        scaling = {"num_replicas": options.workers}
    bounds = ray_options.max_workers or options.workers
    model = serve.deployment(
        name="TrainDeskModel",
        ray_actor_options={"num_cpus": _replica_cpus(ray_options, bounds)},
        health_check_period_s=HEALTH_PERIOD_S,
        health_check_timeout_s=HEALTH_TIMEOUT_S,
        max_ongoing_requests=4,
        graceful_shutdown_timeout_s=max(5.0, options.timeout_s),
        **scaling,
    )(ModelReplica)
    replica_options = replace(options, watch=False, die_with=None, port=0)
    ingress = serve.deployment(
        name="TrainDeskIngress",
        num_replicas=1,
        ray_actor_options={"num_cpus": 0},
        max_ongoing_requests=max(256, options.queue),
        graceful_shutdown_timeout_s=max(5.0, options.timeout_s + 1.0),
    )(serve.ingress()(Ingress))
    return ingress.bind(model.bind(path, _file_version(path)), replica_options, bounds)  # a new file: a new version


def _deploy(options: ServeOptions, ray_options: RayOptions, path: str) -> None:
    from ray import serve

    try:
        serve.run(_application(options, ray_options, path), name=ray_options.app_name, route_prefix="/")
    except Exception as exc:
        raise StartError(_deploy_failure(exc, path)) from None


def _deploy_failure(exc: BaseException, path: str) -> str:
    text = " ".join(str(exc).split())
    mark = text.find("serve --on ray: ")
    if mark >= 0:  # our own one line, raised in a replica
        return text[mark:].split(" Traceback", 1)[0].rstrip(".'\" ")
    return f"serve --on ray: {path}: the application did not start: {text[-300:] or type(exc).__name__}"


def _wait_ready(url: str, token: str | None, timeout_s: float) -> None:
    """Until /ready says 200 through Ray's proxy (the ingress has met a replica that answers the canary)."""
    import urllib.error
    import urllib.request

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + timeout_s
    why = "no answer"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(urllib.request.Request(f"{url}/ready", headers=headers), timeout=5) as r:
                if r.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            why = exc.read().decode(errors="replace")[:200]
        except OSError as exc:
            why = str(exc)[:200]
        time.sleep(0.25)
    raise StartError(f"serve --on ray: the application did not get ready within {timeout_s:.0f} s: {why}")


@contextlib.contextmanager
def _stop_signals() -> Iterator[threading.Event]:
    """Ctrl-C, SIGTERM and SIGHUP (the terminal closed; not under ``nohup``) set the event."""
    stop = threading.Event()
    sigs = [signal.SIGINT, signal.SIGTERM]
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        sigs.append(signal.SIGHUP)
    before = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in sigs}
    try:
        yield stop
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def serve_on_ray(options: ServeOptions, ray_options: RayOptions, on_ready: Callable[[str], None] | None = None) -> None:
    """Deploy the model on the Ray cluster, say its URL, serve until SIGTERM / Ctrl-C, then delete the
    application. StartError / ServeConfigError / UserError say why it could not start."""
    from core.host.lifeline import alive
    from core.services.ray_cluster import connected

    check_options(options)
    for name, value in (("--min-workers", ray_options.min_workers), ("--max-workers", ray_options.max_workers)):
        if value is not None and value < (0 if name == "--min-workers" else 1):
            raise ServeConfigError(f"serve: {name} must be at least {0 if name == '--min-workers' else 1}, got {value}")
    low, high = ray_options.min_workers, ray_options.max_workers
    if low is not None and high is not None and low > high:
        raise ServeConfigError(f"serve: --min-workers {low} is above --max-workers {high}")
    path = str(Path(model_file(options.source)).expanduser().resolve())
    port = options.port or _free_port(options.host)
    shown = f"[{options.host}]" if ":" in options.host else options.host
    url = f"http://{shown}:{port}"
    with connected(ray_options.address, "serve"), _stop_signals() as stop:  # after ray.init, which sets its own
        from ray import serve

        serve.start(http_options={"host": options.host, "port": port})
        try:
            _deploy(options, ray_options, path)
            _wait_ready(url, options.token or os.environ.get("TRAINDESK_SERVE_TOKEN"), DEPLOY_TIMEOUT_S)
            if on_ready is not None:
                on_ready(url)
            version = _file_version(path)
            while not stop.wait(1.0):
                if options.die_with is not None and not alive(options.die_with):
                    options.log(f"serve: the process that started this server (pid {options.die_with}) is gone")
                    break
                if options.watch and is_run_source(Path(options.source).expanduser()):
                    now = str(Path(model_file(options.source)).resolve())
                    with contextlib.suppress(OSError):
                        if _file_version(now) != version:
                            time.sleep(0.2)  # let the writer finish (checkpoints are written atomically anyway)
                            version, path = _file_version(now), now
                            options.log(f"serve: rolling out {now} (version {version}) replica by replica")
                            try:
                                _deploy(options, ray_options, path)
                            except StartError as exc:
                                options.log(str(exc))
            options.log("serve: stopping: deleting the application (its replicas answer what they hold)")
        finally:
            with contextlib.suppress(Exception):
                serve.delete(ray_options.app_name)


def build_app(args: dict[str, Any]) -> Any:
    """The application for Ray's own deployment tools (``serve run``, ``serve deploy``, KubeRay's
    ``RayService``): ``import_path: core.services.serve.on_ray:build_app`` with ``args`` naming ``source``
    and, as the command's options, ``workers``, ``min_workers``, ``max_workers``, ``max_batch``,
    ``max_wait_ms``, ``queue``, ``timeout_s`` and ``token``."""
    known = {
        "source",
        "workers",
        "min_workers",
        "max_workers",
        "max_batch",
        "max_wait_ms",
        "queue",
        "timeout_s",
        "token",
    }
    unknown = sorted(set(args) - known)
    if unknown or "source" not in args:
        raise ServeConfigError(f"serve: build_app takes {sorted(known)} (source required), got {sorted(args)}")
    get = args.get
    options = ServeOptions(
        str(args["source"]),
        workers=int(get("workers", 2)),
        max_batch=int(get("max_batch", 64)),
        max_wait_ms=float(get("max_wait_ms", 0.0)),
        queue=int(get("queue", 1024)),
        timeout_s=float(get("timeout_s", 10.0)),
        token=get("token"),
    )
    check_options(options)
    low, high = get("min_workers"), get("max_workers")
    ray_options = RayOptions(None, None if low is None else int(low), None if high is None else int(high))
    return _application(options, ray_options, str(Path(model_file(options.source)).expanduser().resolve()))
