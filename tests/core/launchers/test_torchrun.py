"""`traindesk train` under torchrun as a first-class run: two simulated nodes on this machine.

Two torchrun agents (`--nnodes=2`, one process each) meet at a localhost c10d
rendezvous, as two machines would. Every process writes to its own files.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.runfiles.writing import read_metrics, read_summary
from core.training.checkpoint import load_checkpoint
from tests.cli_run import run_core

ROOT = Path(__file__).resolve().parents[3]
ENV = {
    **os.environ,
    "PYTHONPATH": str(ROOT),
    "OMP_NUM_THREADS": "1",
}
# torchrun's defaults, as cluster scripts launch it: one rendezvous store shared by every round
ENV.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
ENV.pop("TORCHELASTIC_USE_AGENT_STORE", None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TwoNodes:
    """Two torchrun agents of one job; each node's output goes to its own files."""

    def __init__(self, tmp: Path, *train_args: str, max_restarts: int = 0, env: dict[str, str] | None = None) -> None:
        self.tmp, self.runs = tmp, tmp / "runs"
        port, self.procs = free_port(), []
        for node in (0, 1):
            cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                "--nproc-per-node=1",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{port}",
                f"--rdzv-id=job-{port}",
                f"--max-restarts={max_restarts}",
                "--monitor-interval=0.5",
                "-m",
                "core",
                "train",
                "--quiet",
                "--runs-dir",
                str(self.runs),
                *train_args,
            ]
            self.procs.append(
                subprocess.Popen(
                    cmd,
                    stdout=(tmp / f"out{node}.txt").open("w"),
                    stderr=(tmp / f"err{node}.txt").open("w"),
                    env=env or ENV,
                    cwd=tmp,
                    start_new_session=True,
                )
            )

    def run_dir(self, timeout: float = 120) -> Path:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = list(self.runs.glob("*/metrics.jsonl"))
            if found:
                return found[0].parent
            time.sleep(0.1)
        raise AssertionError("no run directory: " + self.errors())

    def records(self) -> list[dict[str, Any]]:
        return list(read_metrics(self.run_dir() / "metrics.jsonl"))

    def wait(self, timeout: float = 240) -> list[int | None]:
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        return [p.poll() for p in self.procs]

    def errors(self) -> str:
        return "\n".join((self.tmp / f"err{n}.txt").read_text()[-2000:] for n in (0, 1))

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Callable[..., TwoNodes]]:
    made: list[TwoNodes] = []

    def make(*args: str, **kwargs: Any) -> TwoNodes:
        made.append(TwoNodes(tmp_path, *args, **kwargs))
        return made[-1]

    yield make
    for n in made:
        n.close()


def summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.slow
def test_two_nodes_train_digits_in_one_run_directory(nodes: Any) -> None:
    job = nodes("--epochs", "15")
    codes = job.wait()
    assert codes == [0, 0], job.errors()
    run_dir = job.run_dir()
    assert sorted(p.name for p in job.runs.iterdir() if p.is_dir()) == [run_dir.name]  # one run, by rank 0
    outs = [(job.tmp / f"out{n}.txt").read_text().strip() for n in (0, 1)]
    assert sorted(outs) == ["", str(run_dir)]  # rank 0 prints the run directory, the other rank nothing
    s = summary(run_dir)
    assert s["status"] == "finished" and s["epochs_done"] == 15 and s["launcher"] == "torchrun"
    assert s["world_size"] == 2 and s["nodes"] and s["restarts"] == 0
    assert s["final"]["val_accuracy"] >= 0.93
    records = job.records()
    assert {r["worker"] for r in records if r["kind"] == "step"} == {0, 1}
    starts = [r for r in records if r["kind"] == "state" and r["state"] == "starting" and r["worker"] is not None]
    assert sorted(r["worker"] for r in starts) == [0, 1] and all("node" in r and "local_rank" in r for r in starts)
    for name in ("config.toml", "checkpoints/last.pt", "eval.json"):
        assert (run_dir / name).is_file()


@pytest.mark.slow
def test_a_killed_rank_restarts_the_group_and_the_run_finishes(nodes: Any) -> None:
    job = nodes("--epochs", "150", "--set", "train.checkpoint_every=0.5", max_restarts=2)
    run_dir = job.run_dir()
    deadline = time.monotonic() + 120
    victim = None
    while time.monotonic() < deadline and victim is None:
        records = job.records()
        ranks = {
            r["worker"]: r["pid"]
            for r in records
            if r["kind"] == "state" and r["state"] == "starting" and r["worker"] is not None
        }
        steps = [r for r in records if r["kind"] == "step"]
        if 1 in ranks and steps and steps[-1]["epoch"] >= 3:
            victim = ranks[1]
        time.sleep(0.2)
    assert victim is not None, job.errors()
    os.kill(victim, signal.SIGKILL)
    # the failed round's summary and the checkpoint the next round resumes from (no round writes one before
    # its first interval of training, and restarting the group takes seconds)
    failed: dict[str, Any] = {}
    until = time.monotonic() + 120
    while time.monotonic() < until and not failed:
        failed = read_summary(run_dir) or {}
        time.sleep(0.05)
    # the round ended by its peer's death (or by its agent, which stops it to restart the group)
    assert failed.get("status") in ("failed", "stopped") and failed["restarts"] == 0, (failed, job.errors())
    resumed_from = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    codes = job.wait(300)
    assert codes == [0, 0], job.errors()
    s = summary(run_dir)
    assert s["status"] == "finished" and s["epochs_done"] == 150, s
    # what the failed round had trained past its last consistent checkpoint
    lost = failed["samples"] - sum(p["samples"] for p in resumed_from["progress"])
    assert s["restarts"] == 1 and s["samples_lost"] == max(0, lost), (s["samples_lost"], lost)
    assert s["final"]["val_accuracy"] >= 0.93


def traindesk(*args: str) -> subprocess.CompletedProcess[str]:
    return run_core(*args, env=ENV, timeout=60)


@pytest.mark.slow
def test_pause_resume_stop_a_two_node_job_from_outside(nodes: Any) -> None:
    job = nodes("--epochs", "100000")
    run_dir = job.run_dir()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not {r["worker"] for r in job.records() if r["kind"] == "step"} >= {0, 1}:
        time.sleep(0.2)

    t0 = time.monotonic()
    assert traindesk("pause", str(run_dir)).returncode == 0
    while time.monotonic() - t0 < 30:  # every rank holds at the same step
        paused = {
            r["worker"]: r["detail"]
            for r in job.records()
            if r["kind"] == "state" and r["state"] == "paused" and r["worker"] is not None
        }
        if set(paused) == {0, 1}:
            break
        time.sleep(0.1)
    assert time.monotonic() - t0 < 5 + 5, "pause took too long"  # 5 s, plus the poll above
    assert paused[0] == paused[1]  # "epoch E step S" of both ranks
    count = len(job.records())
    time.sleep(1.5)
    assert not [r for r in job.records()[count:] if r["kind"] == "step"], "a step while paused"

    assert traindesk("resume", str(run_dir)).returncode == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not [r for r in job.records()[count:] if r["kind"] == "step"]:
        time.sleep(0.1)
    assert traindesk("stop", str(run_dir)).returncode == 0
    codes = job.wait(120)
    assert codes == [0, 0], job.errors()  # a stop is no failure for torchrun to restart
    assert summary(run_dir)["status"] == "stopped"
    assert traindesk("pause", str(run_dir)).returncode == 2
