"""The local launcher's forkserver: ended at once on request (a Ctrl-C) or once a command's one run has no worker left,
started again by the next worker; what it preloads."""

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


ONE_RUN_SCRIPT = """
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
local.LocalLauncher().workers_ended()  # the window's launcher: its server stays warm for the next Start
assert local.forkserver_pid() == server and not gone(server)
one_run = local.LocalLauncher()
one_run.end_server_with_workers()
one_run.workers_ended()
assert local.forkserver_pid() is None and gone(server), server
assert resource_tracker._resource_tracker._pid == tracker and not gone(tracker)  # the queues still use it
local.warm_up(block=True, preload=[], tensors=False)
assert local.forkserver_pid() not in (None, server)
local.stop_forkserver()
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forkserver is Linux's start method here")
def test_a_command_s_one_run_ends_its_forkserver_once_its_workers_have() -> None:
    """traindesk train's server (torch and torch._dynamo preloaded) goes before the run's evaluation."""
    env = core_env(TRAINDESK_START_METHOD="forkserver")
    done = subprocess.run(
        [sys.executable, "-c", ONE_RUN_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


PRELOAD_SCRIPT = """
import sys

import core.launchers.server_preload
import torch

assert "torch._dynamo" in sys.modules
assert not any(name == "triton" or name.startswith("triton.") for name in sys.modules), "triton imported"
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.ones(4, 3)).sum().backward()
opt.step()  # a worker's step, which imports torch._dynamo
import triton  # refused only while the server imported torch._dynamo
print("ok")
"""


def test_the_workers_server_preloads_torch_dynamo_without_triton() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PRELOAD_SCRIPT], cwd=ROOT, env=core_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


PRESTART_SCRIPT = """
import os
import signal
import sys
import tempfile

import psutil

own = tempfile.NamedTemporaryFile()  # the command's file: a fresh server holds none of its files
signal.signal(signal.SIGTERM, lambda signum, frame: None)  # the command's handler: not the server's

from core.launchers import local

local.prestart(preload=["torch"])
assert "torch" in sys.modules  # imported here, before the server was forked
local.warm_up(block=True, preload=["torch"], tensors=False)
server = psutil.Process(local.forkserver_pid())
assert server.memory_full_info().uss < 150e6, server.memory_full_info()  # torch's pages are this process's
assert own.name not in [f.path for f in server.open_files()]
server.send_signal(signal.SIGTERM)
assert server.wait(10) == -signal.SIGTERM
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forkserver is Linux's start method here")
def test_the_command_s_server_shares_this_process_s_torch_and_holds_none_of_its_files_or_handlers() -> None:
    """traindesk train's server is forked once torch is imported: a server of its own imported torch again
    (with the CUDA build about 260 MB of its own memory, held through the whole run)."""
    env = core_env(TRAINDESK_START_METHOD="forkserver")
    done = subprocess.run(
        [sys.executable, "-c", PRESTART_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
