"""The types that travel between the worker, the session and checkpoints: Position, StartPoint, RunHandle."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from core.config import Config, apply_overrides
from core.session import RecordBuffer
from core.session.attached import AttachedSession
from core.session.handle import RunHandle
from core.session.session import Session
from core.session.start_point import StartPoint
from core.training.precision import FullPrecision, MixedPrecision, precision_for
from core.worker.position import START, Position


def test_a_position_is_the_same_flat_dict_as_checkpoints_and_records_hold() -> None:
    p = Position(epoch=3, batch=7, step=40, samples=2560, offset=448, lr_scale=0.5, lr_factor=0.1)
    assert p.as_dict() == {
        "epoch": 3,
        "batch": 7,
        "step": 40,
        "samples": 2560,
        "offset": 448,
        "lr_scale": 0.5,
        "lr_factor": 0.1,
    }
    assert Position.of(p.as_dict()) == p
    assert p.counters() == {"epoch": 3, "batch": 7, "step": 40, "samples": 2560}
    assert Position.COUNTERS == ("epoch", "batch", "step", "samples")


def test_an_older_progress_entry_without_offset_or_lr_scale_reads_with_their_defaults() -> None:
    entry = {"epoch": 2, "batch": 5, "step": 21, "samples": 1344}
    assert Position.holds(entry)
    assert Position.of(entry) == Position(2, 5, 21, 1344, offset=-1, lr_scale=1.0, lr_factor=1.0)
    assert not Position.holds({"epoch": 2, "batch": 5, "step": "21", "samples": 1344})
    assert not Position.holds(None)


def test_a_start_point_gives_each_worker_its_position_and_states() -> None:
    fresh = StartPoint()
    assert fresh.position(0) == START and fresh.states(0, 2) == (None, None)
    ckpt = {
        "progress": [
            {"epoch": 2, "batch": 1, "step": 9, "samples": 576, "offset": 64},
            {"epoch": 2, "batch": 1, "step": 9, "samples": 576},
        ],
        "optimizers": [None, {"state": {}, "param_groups": []}],
        "rng": None,
        "model": {"w": 1},
    }
    point = StartPoint(ckpt)
    assert point.position(0).offset == 64 and point.position(1).offset == -1
    optimizer, rng = point.states(1, 2)
    assert optimizer is not None and rng is None
    assert point.worker_fields(0, 2)["start"] == Position(2, 1, 9, 576, 64)
    assert point.model_states(2) == [{"w": 1}, {"w": 1}]
    assert "resuming at epoch 2, batch 1" in point.describe()


def test_precision_objects_by_name() -> None:
    cpu = torch.device("cpu")
    assert type(precision_for("32", cpu)) is FullPrecision
    bf16 = precision_for("bf16-mixed", cpu)
    assert isinstance(bf16, MixedPrecision) and bf16.dtype == torch.bfloat16
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    with bf16.autocast():
        loss = model(torch.ones(2, 3)).float().pow(2).mean()
    bf16.backward(loss)
    bf16.step(opt)
    assert not torch.equal(before, model.weight)


def _members(protocol: type) -> set[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {
        n for n, v in vars(protocol).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))
    }
    return names


def test_session_and_attached_session_both_have_the_run_handle_face(tmp_path: Path) -> None:
    session = Session(Config())
    missing = sorted(n for n in _members(RunHandle) if not hasattr(session, n))
    assert missing == []

    running = Session(
        apply_overrides(Config(), ["parallel.strategy=single", "train.epochs=100000"]), runs_dir=tmp_path / "runs"
    )
    running.start()
    try:
        deadline = time.monotonic() + 60
        while running.state != "running" and time.monotonic() < deadline:
            running.wait(0.05)
        assert running.run_dir is not None
        attached = AttachedSession(running.run_dir)
        missing = sorted(n for n in _members(RunHandle) if not hasattr(attached, n))
        assert missing == []
        assert attached.attached and attached.run_dir == running.run_dir and attached.num_workers == 1
        assert attached.config == running.config and attached.worker_pids() == []
        buf = RecordBuffer()
        attached.add_listener(buf.put)
        attached.start()
        for command, state in ((attached.pause, "paused"), (attached.resume, "running")):
            command()
            deadline = time.monotonic() + 60
            seen: set[str] = set()
            while state not in seen and time.monotonic() < deadline:
                seen |= {r["state"] for r in buf.drain(0.05) if r["kind"] == "state" and r["worker"] is None}
            assert state in seen and attached.state == state and attached.active
            assert running.state == state  # the run itself did it
        attached.request_stop()
        assert attached.wait(60) == "stopped" and not attached.active
        assert running.wait(60) == "stopped"
        assert attached.summary is not None and attached.summary["status"] == "stopped"
    finally:
        running.stop(10)
