"""The engine with real worker processes: strategies, pause, stop, run directory."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from core.config import Config, apply_overrides
from core.runfiles.writing import read_metrics
from core.session import RecordBuffer, Session
from core.training.checkpoint import load_checkpoint, model_from_checkpoint


def cfg_for(*overrides: str) -> Config:
    return apply_overrides(Config(), list(overrides))


def run_to_end(cfg: Config, runs_dir: Path, timeout: float = 180) -> Session:
    session = Session(cfg, runs_dir=runs_dir)
    session.start()
    status = session.wait(timeout)
    if status is None:
        session.stop(5)
        pytest.fail("run did not finish in time")
    return session


@pytest.mark.parametrize(
    "strategy, workers, extra",
    [
        ("single", 1, []),
        ("hogwild", 2, []),
        ("ddp", 2, []),
        ("sweep", 3, ["parallel.sweep_lr=[0.01,0.05,0.1]"]),
    ],
)
def test_strategy_trains_digits(strategy: str, workers: int, extra: list[str], runs_dir: Path) -> None:
    cfg = cfg_for(f"parallel.strategy={strategy}", f"parallel.workers={workers}", "train.epochs=15", *extra)
    session = run_to_end(cfg, runs_dir)
    s = session.summary
    assert s is not None and s["status"] == "finished", s
    assert s["final"]["val_accuracy"] >= 0.95
    assert s["epochs_done"] == 15 and s["workers"] == workers
    assert s["samples"] > 0 and s["train_s"] > 0 and s["samples_per_s"] > 0
    assert s["wall_s"] >= s["train_s"]

    run_dir = session.run_dir
    assert run_dir is not None
    records = list(read_metrics(run_dir / "metrics.jsonl"))
    steppers = {r["worker"] for r in records if r["kind"] == "step"}
    assert steppers == set(range(workers))
    for r in records:
        assert "t" in r and r["kind"] in ("step", "eval", "state", "log")
    evals = [r for r in records if r["kind"] == "eval"]
    evaluators = {r["worker"] for r in evals}
    for w in evaluators:
        assert sorted(r["epoch"] for r in evals if r["worker"] == w) == list(range(1, 16))
    step = next(r for r in records if r["kind"] == "step")
    assert set(step) >= {"worker", "epoch", "step", "samples", "loss", "lr"}
    assert (run_dir / "config.toml").read_text() == cfg.to_toml()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"

    # the checkpoint rebuilds the final model, and it is the one the session hands out
    ckpt = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    rebuilt = model_from_checkpoint(ckpt)
    final = session.final_model()
    x = session._ctx.data.val.x[:32]
    assert torch.allclose(rebuilt(x), final(x))
    # the parent's copy is the trained one (workers trained the shared-memory weights, not copies)
    accuracy = (final(session._ctx.data.val.x).argmax(1) == session._ctx.data.val.y).float().mean().item()
    assert abs(accuracy - s["final"]["val_accuracy"]) < 0.02
    if strategy == "sweep":
        # best_lr is the rate of the worker whose evaluation scored highest of every recorded one
        rates = (0.01, 0.05, 0.1)
        monitor = s["best"]["monitor"]
        assert monitor == "val_accuracy"  # higher is better
        top = max(r[monitor] for r in evals)
        assert s["best"]["value"] == top
        assert s["best_worker"] in {r["worker"] for r in evals if r[monitor] == top}
        assert s["best_lr"] == rates[s["best_worker"]]
        assert len(s["sweep"]) == 3
        # the winner is the worker whose evaluation made best.pt; the final figures are that worker's
        assert s["best_worker"] == s["best"]["worker"]
        winner = next(e for e in s["sweep"] if e["worker"] == s["best_worker"])
        assert s["final"]["val_accuracy"] == winner["val_accuracy"]


def _steps(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["kind"] == "step"]


def test_pause_resume_then_finish(runs_dir: Path) -> None:
    cfg = cfg_for(
        "data.source=builtin:synthetic?n=20000&features=32&classes=5",
        "train.epochs=4",
        "model.hidden=[128]",
        "train.batch_size=32",
    )
    session = Session(cfg, runs_dir=runs_dir)
    buf = RecordBuffer()
    session.add_listener(buf.put)
    session.start()
    try:
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while not _steps(seen) and time.monotonic() < deadline:
            seen += buf.drain(0.1)
        assert _steps(seen), "no step records before pause"

        session.pause()
        # the current batch may still end: wait until every worker reports paused
        paused: set[int] = set()
        deadline = time.monotonic() + 30
        while len(paused) < session.num_workers and time.monotonic() < deadline:
            for r in buf.drain(0.1):
                if r["kind"] == "state" and r["worker"] is not None and r["state"] == "paused":
                    paused.add(r["worker"])
        assert paused == set(range(session.num_workers))
        time.sleep(1.0)
        assert _steps(buf.drain(0)) == [], "step records arrived while paused"
        assert session.state == "paused"

        session.resume()
        deadline = time.monotonic() + 30
        after: list[dict[str, Any]] = []
        while not _steps(after) and time.monotonic() < deadline:
            after += buf.drain(0.1)
        assert _steps(after), "no step records after resume"
        assert session.wait(120) == "finished"
        assert session.summary["epochs_done"] == 4
        assert session.summary["train_s"] < session.summary["wall_s"] - 0.9  # paused second not counted
    finally:
        if session.active:
            session.stop(5)


@pytest.mark.parametrize("strategy", ["hogwild", "ddp"])
def test_stop_ends_every_process_and_keeps_a_checkpoint(strategy: str, runs_dir: Path) -> None:
    cfg = cfg_for(f"parallel.strategy={strategy}", "train.epochs=1000")
    session = Session(cfg, runs_dir=runs_dir)
    buf = RecordBuffer()
    session.add_listener(buf.put)
    session.start()
    deadline = time.monotonic() + 60
    while not _steps(buf.drain(0.1)) and time.monotonic() < deadline:
        pass
    pids = session.worker_pids()
    assert len(pids) == 2
    t0 = time.monotonic()
    status = session.stop(timeout=5)
    assert time.monotonic() - t0 < 30
    assert status == "stopped"
    assert session.worker_pids() == []
    assert session.summary["status"] == "stopped"
    ckpt = load_checkpoint(session.run_dir / "checkpoints" / "last.pt")
    model = model_from_checkpoint(ckpt)
    assert model(torch.zeros(1, 64)).shape == (1, 10)
    assert all(opt is not None for opt in ckpt["optimizers"])


def test_record_buffer_close_wakes_reader() -> None:
    buf = RecordBuffer()
    buf.put([{"kind": "log"}])
    assert buf.drain(0) == [{"kind": "log"}]
    buf.close()
    t0 = time.monotonic()
    assert buf.drain(60) == []
    assert time.monotonic() - t0 < 30  # woken by close, not by the timeout


def test_a_stop_while_the_data_loads_ends_the_start_with_nothing_made(
    runs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import core.data.prepare
    from core.readers import check_stop

    session = Session(cfg_for(), runs_dir=runs_dir)

    def reading(cfg: Any, task: str = "auto") -> Any:
        session.request_stop()  # the user's Stop (or Ctrl-C) while the file is being read
        check_stop()  # what every reader asks between its blocks
        raise AssertionError("the read went on after the stop")

    monkeypatch.setattr(core.data.prepare, "read_source", reading)
    session.start()
    assert session.state == "stopped" and session.run_dir is None and session.worker_pids() == []
    assert not runs_dir.is_dir() or not [p for p in runs_dir.iterdir() if p.is_dir()]
