"""traindesk serve --on ray: the model deployed on the session's local Ray cluster (tests/ray_cluster.py) answers
as the local server does, loses no request when a model replica is SIGKILLed under load, and leaves no
application behind on SIGTERM. Traffic goes to 127.0.0.1 only."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

pytest.importorskip("ray", reason="Ray is an extra: pip install 'traindesk[ray]'")
from tests.cli_run import core_env, run_core
from tests.core.services.serve.test_serve import (  # the guard: the suite's, less the module's shared server (_SHARED)
    _SHARED,
    LOAD_S,
    Server,
    _start,
    _stop,
    local_probs,
    no_leftover_processes,  # noqa: F401  # a fixture (autouse): imported, it guards this module's tests too
    run_load,
    serving,
)

ROOT = Path(__file__).resolve().parents[4]
MODEL_REPLICA = "ServeReplica:traindesk:TrainDeskModel"
pytestmark = pytest.mark.timeout(900)


def model_replicas() -> list[int]:
    """The model deployment's replica processes (Ray titles them by application and deployment)."""
    pids = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(MODEL_REPLICA in part for part in p.info["cmdline"] or []):
                pids.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return sorted(pids)


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.trained_run import make_run

    return make_run(tmp_path_factory.mktemp("ray-runs"))


@pytest.fixture(scope="module")
def ray_server(ray_cluster: str, digits_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("ray-serve")
    server = _start(digits_run, tmp, "--on", "ray", "--ray-address", ray_cluster, "--workers", "2")
    tree = [psutil.Process(server.proc.pid), *psutil.Process(server.proc.pid).children(recursive=True)]
    _SHARED.update(p.pid for p in tree)
    try:
        yield server
    finally:
        rc = _stop(server)
        _, alive = psutil.wait_procs(tree, timeout=10)
        _SHARED.clear()
        assert rc == 0 and not alive, (rc, alive)


def _rows(n: int) -> np.ndarray:
    from sklearn.datasets import load_digits

    return load_digits().data[:n].astype(np.float32).reshape(n, 1, 8, 8)


def test_answers_errors_and_openapi_equal_the_local_servers(
    ray_server: Server, digits_run: Path, tmp_path: Path
) -> None:
    x = _rows(12)
    bodies = [
        {"inputs": x.reshape(12, -1).tolist()},
        {"inputs": [[1.0, 2.0]]},  # the wrong number of values
        {"rows": "nope"},
    ]
    with serving(digits_run, tmp_path, "--workers", "1") as local:
        for body in bodies:
            on_ray, here = ray_server.post("/predict", json=body), local.post("/predict", json=body)
            assert (on_ray.status_code, on_ray.json()) == (here.status_code, here.json())
        bad = b"{not json"
        on_ray, here = ray_server.post("/predict", content=bad), local.post("/predict", content=bad)
        assert (on_ray.status_code, on_ray.json()) == (here.status_code, here.json()) and on_ray.status_code == 400
        assert ray_server.get("/openapi.json").json() == local.get("/openapi.json").json()
    got = ray_server.post("/predict", json=bodies[0]).json()["predictions"]
    probs = np.array([list(p["probabilities"].values()) for p in got])
    model = digits_run / "checkpoints" / "last.pt"
    np.testing.assert_allclose(probs, local_probs(model, x), atol=1e-6)
    ready = ray_server.get("/ready")
    assert ready.status_code == 200 and [w["state"] for w in ready.json()["workers"]] == ["RUNNING", "RUNNING"]
    metrics = ray_server.get("/metrics").text
    assert 'traindesk_serve_requests_total{endpoint="predict",status="200"}' in metrics


def test_a_model_replica_killed_under_load_loses_no_request(ray_server: Server) -> None:
    before = model_replicas()
    assert len(before) == 2, before
    victim = before[0]

    def kill() -> None:
        time.sleep(max(1.0, LOAD_S / 3))
        os.kill(victim, signal.SIGKILL)

    result = run_load(ray_server.url, max(LOAD_S, 6.0), clients=16, during=kill)
    assert result.errors == []
    assert set(result.statuses) == {200}, result.statuses
    assert result.total > 16
    t0 = time.monotonic()
    deadline = t0 + 60
    while time.monotonic() < deadline:
        now = model_replicas()
        if ray_server.get("/ready").status_code == 200 and len(now) == 2 and victim not in now:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"not ready again within 60 s: {ray_server.get('/ready').text}")


def test_sigterm_deletes_the_application_and_exits_0(ray_server: Server) -> None:
    assert model_replicas()
    ray_server.proc.send_signal(signal.SIGTERM)
    assert ray_server.proc.wait(120) == 0
    deadline = time.monotonic() + 60
    while model_replicas() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert model_replicas() == []
    with pytest.raises(httpx.HTTPError):
        r = httpx.get(ray_server.url + "/ready", timeout=5)
        r.raise_for_status()  # Ray's proxy, if it stays, routes nothing there


def test_an_address_nobody_answers_is_one_line_within_30_s(digits_run: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nobody listens there
    env = core_env()
    t0 = time.monotonic()
    cmd = ["serve", str(digits_run), "--on", "ray", "--ray-address", f"127.0.0.1:{port}"]
    done = run_core(*cmd, timeout=60, env=env, cwd=ROOT)
    assert time.monotonic() - t0 < 30
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "ray status" in lines[0]


def test_ray_s_own_tools_get_the_same_application_with_their_arguments_checked(digits_run: Path) -> None:
    from core.services.serve.app import ServeConfigError
    from core.services.serve.ray_deploy import build_app

    with pytest.raises(ServeConfigError, match="source required"):
        build_app({"workers": 2})
    with pytest.raises(ServeConfigError, match="takes"):
        build_app({"source": str(digits_run), "replicas": 2})
    with pytest.raises(ServeConfigError, match="--workers must be at least 1"):
        build_app({"source": str(digits_run), "workers": 0})


def test_watch_rolls_a_new_best_out_as_a_new_version_failing_no_request(ray_cluster: str, tmp_path: Path) -> None:
    from tests.trained_run import add_best, make_run

    run = make_run(tmp_path / "runs", steps=10)
    # a deadline no loaded machine reaches: a request the roll-out failed is what this checks, not a slow one
    server = _start(
        run, tmp_path, "--on", "ray", "--ray-address", ray_cluster, "--workers", "1", "--watch", "--timeout-s", "300"
    )
    try:
        first = server.wait_ready()["model_version"]
        result = run_load(server.url, 12.0, clients=8, during=lambda: (time.sleep(1.0), add_best(run)))
        deadline = time.monotonic() + 120
        while server.ready_info()["model_version"] == first and time.monotonic() < deadline:
            time.sleep(0.5)
        assert server.ready_info()["model_version"] != first
        assert result.errors == [] and set(result.statuses) == {200}, result.statuses
        assert "rolling out" in server.stderr()
    finally:
        assert _stop(server) == 0
