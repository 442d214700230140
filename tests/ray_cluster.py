"""One local Ray cluster for the test session (``ray start --head`` on 127.0.0.1), stopped at its end.

Every Ray process it starts keeps to loopback (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``); the cluster and
its clients share a token made for the session (``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN``: a new machine
has no ``~/.ray/auth_token``, and ``ray start`` in token mode refuses to start without one). Its processes are known by their temp folder, so
the end stops exactly them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"}
RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_processes(temp_dir: str) -> list[psutil.Process]:
    """The cluster's daemons (their command lines name its temp folder) and every process they started (the
    workers, whose titles Ray rewrites)."""
    out: dict[int, psutil.Process] = {}
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(temp_dir in part for part in p.info["cmdline"] or []):
                out[p.pid] = p
                out.update((c.pid, c) for c in p.children(recursive=True))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return list(out.values())


def local_cluster() -> Iterator[str]:
    """Start the cluster, set the clients' environment, yield its address; stop it and everything it ran."""
    temp_dir = tempfile.mkdtemp(prefix="tdray-", dir="/tmp")  # short: Ray's socket paths have a length limit
    env = {**ENV, "RAY_AUTH_TOKEN": os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(32)}
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    port = free_port()
    cmd = [
        RAY, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
        "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp_dir}",
    ]  # fmt: skip
    started = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=os.environ.copy())
    try:
        assert started.returncode == 0, f"ray start failed: {started.stderr[-2000:]}"
        yield f"127.0.0.1:{port}"
    finally:
        procs = cluster_processes(temp_dir)
        for p in procs:
            try:
                p.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=15)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        deadline = time.monotonic() + 15
        while cluster_processes(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(temp_dir, ignore_errors=True)
