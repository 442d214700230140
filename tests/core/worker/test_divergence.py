"""A diverged loss is not the end of a run: the worker rolls back, lowers its own rate and goes on.

Faulty custom models make the loss non-finite at a chosen step (of one worker, or one rank); a sweep worker
gets a rate that overflows. ``train.on_divergence`` = ``pause`` and ``fail`` keep the user's choices.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import torch

from core.runfiles.writing import read_metrics
from core.training.checkpoint import load_checkpoint
from tests.cli_run import run_core
from tests.core.session.test_reliability import ENV, cfg_for, custom_model, started_session


def test_divergence_fails_the_cli_run_when_told_to_and_keeps_finite_weights(tmp_path: Path) -> None:
    kind = custom_model(
        tmp_path,
        """
        if n == 40:
            return self.lin(x.flatten(1)) * float("nan")
    """,
    )
    res = run_core(
        "train",
        "--set",
        kind,
        "--runs-dir",
        str(tmp_path / "r"),
        "--strategy",
        "single",
        "--epochs",
        "20",
        "--set",
        "train.on_divergence=fail",
        timeout=120,
        env=ENV,
        cwd=tmp_path,
    )
    assert res.returncode == 1
    error = [line for line in res.stderr.splitlines() if line.startswith("error:")][0]
    assert re.search(r"loss became nan at worker 0, epoch 2, step \d+ \(learning rate 0.05\); lower optim.lr", error)
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    ckpt = load_checkpoint(run_dir)
    assert all(torch.isfinite(v).all() for v in ckpt["model"].values())


def test_a_diverged_loss_rolls_back_lowers_the_rate_and_the_run_goes_on(tmp_path: Path, runs_dir: Path) -> None:
    """The default: the weights of the last healthy interval come back, the rate / 10, one log line, a marker."""
    kind = custom_model(
        tmp_path,
        """
        if n == 130:
            return self.lin(x.flatten(1)) * float("inf")
    """,
    )
    session, buf = started_session(cfg_for(kind, "parallel.strategy=single", "train.epochs=8"), runs_dir)
    assert session.wait(120) == "finished"
    assert session.error is None
    records = list(read_metrics(session.run_dir / "metrics.jsonl"))
    [marker] = [r for r in records if r["kind"] == "recovery"]
    assert marker["worker"] == 0 and 100 < marker["step"] < 130 and marker["loss"] in ("inf", "-inf", "nan")
    assert marker["weights_from"] == 100  # the last copy kept (every 50 steps) before the divergence
    assert (marker["lr_from"], marker["lr_to"]) == pytest.approx((0.05, 0.005))
    logs = [r["message"] for r in records if r["kind"] == "log" and "rolled back" in r["message"]]
    assert len(logs) == 1 and "lowered to 0.005" in logs[0] and "goes on" in logs[0]
    lrs = [r["lr"] for r in records if r["kind"] == "step" and r["step"] > marker["step"]]
    assert lrs and all(lr == pytest.approx(0.005) for lr in lrs)
    ckpt = load_checkpoint(session.run_dir)
    assert ckpt["progress"][0]["lr_factor"] == pytest.approx(0.1)  # a continued run keeps the lowered rate
    summary = json.loads((session.run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["final"]["val_accuracy"] > 0.8


def test_divergence_pauses_the_run_when_asked_to(tmp_path: Path, runs_dir: Path) -> None:
    kind = custom_model(
        tmp_path,
        """
        if n == 10:
            return self.lin(x.flatten(1)) * float("inf")
    """,
    )
    session, buf = started_session(
        cfg_for(kind, "parallel.strategy=single", "train.epochs=5", "train.on_divergence=pause"), runs_dir
    )
    try:
        deadline = time.monotonic() + 30
        while session.state != "paused" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert session.state == "paused"
        records = buf.drain(0.5)
        assert any(
            r["kind"] == "log" and "run paused" in r["message"] and "lowered to 0.005" in r["message"] for r in records
        )
        session.resume()  # the bad batch was skipped, the weights are the healthy ones: training goes on
        assert session.wait(60) == "finished"
    finally:
        if session.active:
            session.stop(5)


def test_a_sweep_worker_whose_rate_overflows_recovers_alone_and_the_sweep_finishes(runs_dir: Path) -> None:
    cfg = cfg_for("parallel.strategy=sweep", "parallel.workers=2", "parallel.sweep_lr=[0.05,100.0]", "train.epochs=4")
    session, buf = started_session(cfg, runs_dir)
    assert session.wait(120) == "finished"  # no pause on the way
    records = list(read_metrics(session.run_dir / "metrics.jsonl"))
    assert not any(r["kind"] == "state" and r["state"] == "paused" for r in records)
    markers = [r for r in records if r["kind"] == "recovery"]
    assert markers and {m["worker"] for m in markers} == {1}  # the rate that diverged is that worker's own
    assert markers[0]["lr_from"] == pytest.approx(100.0) and markers[0]["lr_to"] == pytest.approx(10.0)
    last_lr = {r["worker"]: r["lr"] for r in records if r["kind"] == "step"}
    assert last_lr[0] == pytest.approx(0.05) and last_lr[1] == pytest.approx(markers[-1]["lr_to"])
    ckpt = load_checkpoint(session.run_dir)
    weights = [ckpt["models"][w] for w in (0, 1)]
    assert all(torch.isfinite(v).all() for m in weights for v in m.values())


def test_ddp_ranks_recover_together_when_one_rank_diverges(tmp_path: Path, runs_dir: Path) -> None:
    """One rank's loss overflows: the averaged gradients are non-finite on every rank, so all roll back at the
    same step and stay in step (a rank's own loss alone would split them)."""
    kind = custom_model(
        tmp_path,
        """
        import torch.distributed as dist
        if n == 60 and dist.is_initialized() and dist.get_rank() == 1:
            return self.lin(x.flatten(1)) * float("inf")
    """,
    )
    session, buf = started_session(
        cfg_for(kind, "parallel.strategy=ddp", "parallel.workers=2", "train.epochs=6"), runs_dir
    )
    assert session.wait(180) == "finished", session.error
    records = list(read_metrics(session.run_dir / "metrics.jsonl"))
    markers = [r for r in records if r["kind"] == "recovery"]
    assert sorted(m["worker"] for m in markers) == [0, 1]
    assert len({m["step"] for m in markers}) == 1 and len({m["weights_from"] for m in markers}) == 1
    summary = json.loads((session.run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["final"]["val_accuracy"] > 0.8
