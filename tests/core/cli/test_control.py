"""Steering a live run from another process: traindesk pause / resume / stop RUN_DIR."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from core.runfiles.writing import MetricsTail, read_metrics
from tests.cli_run import core_env, run_core, start_core

ROOT = Path(__file__).resolve().parents[3]
ENV = core_env()


def traindesk(*args: str) -> subprocess.CompletedProcess[str]:
    return run_core(
        *args,
        env=ENV,
        cwd=ROOT,
        timeout=120,
    )


def test_pause_resume_stop_a_cli_run_from_another_process(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    train = start_core(
        "train",
        "--quiet",
        "--epochs",
        "100000",
        "--runs-dir",
        str(runs),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        run_dir = None
        while time.monotonic() < deadline:
            found = list(runs.glob("*/metrics.jsonl"))
            if found and '"kind":"step"' in found[0].read_text():
                run_dir = found[0].parent
                break
            time.sleep(0.1)
        assert run_dir is not None, "training never started"

        t0 = time.monotonic()
        paused = traindesk("pause", str(run_dir))
        assert paused.returncode == 0 and paused.stdout.strip() == "paused", paused.stderr
        assert time.monotonic() - t0 < 30
        time.sleep(1.0)  # records sent before the pause may still arrive: let them land
        tail = MetricsTail(run_dir / "metrics.jsonl", start_at_end=True)
        time.sleep(1.0)
        assert not [r for r in tail.read() if r["kind"] == "step"], "steps while paused"
        resumed = traindesk("resume", str(run_dir))
        assert resumed.returncode == 0 and resumed.stdout.strip() == "running", resumed.stderr
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not [r for r in tail.read() if r["kind"] == "step"]:
            time.sleep(0.1)
        stopped = traindesk("stop", str(run_dir))
        assert stopped.returncode == 0, stopped.stderr
        out, err = train.communicate(timeout=60)
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
    assert train.returncode == 130, err  # the run was stopped
    states = [
        r["state"] for r in read_metrics(run_dir / "metrics.jsonl") if r["kind"] == "state" and r["worker"] is None
    ]
    assert "paused" in states and states[-1] == "stopped"

    again = traindesk("pause", str(run_dir))
    assert again.returncode == 2 and again.stderr.count("\n") == 1
    assert "holds no active run (it stopped)" in again.stderr
    nothing = traindesk("stop", str(tmp_path))
    assert nothing.returncode == 2 and "not a run directory" in nothing.stderr and nothing.stderr.count("\n") == 1


def test_metrics_tail_returns_only_complete_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"kind":"log","t":1}\n{"kind":"st')
    tail = MetricsTail(path)
    assert tail.read() == [{"kind": "log", "t": 1}]
    with path.open("a") as fh:
        fh.write('ep","t":2}\n')
    assert tail.read() == [{"kind": "step", "t": 2}]
    assert tail.read() == []
