"""Serving under load: traindesk serve against LitServe, FastAPI and a constant-answer endpoint.

    .venv/bin/python bench/serve_load.py [--duration 8] [--clients 1,16,64] [--models mlp,cnn]
                                         [--servers traindesk,litserve,fastapi,constant] [--workers 2]
                                         [--max-batch 64] [--max-wait-ms 0]
    .venv/bin/python bench/serve_load.py --on ray [--models mlp] [--max-wait-ms 5] ...

One closed-loop load generator (asyncio + aiohttp, in this process) drives
each server in turn: C clients, each sending one row per request and the
next as soon as the answer is in, for --duration seconds after a one-second
warm-up. The models are the default digits MLP (64 -> 256 -> 256 -> 10) and
a small CNN on 1x28x28 images (16 and 32 channels), each trained for a few
steps (speed does not depend on the weights). Servers, each with --workers
inference processes:

    traindesk   traindesk serve RUN --workers N (batching; the figures show the batch sizes it formed)
    litserve    LitServe, LitAPI with max_batch_size 64, batch_timeout 5 ms, workers_per_device N
    fastapi     FastAPI + uvicorn --workers N, no batching (the model in each HTTP process)
    constant    Starlette on uvicorn that parses the JSON and answers a constant (the HTTP stack's ceiling)

With ``--on ray`` the servers are, on one local Ray cluster started for the run (``ray start --head`` on
127.0.0.1, stopped at the end), one after the other behind the same Ray Serve proxy:

    traindesk   traindesk serve RUN --on ray --ray-address ADDR --workers N
    handwritten bench/_ray_handwritten.py: one deployment with @serve.batch, as a Ray user writes it

Also printed: the model's own batched throughput in one process, one thread,
at batch sizes 1, 16 and 64. The load generator shares the machine's cores
with the server it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable


# ----------------------------------------------------------------------------- models


def make_models(root: Path) -> dict[str, Path]:
    """Run directories of the two models, trained a few steps in this process."""
    import torch

    from core.config import Config, to_dict, to_toml
    from core.data import full_tensors, load_data
    from core.runfiles.writing import atomic_write_json, atomic_write_text, make_run_dir
    from core.training.checkpoint import save_checkpoint
    from core.training.models import build_model

    rng = np.random.default_rng(0)
    images = root / "images28.npz"
    np.savez(images, x=rng.uniform(0, 1, (600, 28, 28)).astype(np.float32), y=rng.integers(0, 10, 600))
    out = {}
    for name, source, kind in (("mlp", "builtin:digits", "mlp"), ("cnn", f"npz:{images}", "cnn")):
        cfg = Config().replace("data", source=source).replace("model", kind=kind)
        data = load_data(cfg.data, seed=0, share=False)
        info = data.info
        torch.manual_seed(0)
        model = build_model(cfg.model, info.input_shape, info.num_classes, info.image_shape)
        x, y = full_tensors(data.train, info)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(20):
            idx = torch.randint(0, len(y), (64,))
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
        run_dir = make_run_dir(root, name)
        atomic_write_text(run_dir / "config.toml", to_toml(cfg))
        save_checkpoint(
            run_dir / "checkpoints" / "last.pt",
            {
                "config": to_dict(cfg),
                "info": info.as_dict(),
                "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
                "optimizers": None,
                "epoch": 1,
                "steps": 20,
                "best_worker": 0,
                "worker_lrs": [cfg.optim.lr],
            },
        )
        atomic_write_json(run_dir / "summary.json", {"status": "finished", "final": {}, "error": None})
        out[name] = run_dir
    return out


def in_process(model: Path, sizes: list[int]) -> dict[int, float]:
    """Rows/s of predictor.probabilities at each batch size, one process, one thread."""
    from core.services.predict import load_predictor

    predictor = load_predictor(model, threads=1)
    rates = {}
    for n in sizes:
        x = np.random.default_rng(0).uniform(0, 1, (n, *predictor.input_shape)).astype(np.float32)
        for _ in range(20):
            predictor.probabilities(x)
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            predictor.probabilities(x)
            reps += 1
        rates[n] = reps * n / (time.perf_counter() - t0)
    return rates


# ----------------------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(kind: str, run_dir: Path, port: int, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SERVE_MODEL": str(run_dir)}
    if args.on == "ray":
        wait = str(args.max_wait_ms / 1000.0)
        if kind == "traindesk":
            cmd = [PY, "-m", "core", "serve", str(run_dir), "--on", "ray", "--ray-address", args.ray_address,
                   "--port", str(port), "--workers", str(args.workers), "--max-batch", str(args.max_batch),
                   "--max-wait-ms", str(args.max_wait_ms)]  # fmt: skip
        elif kind == "handwritten":
            model = str(run_dir / "checkpoints" / "last.pt")
            cmd = [PY, str(ROOT / "bench" / "_ray_handwritten.py"), model, args.ray_address, str(port),
                   str(args.workers), str(args.max_batch), wait]  # fmt: skip
        else:
            raise SystemExit(f"--on ray measures traindesk and handwritten, not {kind!r}")
        return subprocess.Popen(
            cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
    uvicorn = [
        PY,
        "-m",
        "uvicorn",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-access-log",
    ]
    if kind == "traindesk":
        cmd = [
            PY,
            "-m",
            "core",
            "serve",
            str(run_dir),
            "--port",
            str(port),
            "--workers",
            str(args.workers),
            "--max-batch",
            str(args.max_batch),
            "--max-wait-ms",
            str(args.max_wait_ms),
        ]
    elif kind == "litserve":
        cmd = [PY, str(ROOT / "bench" / "_serve_peers.py"), "litserve", str(run_dir), str(port), str(args.workers)]
    elif kind == "fastapi":
        cmd = [*uvicorn, "--workers", str(args.workers), "bench._serve_peers:fastapi_app"]
    elif kind == "constant":
        cmd = [*uvicorn, "bench._serve_peers:constant_app"]
    else:
        raise SystemExit(f"unknown server {kind!r}")
    return subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (its workers too), SIGKILL after 60 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass
    try:  # anything of its group still there (a worker that outlived it)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_up(url: str, body: bytes, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode} before answering")
        try:
            req = urllib.request.Request(url + "/predict", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=5) as r:
                if r.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 404:  # 404: Ray's proxy before the application is deployed
                raise SystemExit(f"{url}/predict refused the request: {exc.code} {exc.read()[:200]!r}") from None
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"no answer from {url} within {timeout} s")


def batch_stats(url: str) -> tuple[float, float]:
    """traindesk's batch-size histogram: (batches, rows) so far."""
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    count = float(re.search(r"^traindesk_serve_batch_rows_count (\S+)$", text, re.M).group(1))
    total = float(re.search(r"^traindesk_serve_batch_rows_sum (\S+)$", text, re.M).group(1))
    return count, total


# ----------------------------------------------------------------------------- load


def load(url: str, bodies: list[bytes], clients: int, seconds: float, warmup: float = 1.0) -> dict[str, Any]:
    import aiohttp

    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def client(k: int, http: aiohttp.ClientSession, start: float, until: float) -> None:
        i = k
        headers = {"Content-Type": "application/json"}
        while True:
            t0 = time.perf_counter()
            if t0 >= until:
                return
            i = (i + 1) % len(bodies)
            async with http.post(url + "/predict", data=bodies[i], headers=headers) as r:
                await r.read()
                status = r.status
            t1 = time.perf_counter()
            if t0 >= start:
                latencies.append(t1 - t0)
                statuses[status] = statuses.get(status, 0) + 1

    async def main() -> float:
        connector = aiohttp.TCPConnector(limit=clients)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as http:
            start = time.perf_counter() + warmup
            until = start + seconds
            await asyncio.gather(*(client(k, http, start, until) for k in range(clients)))
            return time.perf_counter() - start

    elapsed = asyncio.run(main())
    lat = np.sort(np.array(latencies)) if latencies else np.array([float("nan")])
    return {
        "rps": len(latencies) / max(elapsed, 1e-9),
        "p50": float(np.percentile(lat, 50)) * 1e3,
        "p99": float(np.percentile(lat, 99)) * 1e3,
        "n": len(latencies),
        "statuses": statuses,
    }


def bodies_for(run_dir: Path, n: int = 64) -> list[bytes]:
    from core.services.predict import read_model_meta

    meta = read_model_meta(run_dir)
    size = int(np.prod(meta["input"]["shape"]))
    rng = np.random.default_rng(0)
    scale = 16.0 if size == 64 else 1.0
    return [json.dumps({"inputs": [np.round(rng.uniform(0, scale, size), 4).tolist()]}).encode() for _ in range(n)]


# ----------------------------------------------------------------------------- main


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=8.0, help="seconds measured per server and client count")
    p.add_argument("--clients", default="1,16,64")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--servers", default="traindesk,litserve,fastapi,constant")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--max-wait-ms", type=float, default=0.0)
    p.add_argument("--on", choices=("local", "ray"), default="local", help="ray: on one local Ray cluster")
    p.add_argument("--json", type=Path, help="also write every point's figures to this file (bench/check.py reads it)")
    args = p.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    servers = args.servers.split(",")
    if args.on == "ray":
        if "--servers" not in sys.argv:
            servers = ["traindesk", "handwritten"]
        from tests.ray_cluster import local_cluster  # the suite's local cluster (ROOT is on sys.path)

        cluster = local_cluster()
        args.ray_address = next(cluster)
        args.proxy_port = free_port()  # one Ray Serve proxy for the cluster: every server behind it
        try:
            return _run(args, clients, servers)
        finally:
            cluster.close()
    return _run(args, clients, servers)


def _run(args: argparse.Namespace, clients: list[int], servers: list[str]) -> int:
    print(
        f"cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at start; {args.duration:g} s per "
        f"point; {args.workers} workers per server; traindesk --max-batch {args.max_batch} "
        f"--max-wait-ms {args.max_wait_ms:g}",
        flush=True,
    )
    results: dict[tuple[str, str, int], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        runs = make_models(Path(tmp))
        for model in args.models.split(","):
            run_dir = runs[model]
            rates = in_process(run_dir, [1, 16, 64])
            print(
                f"\n## {model}: in-process batched throughput, one thread: "
                + ", ".join(f"batch {n}: {r:,.0f} rows/s" for n, r in rates.items()),
                flush=True,
            )
            bodies = bodies_for(run_dir)
            print(f"{'server':<10} {'clients':>7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'batch':>6}  statuses")
            for kind in servers:
                port = args.proxy_port if args.on == "ray" else free_port()
                url = f"http://127.0.0.1:{port}"
                proc = start(kind, run_dir, port, args)
                try:
                    wait_up(url, bodies[0], proc)
                    for c in clients:
                        before = batch_stats(url) if kind == "traindesk" else None
                        r = load(url, bodies, c, args.duration)
                        batch = ""
                        if before is not None:
                            after = batch_stats(url)
                            batch = f"{(after[1] - before[1]) / max(after[0] - before[0], 1):.1f}"
                        results[(model, kind, c)] = r
                        print(
                            f"{kind:<10} {c:>7} {r['rps']:>8,.0f} {r['p50']:>8.1f} {r['p99']:>8.1f} {batch:>6}  "
                            f"{r['statuses']}",
                            flush=True,
                        )
                finally:
                    stop(proc)
    print_ratios(results, clients)
    if args.json:
        points = [{"model": m, "server": k, "clients": c, **r} for (m, k, c), r in results.items()]
        args.json.write_text(json.dumps({"points": points}, indent=1))
    return 0


def print_ratios(results: dict[tuple[str, str, int], dict[str, Any]], clients: list[int]) -> None:
    def get(model: str, kind: str, c: int, key: str) -> float | None:
        r = results.get((model, kind, c))
        return None if r is None else float(r[key])

    top = max(clients)
    lines = []
    for model in ("mlp", "cnn"):
        ours = get(model, "traindesk", top, "rps")
        if ours is None:
            continue
        for peer in ("litserve", "fastapi", "constant", "handwritten"):
            theirs = get(model, peer, top, "rps")
            if theirs:
                lines.append(f"{model} at {top} clients: traindesk / {peer} requests/s = {ours / theirs:.2f}")
        for peer in ("litserve", "handwritten"):
            p99, peer99 = get(model, "traindesk", top, "p99"), get(model, peer, top, "p99")
            if p99 is not None and peer99 is not None:
                lines.append(f"{model} at {top} clients: p99 traindesk {p99:.1f} ms, {peer} {peer99:.1f} ms")
        if 1 in clients:
            p50, fast50 = get(model, "traindesk", 1, "p50"), get(model, "fastapi", 1, "p50")
            if p50 is not None and fast50 is not None:
                lines.append(
                    f"{model} at 1 client: p50 traindesk {p50:.2f} ms, fastapi {fast50:.2f} ms "
                    f"(difference {p50 - fast50:+.2f} ms)"
                )
    if lines:
        print("\n## ratios\n" + "\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
