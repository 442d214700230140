"""Suite-wide guards: no test may leave a child process behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def _children_map() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name may contain spaces: fields after the last ')' are fixed
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] == "Z":
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


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
    """Descendant pids of this process, excluding the service processes themselves."""
    tree = _children_map()
    services = _service_pids()
    out: list[int] = []
    stack = [root or os.getpid()]
    while stack:
        pid = stack.pop()
        for child in tree.get(pid, []):
            stack.append(child)
            if child not in services:
                out.append(child)
    return out


@pytest.fixture(autouse=True)
def no_leftover_processes():
    yield
    if os.name != "posix" or not Path("/proc").exists():
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
