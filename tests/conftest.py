"""Suite-wide guards: no test may leave a child process behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.pop("MLFLOW_TRACKING_URI", None)  # a run of the suite mirrors to MLflow only where a test says so


def _service_pids() -> set[int]:
    """The multiprocessing forkserver and resource tracker live for the whole session by design."""
    pids: set[int] = set()
    from multiprocessing import resource_tracker

    from core.launchers.local import forkserver_pid

    fs = forkserver_pid()
    rt = getattr(resource_tracker._resource_tracker, "_pid", None)
    pids.update(p for p in (fs, rt) if p)
    return pids


def live_descendants(root: int | None = None) -> list[int]:
    """Descendant pids of this process (not zombies), excluding the service processes themselves."""
    services = _service_pids()
    try:
        children = psutil.Process(root or os.getpid()).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out: list[int] = []
    for child in children:
        try:
            if child.pid not in services and child.status() != psutil.STATUS_ZOMBIE:
                out.append(child.pid)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(autouse=True)
def no_leftover_processes():
    yield
    if os.name != "posix":
        return
    deadline = time.monotonic() + 10
    left = live_descendants()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = live_descendants()
    if left:
        for pid in left:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        pytest.fail(f"test left {len(left)} child process(es) running: {left}")


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster for the whole session (tests/ray_cluster.py): its address."""
    pytest.importorskip("ray", reason="Ray is an extra: pip install 'traindesk[ray]'")
    from tests.ray_cluster import local_cluster

    yield from local_cluster()


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache that huggingface_hub in this process uses (hub_cache.cache_weights fills it)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return cache
