"""Settings changed while paused, and forks: every worker applies them at the same point."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from core.config import Config, ConfigError, apply_overrides
from core.runfiles.writing import read_metrics
from core.session import RecordBuffer, Session


def cfg_for(*overrides: str) -> Config:
    return apply_overrides(Config(), list(overrides))


def pause_when_all_stepped(session: Session, buf: RecordBuffer, workers: int) -> None:
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and {r["worker"] for r in seen if r["kind"] == "step"} != set(range(workers)):
        seen += buf.drain(0.05)
    session.pause()
    paused: set[int] = set()
    while time.monotonic() < deadline and paused != set(range(workers)):
        paused |= {
            r["worker"]
            for r in buf.drain(0.05)
            if r["kind"] == "state" and r["state"] == "paused" and r["worker"] is not None
        }
    assert paused == set(range(workers))


def test_changes_made_while_paused_reach_every_worker_at_the_next_batch(runs_dir: Path) -> None:
    session = Session(
        cfg_for("parallel.strategy=hogwild", "parallel.workers=2", "train.epochs=90000"), runs_dir=runs_dir
    )
    buf = RecordBuffer()
    session.add_listener(buf.put)
    session.start()
    try:
        pause_when_all_stepped(session, buf, 2)
        with pytest.raises(ConfigError, match="model.hidden cannot change during a run"):
            session.resume({"model.hidden": [8]})
        with pytest.raises(ConfigError, match="optim.lr"):
            session.resume({"optim.lr": -1.0})
        assert session.state == "paused"
        session.resume({"optim.lr": 0.01, "train.batch_size": 32, "train.epochs": 90001})
        assert session.state == "running" and session.config.optim.lr == 0.01
        deadline = time.monotonic() + 60
        after: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
        while time.monotonic() < deadline and min(len(v) for v in after.values()) < 3:
            for r in buf.drain(0.05):
                if r["kind"] == "step":
                    after[r["worker"]].append(r)
    finally:
        session.stop(10)
    records = list(read_metrics(session.run_dir / "metrics.jsonl"))
    changes = [i for i, r in enumerate(records) if r["kind"] == "config"]
    assert len(changes) == 1
    change = records[changes[0]]
    assert change["changes"]["optim.lr"] == {"from": 0.05, "to": 0.01}
    assert change["changes"]["train.batch_size"] == {"from": 64, "to": 32}
    assert set(change["steps"]) == {"0", "1"}
    before = [r for r in records[: changes[0]] if r["kind"] == "step"]
    later = [r for r in records[changes[0] :] if r["kind"] == "step"]
    assert before and all(r["lr"] == 0.05 for r in before)
    assert {r["worker"] for r in later} == {0, 1} and all(r["lr"] == 0.01 for r in later)
    assert "lr = 0.01" in (session.run_dir / "config.toml").read_text()


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
def test_a_change_reaches_workers_that_never_reached_the_pause(runs_dir: Path) -> None:
    session = Session(
        cfg_for("parallel.strategy=hogwild", "parallel.workers=2", "train.epochs=90000"), runs_dir=runs_dir
    )
    buf = RecordBuffer()
    session.add_listener(buf.put)
    session.start()
    try:
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and seen != {0, 1}:
            seen |= {r["worker"] for r in buf.drain(0.05) if r["kind"] == "step"}
        pids = session.worker_pids()
        for pid in pids:  # a loaded machine: the workers get no time between the pause and the resume
            os.kill(pid, signal.SIGSTOP)
        try:
            session.pause()
            session.resume({"optim.lr": 0.01})
            changed_at = time.time()
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        after: dict[int, int] = {0: 0, 1: 0}
        while time.monotonic() < deadline and min(after.values()) < 3:
            for r in buf.drain(0.05):
                if r["kind"] == "step" and r["t"] > changed_at:
                    after[r["worker"]] += 1
    finally:
        session.stop(10)
    records = list(read_metrics(session.run_dir / "metrics.jsonl"))
    change = next(r for r in records if r["kind"] == "config")
    assert change["changes"] == {"optim.lr": {"from": 0.05, "to": 0.01}}
    later = [r for r in records if r["kind"] == "step" and r["t"] > change["t"]]
    assert {r["worker"] for r in later} == {0, 1}
    assert all(r["lr"] == 0.01 for r in later), [(r["worker"], r["step"], r["lr"]) for r in later if r["lr"] != 0.01]


def test_epochs_lowered_while_paused_end_the_run_there(runs_dir: Path) -> None:
    session = Session(cfg_for("parallel.strategy=single", "train.epochs=100000"), runs_dir=runs_dir)
    buf = RecordBuffer()
    session.add_listener(buf.put)
    session.start()
    try:
        pause_when_all_stepped(session, buf, 1)
        done = session._progress()[0]["epoch"] - 1
        session.resume({"train.epochs": done + 2})
        assert session.wait(60) == "finished"
    finally:
        if session.active:
            session.stop(10)
    assert session.summary["epochs_done"] == done + 2


def test_a_fork_starts_from_the_parents_checkpoint_and_names_it(runs_dir: Path) -> None:
    parent = Session(cfg_for("parallel.strategy=single", "train.epochs=3"), runs_dir=runs_dir)
    parent.start()
    assert parent.wait(120) == "finished"
    with pytest.raises(ConfigError, match="cannot change in a fork"):
        Session.fork(parent.run_dir, {"model.hidden": [8]})

    child = Session.fork(parent.run_dir, {"optim.lr": 0.01, "train.epochs": 5})
    buf = RecordBuffer()
    child.add_listener(buf.put)
    child.start()
    assert child.wait(120) == "finished"
    assert child.run_dir != parent.run_dir and child.run_dir.parent == parent.run_dir.parent
    s = child.summary
    assert s["status"] == "finished" and s["epochs_done"] == 5
    assert s["parent"]["name"] == parent.run_dir.name and s["parent"]["step"] == parent.summary["steps"]
    assert s["parent"]["changes"] == {"optim.lr": 0.01, "train.epochs": 5}
    steps = [r for r in read_metrics(child.run_dir / "metrics.jsonl") if r["kind"] == "step"]
    assert steps[0]["step"] > parent.summary["steps"] and all(r["lr"] == 0.01 for r in steps)
    assert parent.summary == __import__("json").loads((parent.run_dir / "summary.json").read_text())


def test_every_live_key_declares_an_effect_that_workers_apply() -> None:
    from core.config import FIELDS, LIVE_EFFECTS, LIVE_KEYS
    from core.worker.trainer import Trainer

    assert LIVE_KEYS, "no live keys: a paused run could change nothing"
    assert set(Trainer.LIVE_HANDLERS) == set(LIVE_EFFECTS)
    for effect, method in Trainer.LIVE_HANDLERS.items():
        assert callable(getattr(Trainer, method, None)), f"{effect}: Trainer.{method} is missing"
    assert {FIELDS[k].effect for k in LIVE_KEYS} <= set(LIVE_EFFECTS)
    assert FIELDS["train.batch_size"].effect == "batches" and FIELDS["optim.lr"].effect == "optimizer"
    assert not FIELDS["model.kind"].live


def test_a_key_declared_with_an_unknown_effect_is_refused() -> None:
    from core.config.fields import check_int, key

    with pytest.raises(ValueError, match="live effect 'reload'"):
        key(1, check_int, "int", effect="reload")
