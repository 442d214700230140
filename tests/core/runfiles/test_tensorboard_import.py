"""Another tool's TensorBoard logs (Lightning's, made with tensorboardX as Lightning writes them) imported as
read-only runs: their records are the logs' scalars, once, and a folder without logs is one line, exit 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.cli import main
from core.errors import RunError
from core.runfiles.layout import RunDir, list_runs
from core.runfiles.tensorboard_import import import_tensorboard
from core.session.reading.timeline import Timeline
from tests.tensorboard_logs import lightning_log, train_loss, val_acc, val_loss


def test_a_lightning_log_becomes_a_run_whose_records_are_its_scalars(tmp_path: Path, runs_dir: Path) -> None:
    log = lightning_log(tmp_path, epochs=3, batches=16, every=5)
    (found,) = import_tensorboard(log.path, runs_dir)
    assert found.run_dir is not None and not found.already
    run = RunDir(found.run_dir)
    assert re.fullmatch(r"\d{8}-\d{6}-lightning_logs-version_0", run.name)
    assert sorted(p.name for p in run.path.iterdir()) == ["metrics.jsonl", "summary.json"]  # no config, no weights
    assert run.is_run() and not run.has_weights() and list_runs(runs_dir) == [run]

    records = run.read_records()
    steps = [r for r in records if r["kind"] == "step"]
    assert [r["step"] for r in steps] == log.steps
    assert [r["loss"] for r in steps] == pytest.approx([train_loss(s) for s in log.steps], rel=1e-6)
    assert [r["epoch"] for r in steps] == [s // 16 + 1 for s in log.steps]  # Lightning counts epochs from 0
    assert all(r["worker"] == 0 and "samples" not in r for r in steps)  # the logs count no samples
    evals = [r for r in records if r["kind"] == "eval"]
    assert [(r["epoch"], r["step"]) for r in evals] == [(1, 15), (2, 31), (3, 47)]
    assert [r["val_loss"] for r in evals] == pytest.approx([val_loss(e) for e in range(3)], rel=1e-6)
    assert [r["val_accuracy"] for r in evals] == pytest.approx([val_acc(e) for e in range(3)], rel=1e-6)
    assert "grad_norm" in records[0]["message"] and records[0]["kind"] == "log"  # what no curve shows, said

    summary = run.read_summary()
    assert summary is not None
    assert summary["status"] == "finished" and summary["epochs_done"] == 3 and summary["steps"] == 47
    assert summary["final"]["train_loss"] == pytest.approx(train_loss(47) + 0.2, rel=1e-6)  # train_loss_epoch
    assert summary["final"]["val_accuracy"] == pytest.approx(val_acc(2), rel=1e-6)
    imported = summary["imported"]
    assert imported["from"] == "tensorboard" and imported["path"] == str(log.path.resolve())
    assert imported["tags"] == {
        "epoch": "epoch",
        "train_loss_epoch": "final.train_loss",
        "train_loss_step": "step.loss",
        "val_acc": "eval.val_accuracy",
        "val_loss": "eval.val_loss",
    }
    assert imported["not_drawn"] == ["grad_norm", "hp_metric", "samples (images)"]
    assert imported["hparams"] == {"lr": 0.05, "hidden": 16, "optimizer": "sgd"}
    assert found.not_drawn == tuple(imported["not_drawn"])

    # On the epoch axis a step lies within its epoch, by its step (no samples to go by)
    placed = [p.epoch for r, p in Timeline.of(records).place(records) if r["kind"] == "step"]
    assert placed == sorted(placed) and 0.0 < placed[0] < 1.0 and placed[-1] <= 3.0


def test_a_folder_of_versions_is_one_run_each_and_imported_once(
    tmp_path: Path, runs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = lightning_log(tmp_path, version=0, extra=False)
    lightning_log(tmp_path, version=1, epochs=2, extra=False)
    assert main(["runs", "--import-tensorboard", str(tmp_path / "lightning_logs"), "--runs-dir", str(runs_dir)]) == 0
    out = capsys.readouterr()
    made = out.out.splitlines()
    assert len(made) == 2 and out.err == ""
    assert [Path(p).name[16:] for p in made] == ["lightning_logs-version_0", "lightning_logs-version_1"]
    assert [RunDir(p).read_summary()["epochs_done"] for p in made] == [3, 2]  # type: ignore[index]

    # the same logs again (one version of them): its run is named, nothing new is made
    assert main(["runs", "--import-tensorboard", str(first.path), "--runs-dir", str(runs_dir)]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == [made[0]]
    assert "imported already" in out.err and made[0] in out.err
    assert len(list_runs(runs_dir)) == 2

    # the listing says which runs were imported
    assert main(["runs", "--runs-dir", str(runs_dir)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert all(" imported " in line for line in listed[1:]) and len(listed) == 3


@pytest.mark.parametrize("case", ["missing", "empty", "traindesk_tb"])
def test_a_folder_without_logs_is_one_line_and_exit_2(
    case: str, tmp_path: Path, runs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "logs"
    if case == "empty":
        (folder / "sub").mkdir(parents=True)
    elif case == "traindesk_tb":  # a TrainDesk run's own tb/ is not another tool's logs
        run = folder / "20250101-100000-run"
        run.mkdir(parents=True)
        (run / "config.toml").write_text("")
        lightning_log(tmp_path, extra=False).path.rename(run / "tb")
    code = main(["runs", "--import-tensorboard", str(folder), "--runs-dir", str(runs_dir)])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert len(out.err.splitlines()) == 1 and str(folder) in out.err
    assert list_runs(runs_dir) == []


def test_a_plain_summary_writer_log_without_hparams_imports(tmp_path: Path, runs_dir: Path) -> None:
    """The most common log: torch's SummaryWriter alone, no hparams; a scalar that is NaN throughout is named,
    not drawn."""
    from torch.utils.tensorboard import SummaryWriter

    folder = tmp_path / "plain"
    with SummaryWriter(str(folder)) as writer:
        for step in range(6):
            writer.add_scalar("loss", 1.0 / (step + 1), step)
            writer.add_scalar("grad_norm", float("nan"), step)
            if step % 2 == 1:
                writer.add_scalar("val_loss", 2.0 / (step + 1), step)
                writer.add_scalar("val_acc", 0.5 + 0.05 * step, step)
    (found,) = import_tensorboard(folder, runs_dir)
    assert found.run_dir is not None, found.skipped
    run = RunDir(found.run_dir)
    records = run.read_records()
    assert [r["step"] for r in records if r["kind"] == "step"] == list(range(6))
    evals = [r for r in records if r["kind"] == "eval"]
    assert [(r["epoch"], r["step"]) for r in evals] == [(1, 1), (2, 3), (3, 5)]
    assert [r["val_accuracy"] for r in evals] == pytest.approx([0.55, 0.65, 0.75], rel=1e-6)
    summary = run.read_summary()
    assert summary is not None and summary["epochs_done"] == 3
    assert summary["imported"]["hparams"] == {} and "grad_norm" in summary["imported"]["not_drawn"]


def test_a_log_whose_every_scalar_is_nan_is_skipped_with_its_reason(tmp_path: Path, runs_dir: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    folder = tmp_path / "nan"
    with SummaryWriter(str(folder)) as writer:
        for step in range(3):
            writer.add_scalar("loss", float("nan"), step)
    with pytest.raises(RunError, match="nothing to import") as info:
        import_tensorboard(folder, runs_dir)
    assert "NaN" in str(info.value) and len(str(info.value).splitlines()) == 1
    assert list_runs(runs_dir) == []
