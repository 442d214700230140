"""Resume holds for every strategy: a killed run continues from its last consistent checkpoint."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from core.config import Config, apply_overrides
from core.runfiles.writing import read_metrics
from core.session import RecordBuffer, Session
from core.training.checkpoint import load_checkpoint
from tests.cli_run import core_env, run_core, start_core

ROOT = Path(__file__).resolve().parents[3]
ENV = core_env()


def traindesk(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run_core(
        "train",
        "--quiet",
        *args,
        env=ENV,
        cwd=ROOT,
        timeout=timeout,
    )


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def worker_pids(run_dir: Path) -> dict[int, int]:
    """Each worker's pid, from its "starting" state record."""
    pids = {}
    for rec in read_metrics(run_dir / "metrics.jsonl"):
        if rec["kind"] == "state" and rec["worker"] is not None and rec["state"] == "starting":
            pids[rec["worker"]] = int(re.fullmatch(r"pid (\d+)", rec["detail"]).group(1))
    return pids


def kill_one_worker_mid_run(args: list[str], runs_dir: Path) -> tuple[Path, dict]:
    """Start a long CLI run, SIGKILL worker 1 once a checkpoint past the start exists; (run dir, checkpoint)."""
    proc = start_core(
        "train",
        "--quiet",
        *args,
        "--epochs",
        "100000",
        "--runs-dir",
        str(runs_dir),
        "--set",
        "train.checkpoint_every=0.3",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        ckpt: dict = {}
        while time.monotonic() < deadline:
            found = list(runs_dir.glob("*/checkpoints/last.pt"))
            if found:
                try:
                    ckpt = load_checkpoint(found[0])
                except Exception:
                    ckpt = {}
                if ckpt and min(p["step"] for p in ckpt["progress"]) > 0:
                    break
            time.sleep(0.1)
        assert ckpt, "no checkpoint past the start"
        run_dir = found[0].parents[1]
        os.kill(worker_pids(run_dir)[1], signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    assert "worker 1" in err and "SIGKILL" in err
    assert summary(run_dir)["status"] == "failed"
    return run_dir, load_checkpoint(run_dir)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["hogwild", "ddp", "sweep"])
def test_a_killed_run_resumes_and_finishes(strategy: str, tmp_path: Path) -> None:
    args = ["--strategy", strategy, "--workers", "2"]
    if strategy == "sweep":
        args += ["--set", "parallel.sweep_lr=[0.02,0.05]"]
    run_dir, ckpt = kill_one_worker_mid_run(args, tmp_path / "runs")
    progress = ckpt["progress"]
    assert all(o is not None for o in ckpt["optimizers"]), "a checkpoint past the start holds optimizer states"
    if strategy == "ddp":  # ranks agree on the step before a checkpoint
        assert progress[0] == progress[1]
    epochs = max(30, max(p["epoch"] for p in progress) + 10)

    resumed = traindesk("--resume", str(run_dir), "--epochs", str(epochs))
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip().splitlines()[-1] == str(run_dir)
    s = summary(run_dir)
    assert s["status"] == "finished" and s["epochs_done"] == epochs, s

    straight = traindesk(*args, "--epochs", str(epochs), "--runs-dir", str(tmp_path / "straight"))
    assert straight.returncode == 0, straight.stderr
    reference = summary(Path(straight.stdout.strip().splitlines()[-1]))
    assert s["final"]["val_accuracy"] >= reference["final"]["val_accuracy"] - 0.02


def test_a_stopped_single_run_resumed_reaches_the_uninterrupted_weights(runs_dir: Path) -> None:
    cfg = apply_overrides(Config(), ["parallel.strategy=single", "train.epochs=6", "model.dropout=0.2", "train.seed=3"])
    straight = Session(cfg, runs_dir=runs_dir / "a")
    straight.start()
    assert straight.wait(120) == "finished"

    first = Session(cfg, runs_dir=runs_dir / "b")
    buf = RecordBuffer()
    first.add_listener(buf.put)
    first.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(r["kind"] == "eval" for r in buf.drain(0.05)):
        pass
    assert first.stop(10) == "stopped"
    stopped_at = load_checkpoint(first.run_dir)["progress"][0]
    assert 0 < stopped_at["step"] < 6 * 23, stopped_at  # mid-run (23 batches per epoch)

    second = Session.from_run(first.run_dir)
    second.start()
    assert second.wait(120) == "finished"
    a, b = straight.final_model().state_dict(), second.final_model().state_dict()
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-5, rtol=0)


def test_a_checkpoint_while_paused_holds_one_point_of_the_run(runs_dir: Path) -> None:
    cfg = apply_overrides(
        Config(), ["parallel.strategy=hogwild", "parallel.workers=2", "train.epochs=100000", "train.checkpoint_every=0"]
    )
    session = Session(cfg, runs_dir=runs_dir)
    buf = RecordBuffer()
    session.add_listener(buf.put)
    session.start()
    try:
        seen: list[dict] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and {r["worker"] for r in seen if r["kind"] == "step"} != {0, 1}:
            seen += buf.drain(0.05)
        session.pause()
        paused: set[int] = set()
        while time.monotonic() < deadline and paused != {0, 1}:
            paused |= {
                r["worker"]
                for r in buf.drain(0.05)
                if r["kind"] == "state" and r["state"] == "paused" and r["worker"] is not None
            }
        last_steps = {}
        path = session.run_dir / "checkpoints" / "last.pt"
        before = path.stat().st_mtime_ns
        assert session.checkpoint()
        while time.monotonic() < deadline and path.stat().st_mtime_ns == before:
            time.sleep(0.05)
        ckpt = load_checkpoint(path)
        for rec in read_metrics(session.run_dir / "metrics.jsonl"):
            if rec["kind"] == "step":
                last_steps[rec["worker"]] = rec["step"]
        # paused workers answered with where they are: their last step records
        assert [p["step"] for p in ckpt["progress"]] == [last_steps[0], last_steps[1]]
        assert all(o is not None for o in ckpt["optimizers"])
        assert session.state == "paused"
        session.resume()
        assert session.state == "running"
    finally:
        session.stop(10)
    assert session.state == "stopped"
