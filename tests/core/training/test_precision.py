"""A precision object's state (the gradient scaler's scale and growth tracker) survives a checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.config import Config, apply_overrides
from core.launchers.torchrun import TorchrunLauncher
from core.session import Session
from core.session.start_point import StartPoint, resume_point
from core.training.checkpoint import load_checkpoint, state_from_bytes
from core.training.precision import FullPrecision, MixedPrecision, Precision, ScaledMixedPrecision

CPU = torch.device("cpu")


def _steps(precision: Precision, grads: list[float]) -> None:
    """One optimizer step per entry; an infinite entry makes that step's gradient overflow."""
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for g in grads:
        opt.zero_grad(set_to_none=True)
        loss = (model(torch.ones(1, 2)) * g).sum()
        precision.backward(loss)
        precision.step(opt)


def test_the_scaler_state_round_trips_into_a_fresh_object() -> None:
    trained = ScaledMixedPrecision(CPU)
    _steps(trained, [1.0, float("inf"), 1.0, 1.0, 1.0])  # one overflow halves the scale; three steps since
    state = trained.state_dict()
    assert state["scale"] == 65536.0 / 2 and state["_growth_tracker"] == 3

    fresh = ScaledMixedPrecision(CPU)
    assert fresh.state_dict() != state
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    _steps(trained, [1.0])
    _steps(fresh, [1.0])
    assert fresh.state_dict() == trained.state_dict()  # both go on from the same point


def test_a_step_without_state_gives_and_takes_an_empty_one() -> None:
    for precision in (FullPrecision(), MixedPrecision(CPU, torch.bfloat16)):
        assert precision.state_dict() == {}
        precision.load_state_dict({})
    scaled = ScaledMixedPrecision(CPU)
    scaled.load_state_dict({})  # a checkpoint of a step that kept none: a fresh scaler
    assert scaled.state_dict() == ScaledMixedPrecision(CPU).state_dict()


def test_a_checkpoint_without_precision_states_starts_fresh_ones() -> None:
    old = {"progress": [{"epoch": 2, "batch": 0, "step": 9, "samples": 576}], "optimizers": [None], "rng": None}
    assert StartPoint(old).precision_state(0) is None
    assert StartPoint(old).worker_fields(0, 1)["precision_state"] is None
    assert StartPoint().precision_state(0) is None
    state = {"scale": 8.0, "_growth_tracker": 5}
    carried = StartPoint({**old, "precisions": [state]})
    assert state_from_bytes(carried.worker_fields(0, 1)["precision_state"]) == state


@pytest.fixture
def scaled_on_cpu(monkeypatch: pytest.MonkeyPatch) -> list[ScaledMixedPrecision]:
    """Workers train in this process (one rank, on a thread) with a gradient scaler on the CPU; the objects made."""
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(name, value)
    made: list[ScaledMixedPrecision] = []

    def scaled(precision: str, device: torch.device) -> Precision:
        made.append(ScaledMixedPrecision(device))
        if len(made) == 1:  # the first run's scaler starts from a scale no fresh one has
            made[0].scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=10**6)
        else:
            made[-1].scaler = torch.amp.GradScaler("cpu", growth_interval=10**6)
        return made[-1]

    monkeypatch.setattr("core.worker.trainer.precision_for", scaled)
    return made


def _train(session: Session) -> dict:
    session.start()
    assert session.wait(120) == "finished", session.error
    return load_checkpoint(session.run_dir)


def test_a_resumed_run_goes_on_with_the_scale_its_checkpoint_holds(
    scaled_on_cpu: list[ScaledMixedPrecision], runs_dir: Path
) -> None:
    cfg = apply_overrides(Config(), ["parallel.strategy=single", "train.epochs=1", "train.seed=5"])
    first = _train(Session(cfg, runs_dir=runs_dir, launcher=TorchrunLauncher()))
    steps = first["progress"][0]["step"]
    assert steps > 0
    assert len(first["precisions"]) == 1
    assert first["precisions"][0]["scale"] == 1024.0 and first["precisions"][0]["_growth_tracker"] == steps

    resumed_cfg, start, base, name = resume_point(runs_dir / first_run_name(runs_dir), epochs=2)
    second = _train(Session(resumed_cfg, runs_dir=base, name=name, start=start, launcher=TorchrunLauncher()))
    assert len(scaled_on_cpu) == 2
    total = second["progress"][0]["step"]
    assert total == 2 * steps
    # a fresh scaler would say 65536 and count only the second epoch's steps
    assert second["precisions"][0]["scale"] == 1024.0 and second["precisions"][0]["_growth_tracker"] == total


def first_run_name(runs_dir: Path) -> str:
    (run,) = [p for p in runs_dir.iterdir() if p.is_dir()]
    return run.name
