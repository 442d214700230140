"""Schedules, early stopping, the best checkpoint, the lr finder and mixed precision."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from core.cli import main
from core.config import Config, ConfigError, ScheduleConfig, apply_overrides
from core.data import full_tensors, load_data
from core.runfiles.writing import read_metrics
from core.services.lr_finder import find_lr, valley
from core.session import Session
from core.training.checkpoint import load_checkpoint, model_from_checkpoint
from core.training.models import build_model
from core.training.schedule import Plateau, lr_at, lr_sequence


def run(runs_dir: Path, *overrides: str) -> Session:
    cfg = apply_overrides(Config(), ["parallel.strategy=single", *overrides])
    session = Session(cfg, runs_dir=runs_dir)
    session.start()
    if session.wait(180) is None:
        session.stop(5)
        pytest.fail("run did not end in time")
    return session


# ----------------------------------------------------------------------------- schedules (pure)


def test_cosine_falls_to_min_lr_at_the_last_step() -> None:
    lrs = lr_sequence(ScheduleConfig(kind="cosine", min_lr=0.001), 0.1, steps_per_epoch=10, epochs=3)
    assert len(lrs) == 30 and lrs[-1] == pytest.approx(0.001)
    assert all(a >= b for a, b in zip(lrs, lrs[1:])) and lrs[0] < 0.1


def test_step_warmup_and_one_cycle() -> None:
    step = lr_sequence(ScheduleConfig(kind="step", step_epochs=2, gamma=0.5), 0.1, 4, 5)
    assert [step[i * 4] for i in range(5)] == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.025])
    warm = lr_sequence(ScheduleConfig(warmup_steps=4), 0.2, 4, 2)
    assert warm[:5] == pytest.approx([0.05, 0.1, 0.15, 0.2, 0.2])
    cycle = lr_sequence(ScheduleConfig(kind="one-cycle", pct_start=0.25, min_lr=0.0), 0.4, 10, 4)
    peak = max(range(40), key=lambda i: cycle[i])
    assert cycle[0] < 0.4 / 10 and cycle[peak] == pytest.approx(0.4, rel=1e-2) and 8 <= peak <= 10
    assert cycle[-1] == pytest.approx(0.0, abs=1e-12)


def test_the_lr_depends_only_on_the_position_and_the_base() -> None:
    """A resumed worker recomputes it; a base changed while paused becomes the new base."""
    cfg = ScheduleConfig(kind="cosine", min_lr=0.0)
    assert lr_at(cfg, 0.1, 57, 3, 0.6) == lr_at(cfg, 0.1, 57, 3, 0.6)
    assert lr_at(cfg, 0.05, 57, 3, 0.6) == pytest.approx(lr_at(cfg, 0.1, 57, 3, 0.6) / 2)


def test_plateau_lowers_the_factor_after_patience() -> None:
    plateau = Plateau(ScheduleConfig(kind="plateau", patience=1, gamma=0.5), "val_loss")
    scales = []
    for loss in [1.0, 0.9, 0.95, 0.95, 0.95, 0.95, 0.8]:
        plateau.observe({"val_loss": loss})
        scales.append(plateau.scale)
    assert scales == [1, 1, 1, 0.5, 0.5, 0.25, 0.25]


def test_precision_16_needs_cuda() -> None:
    with pytest.raises(ConfigError, match="parallel.precision"):
        apply_overrides(Config(), ['parallel.precision="16-mixed"'])


# ----------------------------------------------------------------------------- real runs


def test_cosine_run_records_the_lr_and_keeps_the_best_weights(runs_dir: Path, tmp_path: Path) -> None:
    session = run(
        runs_dir,
        "train.epochs=4",
        'schedule.kind="cosine"',
        "schedule.min_lr=0.001",
        "schedule.warmup_steps=5",
        "train.monitor=val_loss",
    )
    assert session.summary is not None and session.summary["status"] == "finished"
    run_dir = session.run_dir
    assert run_dir is not None
    records = list(read_metrics(run_dir / "metrics.jsonl"))
    steps = [r for r in records if r["kind"] == "step"]
    assert steps[-1]["lr"] == pytest.approx(0.001)
    assert steps[0]["lr"] < 0.05 and max(r["lr"] for r in steps) <= 0.05
    # best.pt holds the weights that were evaluated at the best epoch
    evals = [r for r in records if r["kind"] == "eval"]
    best_eval = min(evals, key=lambda r: r["val_loss"])
    best = load_checkpoint(run_dir / "checkpoints" / "best.pt")
    assert best["epoch"] == best_eval["epoch"] and best["value"] == pytest.approx(best_eval["val_loss"])
    model = model_from_checkpoint(best)
    cfg = session.config
    data = load_data(cfg.data, seed=cfg.train.seed, share=False)
    x, y = full_tensors(data.val, data.info)
    with torch.no_grad():
        assert F.cross_entropy(model(x), y).item() == pytest.approx(best_eval["val_loss"], rel=1e-5)
    # export --checkpoint best writes those weights
    out = tmp_path / "best.safetensors"
    assert main(["export", str(run_dir), "--format", "safetensors", "--checkpoint", "best", "--out", str(out)]) == 0
    from safetensors.torch import load_file

    exported = load_file(str(out))
    for key, value in best["model"].items():
        assert torch.equal(exported[key], value), key
    # with best.pt there, export and evaluate take it without being told; eval.json is its record
    out_default = tmp_path / "default.safetensors"
    assert main(["export", str(run_dir), "--format", "safetensors", "--out", str(out_default)]) == 0
    assert out_default.read_bytes() == out.read_bytes()
    assert json.loads((run_dir / "eval.json").read_text())["checkpoint"]["which"] == "best"
    (run_dir / "eval.json").unlink(missing_ok=True)
    assert main(["evaluate", str(run_dir), "--checkpoint", "last"]) == 0
    assert not (run_dir / "eval.json").exists()
    assert main(["evaluate", str(run_dir), "--json"]) == 0
    assert json.loads((run_dir / "eval.json").read_text())["checkpoint"]["which"] == "best"


def test_early_stopping_ends_the_run_finished_with_its_reason(runs_dir: Path) -> None:
    session = run(runs_dir, "train.epochs=200", "train.early_stop_patience=3", "optim.lr=0.1", "train.monitor=val_loss")
    s = session.summary
    assert s is not None and s["status"] == "finished", s
    assert s["epochs_done"] < 60 and s["stop_reason"].startswith(f"stopped early at epoch {s['epochs_done']} of 200")
    assert f"val_loss has not improved for 3 epochs (best {s['best']['value']:.4g} at epoch" in s["stop_reason"]
    assert s["best"]["epoch"] + 3 <= s["epochs_done"] + 1
    assert session.run_dir is not None
    logs = [r["message"] for r in read_metrics(session.run_dir / "metrics.jsonl") if r["kind"] == "log"]
    assert s["stop_reason"] in logs


def test_bf16_mixed_trains(runs_dir: Path) -> None:
    session = run(runs_dir, "train.epochs=4", 'parallel.precision="bf16-mixed"', "optim.lr=0.1")
    s = session.summary
    assert s is not None and s["status"] == "finished" and s["final"]["val_accuracy"] >= 0.9, s


# ----------------------------------------------------------------------------- the lr finder


def test_valley_is_inside_the_longest_fall() -> None:
    losses = [3.0, 3.1, 2.9, 2.5, 2.0, 1.5, 1.2, 1.1, 4.0, 9.0]
    assert 3 <= valley(list(range(10)), losses) <= 6


def test_lr_finder_suggests_inside_the_range_and_leaves_weights_alone() -> None:
    cfg = Config()
    data = load_data(cfg.data, seed=0, share=False)
    model = build_model(cfg.model, data.info.input_shape, data.info.num_classes)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = find_lr(cfg, model=model, start=1e-5, end=10.0, steps=60)
    assert 1e-5 <= result.suggestion <= 10.0 and result.suggestion == result.lrs[result.index]
    assert all(math.isfinite(v) for v in result.losses)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_lr_find_cli_prints_the_suggestion_last(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["lr-find", "--steps", "40", "--csv", str(tmp_path / "curve.csv")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert 1e-7 <= float(out[-1]) <= 10.0
    assert (tmp_path / "curve.csv").read_text().startswith("lr,loss\n")
    assert main(["lr-find", "--start", "0"]) == 2


# ----------------------------------------------------------------------------- augmentation


def test_augmentation_changes_training_images_only() -> None:
    from core.config import AugmentConfig
    from core.data import make_batches
    from core.training.augment import make_augment, preview

    assert make_augment(AugmentConfig(), (1, 8, 8)) is None  # off by default
    cfg = AugmentConfig(crop_scale=0.6, hflip=True, rotation=15.0, jitter=0.2)
    assert make_augment(cfg, None) is None  # not images
    data = load_data(Config().data, seed=0, share=False)
    x, _ = full_tensors(data.train, data.info)
    plain = next(make_batches(data.train, data.info, 16, 0).epoch(torch.arange(16)))[0]
    torch.manual_seed(0)
    changed = next(
        make_batches(data.train, data.info, 16, 0, make_augment(cfg, data.info.image_shape)).epoch(torch.arange(16))
    )[0]
    assert changed.shape == plain.shape and torch.isfinite(changed).all() and not torch.equal(changed, plain)
    assert torch.equal(plain, x[:16])
    grid = preview(cfg, x[:3].view(-1, 1, 8, 8), copies=4)
    assert grid.shape == (3, 4, 1, 8, 8)


def test_preview_grid_shows_each_sample_then_its_augmented_copies() -> None:
    import numpy as np

    from core.config import AugmentConfig
    from core.data import describe_source
    from core.training.augment import preview_grid

    grey = [a for a, _ in describe_source("builtin:digits").preview_images[:3]]
    colour = np.random.default_rng(0).integers(0, 256, (12, 10, 3), dtype=np.uint8)
    cfg = AugmentConfig(crop_scale=0.6, hflip=True, rotation=30.0, jitter=0.3)
    state = torch.get_rng_state()
    rows = preview_grid(cfg, grey + [colour], copies=4)
    assert torch.equal(torch.get_rng_state(), state)  # the caller's generator is left as it was
    assert len(rows) == 4 and all(len(r) == 5 for r in rows)
    for image, row in zip(grey + [colour], rows):
        assert np.array_equal(row[0], image)
        assert all(c.dtype == np.uint8 and c.shape == image.shape for c in row)
        assert any(not np.array_equal(c, image) for c in row[1:])
    again = preview_grid(cfg, grey + [colour], copies=4)  # seeded: the same grid for the same settings
    assert all(np.array_equal(a, b) for r, q in zip(rows, again) for a, b in zip(r, q))
    off = preview_grid(AugmentConfig(), grey, copies=2)
    assert all(np.array_equal(c, r[0]) for r in off for c in r)


def test_an_augmented_run_trains(runs_dir: Path) -> None:
    session = run(runs_dir, "train.epochs=4", "optim.lr=0.1", "augment.rotation=10.0", "augment.crop_scale=0.8")
    s = session.summary
    assert s is not None and s["status"] == "finished" and s["final"]["val_accuracy"] >= 0.85, s
