"""Every run writes TensorBoard files in its run directory (tb/): real runs read back with TensorBoard's reader.

A continued run appends to them, a fork writes its own, and a tb/ that cannot be written leaves the run
finished with one warning.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Config, apply_overrides
from core.runfiles.layout import RunDir
from core.runfiles.tensorboard_log import TensorBoardLog
from core.session import Session
from tests.core.runfiles.test_tensorboard_log import hparams, markers, read, scalars

IRIS = ['data.source="builtin:iris"', "train.epochs=2", "train.batch_size=16"]


def cfg_for(*overrides: str) -> Config:
    return apply_overrides(Config(), [*IRIS, *overrides])


def finished(session: Session) -> Path:
    session.start()
    status = session.wait(180)
    if status is None:
        session.stop(5)
        pytest.fail("run did not finish in time")
    assert status == "finished", session.error
    assert session.run_dir is not None
    return session.run_dir


def warnings_of(run: Path) -> list[str]:
    return [r["message"] for r in RunDir(run).read_records() if r["kind"] == "log" and r["level"] == "warning"]


@pytest.mark.parametrize(
    "strategy, workers, extra",
    [("single", 1, []), ("hogwild", 2, []), ("sweep", 2, ["parallel.sweep_lr=[0.01,0.05]"])],
)
def test_a_run_shows_every_worker_its_hparams_markers_and_confusion_matrix(
    strategy: str, workers: int, extra: list[str], runs_dir: Path
) -> None:
    cfg = cfg_for(f"parallel.strategy={strategy}", f"parallel.workers={workers}", *extra)
    run = finished(Session(cfg, runs_dir=runs_dir))
    acc = read(RunDir(run).tensorboard)
    tags = set(acc.Tags()["scalars"])
    evaluated = {r["worker"] for r in RunDir(run).read_records() if r["kind"] == "eval"}
    for w in range(workers):
        assert {f"loss/worker{w}", f"lr/worker{w}", f"samples_per_s/worker{w}"} <= tags, (w, tags)
        if w in evaluated:
            assert {f"val_loss/worker{w}", f"val_accuracy/worker{w}"} <= tags, (w, tags)
    assert evaluated and all(len(acc.Scalars(f"val_accuracy/worker{w}")) == 2 for w in evaluated)
    last = max(s for w in range(workers) for s, _ in scalars(acc, f"loss/worker{w}"))
    summary = RunDir(run).read_summary()
    assert summary is not None
    assert scalars(acc, "final/val_accuracy") == [(last, pytest.approx(summary["final"]["val_accuracy"]))]
    values, metrics = hparams(acc)
    assert values["parallel.strategy"] == strategy and values["parallel.workers"] == workers
    assert values["data.source"] == "builtin:iris" and "final/val_loss" in metrics
    said = [text for _, text in markers(acc)]
    assert said[0].startswith("run starting") and said[-1] == "run finished"
    [picture] = acc.Images("evaluation/confusion_matrix")
    assert picture.encoded_image_string.startswith(b"\x89PNG")
    assert warnings_of(run) == []


def test_a_regression_shows_its_figures_and_predicted_against_actual(runs_dir: Path) -> None:
    cfg = apply_overrides(
        Config(), ['data.source="builtin:diabetes"', "train.epochs=2", "parallel.strategy=single", "parallel.workers=1"]
    )
    run = finished(Session(cfg, runs_dir=runs_dir))
    acc = read(RunDir(run).tensorboard)
    assert {"loss/worker0", "val_rmse/worker0", "val_r2/worker0"} <= set(acc.Tags()["scalars"])
    [picture] = acc.Images("evaluation/predicted_vs_actual")
    assert picture.encoded_image_string.startswith(b"\x89PNG")
    assert acc.Tags()["images"] == ["evaluation/predicted_vs_actual"]


def test_a_continued_run_appends_and_a_fork_writes_its_own(runs_dir: Path) -> None:
    run = finished(Session(cfg_for("parallel.strategy=single", "parallel.workers=1"), runs_dir=runs_dir))
    first = [s for s, _ in scalars(read(RunDir(run).tensorboard), "loss/worker0")]

    assert finished(Session.from_run(run, epochs=4)) == run
    tb = RunDir(run).tensorboard
    assert len(list(tb.glob("events.out.tfevents.*"))) == 2  # a file for each part, in the same tb/
    acc = read(tb)
    both = [s for s, _ in scalars(acc, "loss/worker0")]
    assert both[: len(first)] == first and both[len(first)] > first[-1]  # the second part's steps go on
    assert len(acc.Scalars("val_accuracy/worker0")) == 4
    said = [text for _, text in markers(acc)]
    assert any(
        t.startswith("continued from") and t.endswith(f"step {first[-1]} (its earlier part ended finished)")
        for t in said
    ), said

    fork = finished(Session.fork(run, {"optim.lr": 0.01, "train.epochs": 6}))
    assert fork != run
    acc = read(RunDir(fork).tensorboard)
    steps = [s for s, _ in scalars(acc, "loss/worker0")]
    assert steps[0] > both[-1] and len(list(RunDir(fork).tensorboard.iterdir())) == 1
    said = [text for _, text in markers(acc)]
    assert any(t.startswith(f"forked from {run.name}") and "optim.lr = 0.01" in t for t in said), said


def test_a_tb_that_is_a_file_leaves_the_run_finished_with_one_warning(runs_dir: Path) -> None:
    run = finished(Session(cfg_for("parallel.strategy=single", "parallel.workers=1"), runs_dir=runs_dir))
    tb = RunDir(run).tensorboard
    for f in tb.iterdir():
        f.unlink()
    tb.rmdir()
    tb.write_text("in the way\n")
    assert finished(Session.from_run(run, epochs=3)) == run
    [warning] = warnings_of(run)
    assert warning.startswith(f"tensorboard: cannot write {tb}") and "goes on without" in warning
    assert RunDir(run).read_summary()["epochs_done"] == 3


def test_a_writer_that_breaks_mid_run_warns_once(runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def broken(self: TensorBoardLog, records: list) -> None:
        calls.append(len(records))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(TensorBoardLog, "add", broken)
    session = Session(cfg_for("parallel.strategy=hogwild", "parallel.workers=2"), runs_dir=runs_dir)
    seen: list[dict] = []
    session.add_listener(seen.extend)
    run = finished(session)
    assert calls == [calls[0]]  # the first error stops the files: nothing is tried again
    [warning] = warnings_of(run)
    assert "No space left on device" in warning
    assert [r["message"] for r in seen if r["kind"] == "log" and r["level"] == "warning"] == [warning]
    assert RunDir(run).read_summary()["status"] == "finished"
