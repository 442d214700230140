"""The local launcher's forkserver: ended at once on request (a Ctrl-C), and started again by the next worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import core_env

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import os
from multiprocessing import resource_tracker

from core.launchers import local


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


local.warm_up(block=True, preload=[], tensors=False)
server, tracker = local.forkserver_pid(), resource_tracker._resource_tracker._pid
assert server is not None and tracker is not None
local.stop_forkserver()
assert local.forkserver_pid() is None and resource_tracker._resource_tracker._pid is None
assert gone(server) and gone(tracker), (server, tracker)  # ended and reaped
local.warm_up(block=True, preload=[], tensors=False)
again = local.forkserver_pid()
assert again is not None and again != server
local.stop_forkserver()
assert gone(again)
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forkserver is Linux's start method here")
def test_stop_forkserver_ends_the_server_and_its_tracker_and_the_next_worker_starts_a_new_one() -> None:
    env = core_env(TRAINDESK_START_METHOD="forkserver")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
