"""core.services.runs, the faces' door to runs: a run made through it, its shape saved in its summary and read
back from a past run, a run's folder read and changed through it."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Config, apply_overrides, to_toml
from core.services.runs import files, past, start
from core.services.runs.shape import RunShape, shape_of, shape_of_run, strategy_facts


@pytest.mark.slow
def test_a_run_made_through_the_door_saves_its_shape_and_reads_back_as_a_past_run(runs_dir: Path) -> None:
    cfg = apply_overrides(
        Config(),
        ['data.source="builtin:iris"', 'parallel.strategy="sweep"', "parallel.workers=2", "train.epochs=2"]
        + ["parallel.sweep_lr=[0.05, 0.01]"],
    )
    handle = start.new_run(cfg, runs_dir, name="door")
    assert handle.shape.labels == ("lr 0.05", "lr 0.01") and handle.shape.samples_per_epoch is None
    handle.start()
    assert handle.wait(240) == "finished", handle.error
    assert handle.summary is not None and handle.run_dir is not None
    shape = RunShape.from_dict(handle.summary["shape"])
    assert shape == handle.shape  # the live handle's, once the data was known, is what the summary keeps
    assert shape is not None and shape.samples_per_epoch is not None and shape.samples_per_epoch > 0
    assert (shape.workers, shape.models, shape.separate, shape.sweep_lr) == (2, 2, True, (0.05, 0.01))
    assert (shape.task, shape.figure, shape.epochs, shape.trials) == ("classification", "val_accuracy", 2, None)

    run = past.read_past_run(handle.run_dir)
    assert run.shape == shape and run.name == handle.run_dir.name
    assert not past.is_live(handle.run_dir) and past.not_a_run(handle.run_dir) is None
    files.write_notes(handle.run_dir, name="my sweep")
    assert past.read_past_run(handle.run_dir).name == "my sweep"


def test_a_summary_without_a_shape_has_it_from_its_config() -> None:
    cfg = apply_overrides(
        Config(),
        ['parallel.strategy="search"', "parallel.workers=2", "search.trials=7", "search.optim.lr=[0.001, 0.1]"],
    )
    shape = shape_of_run({"status": "finished", "task": "regression"}, cfg)
    assert shape is not None
    assert (shape.trials, shape.counts_trials, shape.task, shape.figure) == (7, True, "regression", "val_rmse")
    assert shape.labels == ("worker 0 (trials)", "worker 1 (trials)")
    assert shape_of_run({"shape": shape.as_dict()}, None) == shape
    assert shape_of_run({}, None) is None
    assert RunShape.from_dict({"strategy": "ddp"}) is None and RunShape.from_dict("ddp") is None


def test_the_strategies_facts_for_a_settings_panel() -> None:
    single = strategy_facts("single")
    assert single.fixed_workers == 1 and single.description
    assert "parallel.sweep_lr" in strategy_facts("sweep").own_keys
    assert shape_of(Config()).workers == Config().parallel.workers


def test_a_folder_that_is_not_a_run_says_why(tmp_path: Path) -> None:
    assert past.not_a_run(tmp_path) == f"{tmp_path} has no metrics.jsonl: not a run folder"
    (tmp_path / "config.toml").write_text(to_toml(Config()))
    assert past.read_past_run(tmp_path).records == []


def test_the_trash_keeps_every_run_it_is_given(tmp_path: Path) -> None:
    for _ in range(2):
        run = tmp_path / "20260101-000000-a"
        run.mkdir()
        (run / "metrics.jsonl").write_text("")
        files.trash_run(run)
    assert sorted(p.name for p in (tmp_path / files.TRASH_DIR).iterdir()) == [
        "20260101-000000-a",
        "20260101-000000-a-1",
    ]
