"""Deploying ``traindesk serve --on ray``: the Ray Serve application of :mod:`core.services.serve.on_ray`'s
deployments, the command's process around it (deploy, say the URL, follow ``--watch``, delete on SIGTERM),
and :func:`build_app` for Ray's own tools (``serve run``, ``serve deploy``, KubeRay's ``RayService``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.services.serve.app import ServeConfigError, ServeOptions, StartError, check_options
from core.services.serve.handles import is_run_source, model_file
from core.services.serve.on_ray import HEALTH_PERIOD_S, HEALTH_TIMEOUT_S, Ingress, ModelReplica, RayOptions

DEPLOY_TIMEOUT_S = 180.0


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


def _proxy_address(host: str, port: int) -> tuple[str, int]:
    """Where the cluster's Ray Serve proxy listens: the address asked for, unless Serve already ran there
    with another (Ray keeps the first; one proxy per cluster)."""
    try:
        from ray.serve.context import _get_global_client  # Ray's own client of the running Serve instance

        client = _get_global_client()
        if client is None:
            return host, port
        return str(client.http_config.host or host), int(client.http_config.port)
    except Exception:  # an older or newer Ray without it: the address asked for
        return host, port


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
    with connected(ray_options.address, "serve"), _stop_signals() as stop:  # after ray.init, which sets its own
        from ray import serve

        serve.start(http_options={"host": options.host, "port": port})
        host, port = _proxy_address(options.host, port)
        if (host, port) != (options.host, options.port or port):
            options.log(
                f"serve: Ray Serve on this cluster already listens on {host}:{port} (one proxy per cluster): serving there"
            )
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}"
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
