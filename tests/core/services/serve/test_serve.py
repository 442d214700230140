"""traindesk serve: real servers on 127.0.0.1 (a free port each), real HTTP clients, bounded in time.

The load tests run for TRAINDESK_SERVE_LOAD_S seconds each (default 3; the
release check runs them for 20).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import random
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import numpy as np
import psutil
import pytest

from tests.cli_run import core_env, run_core, start_core
from tests.trained_run import add_best, make_run

ROOT = Path(__file__).resolve().parents[4]
LOAD_S = float(os.environ.get("TRAINDESK_SERVE_LOAD_S", "3"))
CLIENTS = 64
START_TIMEOUT_S = 120


# ----------------------------------------------------------------------------- a server as a user starts it


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str
    stderr_path: Path
    token: str | None = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def get(self, path: str, **kw: Any) -> httpx.Response:
        kw.setdefault("headers", self.headers())
        return httpx.get(self.url + path, timeout=30, **kw)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        kw.setdefault("headers", self.headers())
        return httpx.post(self.url + path, timeout=30, **kw)

    def metric(self, name: str, labels: str = "") -> float:
        text = self.get("/metrics").text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + (("{" + labels) if labels else "")) and not line.startswith("#"):
                head, value = line.rsplit(" ", 1)
                if head == name or head.startswith(name + "{"):
                    total += float(value)
        return total

    def ready_info(self) -> dict[str, Any]:
        return self.get("/ready").json()

    def wait_ready(self, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.get("/ready")
            if r.status_code == 200:
                return r.json()
            time.sleep(0.1)
        raise AssertionError(f"not ready within {timeout} s: {self.get('/ready').text}")

    def stderr(self) -> str:
        return self.stderr_path.read_text()


def _start(source: Path | str, tmp: Path, *args: str, token: str | None = None) -> Server:
    env = core_env()
    env.pop("TRAINDESK_SERVE_TOKEN", None)
    cmd = ["serve", str(source), "--port", "0", *args]
    if token:
        cmd += ["--token", token]
    err = tmp / f"serve-{time.monotonic_ns()}.err"
    proc = start_core(*cmd, stdout=subprocess.PIPE, stderr=err.open("w"), text=True, env=env, cwd=ROOT)
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not any(line.startswith("http://") for line in lines):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(f"serve did not start (exit {proc.returncode}): {err.read_text()}")
        time.sleep(0.05)
    return Server(proc, lines[-1], err, token)


def _stop(server: Server) -> int:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
    try:
        return server.proc.wait(60)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(server.proc.pid).children(recursive=True):
            child.kill()
        server.proc.kill()
        server.proc.wait()
        raise


@contextlib.contextmanager
def serving(source: Path | str, tmp: Path, *args: str, token: str | None = None) -> Iterator[Server]:
    server = _start(source, tmp, *args, token=token)
    try:
        yield server
    finally:
        _stop(server)


# ----------------------------------------------------------------------------- load


@dataclass
class LoadResult:
    statuses: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    wrong: int = 0

    @property
    def total(self) -> int:
        return sum(self.statuses.values())


def run_load(
    url: str,
    seconds: float,
    clients: int = CLIENTS,
    headers: dict[str, str] | None = None,
    stop_on: tuple[int, ...] = (),
    during: Any = None,
    rows: np.ndarray | None = None,
    expected: np.ndarray | None = None,
) -> LoadResult:
    """``clients`` closed-loop clients, one row per request, for ``seconds``; ``during()`` runs meanwhile in a
    thread. A client stops at a status in ``stop_on`` or at a refused connection (the server went away)."""
    result = LoadResult()
    samples = rows if rows is not None else np.random.default_rng(0).uniform(0, 16, (32, 64)).astype(np.float32)
    bodies = [json.dumps({"inputs": [s.reshape(-1).tolist()]}).encode() for s in samples]
    send_headers = {"Content-Type": "application/json", **(headers or {})}

    async def client(k: int, http: aiohttp.ClientSession, until: float) -> None:
        i = k
        while time.monotonic() < until:
            i = (i + 1) % len(bodies)
            try:
                async with http.post(url + "/predict", data=bodies[i], headers=send_headers) as r:
                    status = r.status
                    answer = await r.read()
            except aiohttp.ClientConnectorError:
                return  # the server went away: no request was sent
            except aiohttp.ClientError as exc:
                result.errors.append(f"{type(exc).__name__}: {exc}")
                return
            result.statuses[status] = result.statuses.get(status, 0) + 1
            if status == 200 and expected is not None:
                got = json.loads(answer)["predictions"][0]["probabilities"]
                if not np.allclose(list(got.values()), expected[i], atol=1e-5):
                    result.wrong += 1
            if status in stop_on:
                return

    async def main() -> None:
        connector = aiohttp.TCPConnector(limit=clients)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            until = time.monotonic() + seconds
            await asyncio.gather(*(client(k, http, until) for k in range(clients)))

    side = threading.Thread(target=during) if during is not None else None
    if side is not None:
        side.start()
    asyncio.run(main())
    if side is not None:
        side.join(60)
    return result


# ----------------------------------------------------------------------------- models


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("serve-runs"))


SLOW_OR_CRASH = '''
import os, time
import torch
from torch import nn


class Model(nn.Module):
    """A small MLP that, in eval mode, crashes its process on a huge value and sleeps 1 s on a hugely negative one."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(n_in, n_out))

    def forward(self, x):
        if not self.training:
            if bool((x > 1e5).any()):
                os._exit(3)
            if bool((x < -1e5).any()):
                time.sleep(1.0)
        return self.net(x)


def build(input_shape, num_classes):
    n = 1
    for s in input_shape:
        n *= s
    return Model(n, num_classes)
'''


@pytest.fixture(scope="module")
def odd_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("serve-odd")
    path = root / "odd_model.py"
    path.write_text(SLOW_OR_CRASH)
    return make_run(root / "runs", kind=f"custom:{path}:build", steps=3)


def local_probs(model: Path, x: np.ndarray) -> np.ndarray:
    from core.services.predict import load_predictor

    return load_predictor(model, threads=1).probabilities(x.astype(np.float32))


def png(width: int, height: int, mode: str = "L") -> str:
    from PIL import Image

    img = Image.fromarray(np.random.default_rng(1).integers(0, 255, (height, width), dtype=np.uint8), mode)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def gif(width: int, height: int) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (width, height), 128).save(buf, format="GIF")
    return base64.b64encode(buf.getvalue()).decode()


def one_line_error(r: httpx.Response, status: int, *words: str) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    message = r.json()["error"]
    assert "\n" not in message and message
    for word in words:
        assert word in message, message
    return message


# ----------------------------------------------------------------------------- one digits server, many checks


_SHARED: set[int] = set()  # the module's server and its processes: they outlive single tests by design


@pytest.fixture(autouse=True)
def no_leftover_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """The suite's guard (tests/conftest.py), less the module's shared server, which its fixture checks."""
    yield
    live_descendants = next(
        p
        for p in request.config.pluginmanager.get_plugins()
        if hasattr(p, "live_descendants") and hasattr(p, "no_leftover_processes")
    ).live_descendants
    deadline = time.monotonic() + 10
    left = [p for p in live_descendants() if p not in _SHARED]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in live_descendants() if p not in _SHARED]
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"test left {len(left)} child process(es) running: {left}"


@pytest.fixture(scope="module")
def digits_server(digits_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = _start(digits_run, tmp_path_factory.mktemp("serve-log"), "--workers", "2")

    def tree() -> list[psutil.Process]:
        return [psutil.Process(server.proc.pid), *psutil.Process(server.proc.pid).children(recursive=True)]

    def share() -> None:  # restarted workers are new processes: shared too
        _SHARED.update(p.pid for p in tree())

    share()
    server.share = share  # type: ignore[attr-defined]  # the fixture's own handle: share the restarted workers
    try:
        yield server
    finally:
        procs = tree() if server.proc.poll() is None else []
        assert _stop(server) == 0
        gone, alive = psutil.wait_procs(procs, timeout=10)
        _SHARED.clear()
        assert not alive, f"the server left {alive}"


def test_predict_round_trip_matches_predict(digits_server: Server, digits_run: Path) -> None:
    server = digits_server
    assert server.get("/health").json() == {"status": "up"}
    info = server.wait_ready()
    assert len(info["workers"]) == 2 and all(w["canary"] for w in info["workers"])
    x = np.random.default_rng(3).uniform(0, 16, (5, 1, 8, 8)).astype(np.float32)
    want = local_probs(digits_run, x)
    classes = [str(c) for c in range(10)]
    nested = server.post("/predict", json={"inputs": x.tolist()})
    flat = server.post("/predict", json={"inputs": x.reshape(5, -1).tolist()})
    features = [f"pixel_{i}_{j}" for i in range(8) for j in range(8)]
    rows = []
    for sample in x.reshape(5, -1).tolist():
        pairs = list(zip(features, sample))
        random.Random(0).shuffle(pairs)  # any column order
        rows.append(dict(pairs))
    by_name = server.post("/predict", json={"rows": rows})
    for r in (nested, flat, by_name):
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model_version"] == info["model_version"]
        got = np.array([[p["probabilities"][c] for c in classes] for p in body["predictions"]])
        assert np.allclose(got, want, atol=1e-6)
        assert [p["class"] for p in body["predictions"]] == [classes[k] for k in want.argmax(axis=1)]
    image = server.post("/predict", json={"images": [png(8, 8)]})
    assert image.status_code == 200 and len(image.json()["predictions"]) == 1


def test_openapi_and_docs_come_from_the_schema(digits_server: Server) -> None:
    spec = digits_server.get("/openapi.json").json()
    request = spec["components"]["schemas"]["PredictRequest"]["oneOf"]
    rows = next(c for c in request if "rows" in c["properties"])
    assert "pixel_3_4" in rows["properties"]["rows"]["items"]["properties"]
    images = next(c for c in request if "images" in c["properties"])
    assert "8×8" in images["properties"]["images"]["description"]
    answer = spec["components"]["schemas"]["PredictAnswer"]
    assert answer["properties"]["predictions"]["items"]["properties"]["class"]["enum"] == [str(c) for c in range(10)]
    docs = digits_server.get("/docs")
    assert docs.status_code == 200 and "pixel_0_0" in docs.text and "curl" in docs.text


def test_metrics_say_what_was_served(digits_server: Server) -> None:
    text = digits_server.get("/metrics").text
    version = digits_server.ready_info()["model_version"]
    for name in (
        "traindesk_serve_requests_total",
        "traindesk_serve_latency_seconds_bucket",
        "traindesk_serve_batch_rows_bucket",
        "traindesk_serve_queue_rows",
        "traindesk_serve_worker_restarts_total",
    ):
        assert name in text
    assert f'version="{version}"' in text


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b'{"inputs": [[1, 2', 400, ("not valid JSON",)),
        (b"[1, 2, 3]", 400, ("JSON object",)),
        (b'{"inputs": [[1, 2, 3]]}', 422, ("inputs[0]", "3 values", "64")),
        (b'{"inputs": [' + b"[" + b"0," * 63 + b'"7"]' + b"]}", 422, ("inputs[0][63]", "'7'", "not a number")),
        (b'{"rows": [{"pixel_0_0": 1}]}', 422, ("rows[0]", "lacks column", "pixel_0_1")),
        (b'{"colour": 1}', 422, ("unknown field", "colour")),
        (b'{"inputs": []}', 422, ("non-empty",)),
    ],
)
def test_bad_bodies_get_one_line_4xx(digits_server: Server, body: bytes, status: int, words: tuple[str, ...]) -> None:
    one_line_error(digits_server.post("/predict", content=body), status, *words)


def test_bad_rows_name_the_row_and_column(digits_server: Server) -> None:
    features = [f"pixel_{i}_{j}" for i in range(8) for j in range(8)]
    good = {f: 1.0 for f in features}
    wrong_column = {**{f: 1.0 for f in features[1:]}, "pixel_9_9": 1.0}
    one_line_error(
        digits_server.post("/predict", json={"rows": [good, good, wrong_column]}), 422, "rows[2]", "pixel_0_0"
    )
    extra = {**good, "colour": "red"}
    one_line_error(digits_server.post("/predict", json={"rows": [extra]}), 422, "rows[0]", "unknown column", "colour")
    text = {**good, "pixel_2_5": "bright"}
    one_line_error(
        digits_server.post("/predict", json={"rows": [good, text]}),
        422,
        "rows[1]",
        "column 'pixel_2_5'",
        "'bright'",
        "not a number",
    )
    missing = {**good, "pixel_0_3": None}
    one_line_error(digits_server.post("/predict", json={"rows": [missing]}), 422, "pixel_0_3", "missing value")


def test_oversized_body_and_wrong_image(digits_server: Server) -> None:
    big = b'{"inputs": [' + b",".join([b"[" + b"1.0," * 63 + b"1.0]"] * 40_000) + b"]}"
    assert len(big) > 8 << 20
    one_line_error(digits_server.post("/predict", content=big), 413, "bytes")
    resized = digits_server.post("/predict", json={"images": [png(8, 8), png(10, 12)]})  # resized as in training
    assert resized.status_code == 200 and len(resized.json()["predictions"]) == 2, resized.text
    one_line_error(digits_server.post("/predict", json={"images": ["not base64!"]}), 422, "images[0]", "base64")
    one_line_error(digits_server.post("/predict", json={"images": [gif(8, 8)]}), 422, "images[0]", "GIF", "PNG")
    garbage = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 40).decode()
    one_line_error(digits_server.post("/predict", json={"images": [garbage]}), 422, "images[0]", "not a readable")
    one_line_error(
        digits_server.post("/predict", content=b"{}", headers={"X-Request-Timeout": "soon"}), 400, "X-Request-Timeout"
    )


def test_bad_requests_reach_no_worker(digits_server: Server) -> None:
    rows_before = digits_server.metric("traindesk_serve_rows_total")
    for body in (b"{", b'{"inputs": [[1]]}', b'{"rows": [{"a": 1}]}'):
        assert digits_server.post("/predict", content=body).status_code in (400, 422)
    assert digits_server.metric("traindesk_serve_rows_total") == rows_before


def test_concurrent_clients_all_get_200_in_batches(digits_server: Server, digits_run: Path) -> None:
    rows = np.random.default_rng(0).uniform(0, 16, (32, 1, 8, 8)).astype(np.float32)
    expected = local_probs(digits_run, rows)
    result = run_load(digits_server.url, LOAD_S, rows=rows, expected=expected)
    assert result.errors == []
    assert set(result.statuses) == {200} and result.total > CLIENTS
    assert result.wrong == 0  # every answer is its own row's, not a neighbour's in the batch
    text = digits_server.get("/metrics").text
    batches = float(re.search(r"^traindesk_serve_batch_rows_count (\S+)$", text, re.M).group(1))
    single = float(re.search(r'^traindesk_serve_batch_rows_bucket{le="1.0"} (\S+)$', text, re.M).group(1))
    assert batches > single  # rows of several requests went in one batch


def test_worker_killed_under_load_loses_no_request(digits_server: Server) -> None:
    victim = digits_server.ready_info()["workers"][0]["pid"]
    restarts = digits_server.metric("traindesk_serve_worker_restarts_total")

    def kill() -> None:
        time.sleep(LOAD_S / 3)
        os.kill(victim, signal.SIGKILL)

    result = run_load(digits_server.url, LOAD_S, during=kill)
    info = digits_server.wait_ready()
    digits_server.share()  # type: ignore[attr-defined]  # set by the digits_server fixture
    assert result.errors == []
    assert set(result.statuses) == {200}, result.statuses
    assert digits_server.metric("traindesk_serve_worker_restarts_total") == restarts + 1
    assert victim not in [w["pid"] for w in info["workers"]]


def test_image_model_batches_larger_than_the_pipe_buffer(tmp_path: Path) -> None:
    """A CNN on 1x28x28: 64 rows are 200 KB on the worker's pipe, more than the socket takes at once."""
    rng = np.random.default_rng(0)
    data = tmp_path / "images28.npz"
    np.savez(data, x=rng.uniform(0, 1, (200, 28, 28)).astype(np.float32), y=rng.integers(0, 3, 200))
    run = make_run(tmp_path / "runs", source=f"npz:{data}", kind="cnn", steps=3)
    x = rng.uniform(0, 1, (64, 1, 28, 28)).astype(np.float32)
    want = local_probs(run, x)
    with serving(run, tmp_path, "--workers", "1") as server:
        r = server.post("/predict", json={"inputs": x.tolist()})
        assert r.status_code == 200, r.text
        got = np.array([list(p["probabilities"].values()) for p in r.json()["predictions"]])
        assert np.allclose(got, want, atol=1e-6)
        assert server.post("/predict", json={"images": [png(27, 28)]}).status_code == 200  # resized to 28x28
        assert server.post("/predict", json={"images": [png(28, 28)] * 3}).status_code == 200
        assert server.ready_info()["workers"][0]["restarts"] == 0


# ----------------------------------------------------------------------------- life: drain, reload, auth


def test_sigterm_under_load_answers_what_it_holds_and_exits_0(digits_run: Path, tmp_path: Path) -> None:
    server = _start(digits_run, tmp_path, "--workers", "2")
    children = psutil.Process(server.proc.pid).children(recursive=True)
    assert children  # the model processes (and the forkserver)

    def terminate() -> None:
        time.sleep(LOAD_S / 2)
        server.proc.send_signal(signal.SIGTERM)

    try:
        result = run_load(server.url, LOAD_S * 3, during=terminate, stop_on=(503,))
        code = server.proc.wait(60)
    finally:
        _stop(server)
    assert code == 0, server.stderr()
    assert result.errors == []  # no request cut off: each got its answer or a 503, or found the door closed
    assert set(result.statuses) <= {200, 503} and result.statuses.get(200, 0) > 0
    assert "draining" in server.stderr()
    psutil.wait_procs(children, timeout=10)
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


def test_reload_and_watch_under_load_fail_no_request(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs")
    other = make_run(tmp_path / "other", source="builtin:iris")
    token = "s3cret"
    with serving(run, tmp_path, "--workers", "2", "--watch", token=token) as server:
        first = server.wait_ready()["model_version"]
        seen: dict[str, Any] = {}

        def swap() -> None:
            time.sleep(LOAD_S / 4)
            add_best(run)  # --watch follows best.pt
            deadline = time.monotonic() + 20
            while server.ready_info()["model_version"] == first and time.monotonic() < deadline:
                time.sleep(0.1)
            seen["watched"] = server.ready_info()["model_version"]
            seen["reload"] = server.post("/admin/reload", json={"path": str(run / "checkpoints" / "last.pt")})
            seen["refused"] = server.post("/admin/reload", json={"path": str(other)})

        result = run_load(server.url, max(LOAD_S, 4.0), headers=server.headers(), during=swap)
        assert result.errors == [] and set(result.statuses) == {200}, (result.statuses, result.errors)
        assert seen["watched"] != first
        assert seen["reload"].status_code == 200, seen["reload"].text
        assert seen["reload"].json()["version"] == first  # last.pt again
        one_line_error(seen["refused"], 409, "another schema", "kept")
        info = server.wait_ready()
        assert info["model_version"] == first and {w["version"] for w in info["workers"]} == {first}
        assert f'version="{first}"' in server.get("/metrics").text


def test_token_guards_everything_but_health(digits_run: Path, tmp_path: Path) -> None:
    with serving(digits_run, tmp_path, "--workers", "1", token="tok") as server:
        body = {"inputs": [[0.0] * 64]}
        assert httpx.get(server.url + "/health").status_code == 200
        for method, path in (
            ("POST", "/predict"),
            ("GET", "/ready"),
            ("GET", "/metrics"),
            ("GET", "/openapi.json"),
            ("POST", "/admin/reload"),
        ):
            r = httpx.request(method, server.url + path, json=body if path == "/predict" else None)
            one_line_error(r, 401, "bearer token")
            bad = httpx.request(method, server.url + path, headers={"Authorization": "Bearer nope"})
            assert bad.status_code == 401
        assert server.post("/predict", json=body).status_code == 200
        assert server.post("/admin/reload").status_code == 200


def test_reload_without_a_token_is_refused(digits_server: Server) -> None:
    one_line_error(digits_server.post("/admin/reload"), 403, "--token")


# ----------------------------------------------------------------------------- back-pressure, deadlines, crashes


def test_full_queue_429_deadline_504_and_a_crashing_input_500(odd_run: Path, tmp_path: Path) -> None:
    slow = {"inputs": [[-1e9] + [0.0] * 63]}  # the model sleeps 1 s on it
    fine = {"inputs": [[1.0] * 64]}
    poison = {"inputs": [[1e9] * 64]}  # the model's process exits on it
    args = ("--workers", "1", "--queue", "2", "--max-batch", "1", "--timeout-s", "30")
    with serving(odd_run, tmp_path, *args) as server:
        server.wait_ready()
        answers: dict[str, httpx.Response] = {}

        def post(name: str, body: dict[str, Any], retry: bool = False) -> threading.Thread:
            def send() -> None:
                r = server.post("/predict", json=body)
                while retry and r.status_code == 429:  # as a client told Retry-After does
                    time.sleep(0.1)
                    r = server.post("/predict", json=body)
                answers[name] = r

            t = threading.Thread(target=send)
            t.start()
            return t

        def wait_metric(name: str, value: float) -> None:
            deadline = time.monotonic() + 10
            while server.metric(name) != value:
                assert time.monotonic() < deadline, f"{name} never reached {value}"
                time.sleep(0.01)

        a = post("a", slow)
        wait_metric("traindesk_serve_in_flight_rows", 1)
        waiting = [post("b", slow), post("c", slow)]
        wait_metric("traindesk_serve_queue_rows", 2)
        full = server.post("/predict", json=fine)
        one_line_error(full, 429, "queue is full")
        assert full.headers["Retry-After"] == "1"
        for t in [a, *waiting]:
            t.join(30)
        assert [answers[k].status_code for k in "abc"] == [200, 200, 200]

        rows_before = server.metric("traindesk_serve_rows_total")
        a = post("a", slow)
        wait_metric("traindesk_serve_in_flight_rows", 1)
        t0 = time.monotonic()
        late = server.post("/predict", json=fine, headers={"X-Request-Timeout": "0.1"})
        assert time.monotonic() - t0 < 0.8  # answered at its deadline, not after the slow batch
        one_line_error(late, 504, "deadline", "queue")
        a.join(30)
        assert answers["a"].status_code == 200
        assert server.metric("traindesk_serve_rows_total") == rows_before + 1  # the late row was never computed

        crash = post("poison", poison)
        others = [post(f"ok{k}", fine, retry=True) for k in range(2)]
        for t in [crash, *others]:
            t.join(60)
        one_line_error(answers["poison"], 500, "the model process crashed on this input")
        assert [answers[f"ok{k}"].status_code for k in range(2)] == [200, 200]
        assert server.metric("traindesk_serve_worker_restarts_total") == 2  # the poison row, twice
        server.wait_ready()
        assert server.post("/predict", json=fine).status_code == 200


# ----------------------------------------------------------------------------- the command line


def test_bad_arguments_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from core.cli import main

    assert main(["serve", str(tmp_path / "missing")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["serve", str(tmp_path), "--watch"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_a_port_in_use_is_said_before_loading(digits_run: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = run_core(
            "serve",
            str(digits_run),
            "--port",
            str(port),
            cwd=ROOT,
            env=core_env(),
            timeout=60,
        )
    assert proc.returncode == 2
    assert f"127.0.0.1:{port}" in proc.stderr and proc.stderr.strip().count("\n") == 0
