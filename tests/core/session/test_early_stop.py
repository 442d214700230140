"""Early stopping by default on a table: a small table overfits within a few epochs of its best figure."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest

from core import cli
from core.config import Config, apply_overrides
from core.runfiles.writing import read_metrics
from core.session import Session


@pytest.fixture(scope="module")
def noisy_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 rows whose label is mostly noise: the validation figure peaks early, then wanders."""
    rng = np.random.default_rng(3)
    path = tmp_path_factory.mktemp("noisy") / "noisy.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["a", "b", "c", "label"])
        for _ in range(300):
            a, b, c = rng.normal(size=3)
            w.writerow([f"{a:.3f}", f"{b:.3f}", f"{c:.3f}", "yes" if a + rng.normal(0, 2.0) > 0 else "no"])
    return path


def test_patience_is_auto_on_a_table_only() -> None:
    cfg = Config()
    assert cfg.train.early_stop_patience == -1
    assert cfg.early_stop_patience(table=True) == 5 and cfg.early_stop_patience(table=False) == 0
    sweep = apply_overrides(cfg, ["parallel.strategy=sweep"])
    assert sweep.early_stop_patience(table=True) == 0  # a sweep's workers compare settings over the same epochs
    assert apply_overrides(cfg, ["train.early_stop_patience=0"]).early_stop_patience(table=True) == 0
    assert apply_overrides(cfg, ["train.early_stop_patience=3"]).early_stop_patience(table=False) == 3


@pytest.mark.parametrize("strategy", ["single", "hogwild", "ddp"])
def test_a_table_stops_early_by_default(strategy: str, noisy_csv: Path, runs_dir: Path) -> None:
    cfg = apply_overrides(
        Config(),
        [
            f'data.source="csv:{noisy_csv}"',
            f"parallel.strategy={strategy}",
            "parallel.workers=1" if strategy == "single" else "parallel.workers=2",
            "train.epochs=80",
            "model.hidden=[64, 64]",
        ],
    )
    session = Session(cfg, runs_dir=runs_dir)
    session.start()
    if session.wait(240) is None:
        session.stop(5)
        pytest.fail("run did not end in time")
    s = session.summary
    assert s is not None and s["status"] == "finished", s
    best = s["best"]["epoch"]
    assert s["epochs_done"] < 80
    if strategy != "hogwild":  # hogwild's workers run apart: on a loaded machine one may start epochs late, and
        assert best + 5 <= s["epochs_done"]  # the epochs every worker completed can be fewer than the deciding one
    # one count: the epochs every worker completed, as the end line, progress bar and Runs table say it (the
    # workers run past the evaluation that decides, their records lag them)
    done = s["epochs_done"]
    assert s["stop_reason"].startswith(f"stopped early at epoch {done} of 80")
    assert s["stop_reason"].endswith(
        f": val_accuracy has not improved for 5 epochs (best {s['best']['value']:.4g} at epoch {best})"
    )
    assert ("decided" in s["stop_reason"]) == (f"epoch {done} of 80 (" in s["stop_reason"])
    assert session.run_dir is not None
    records = list(read_metrics(session.run_dir / "metrics.jsonl"))
    assert [r["message"] for r in records if r["kind"] == "log" and "stopped early" in r["message"]] == [
        s["stop_reason"]
    ]
    ended = [
        r for r in records if r["kind"] == "state" and r["worker"] is not None and r["state"] in ("finished", "stopped")
    ]
    assert {r["worker"] for r in ended} == set(range(s["workers"]))  # every worker ended with the run


def test_cli_says_the_run_finished_early(noisy_csv: Path, runs_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = noisy_csv.parent / "c.toml"
    config.write_text(
        f'[data]\nsource = "csv:{noisy_csv}"\n[train]\nepochs = 80\n[parallel]\nstrategy = "single"\nworkers = 1\n'
    )
    assert cli.main(["train", str(config), "--runs-dir", str(runs_dir)]) == 0
    err = capsys.readouterr().err
    found = re.search(r"finished: (\d+) of 80 epochs", err)
    assert found is not None, err
    assert f"stopped early at epoch {found.group(1)} of 80" in err  # the end line's count


def test_evaluations_that_arrive_after_the_early_stop_do_not_move_its_best() -> None:
    """The records lag the workers: a worker may have run past the stop before the collector reads the epoch
    that decides it. The summary's best and the stop's words must then still name the same epoch."""
    from types import SimpleNamespace

    from core.session.machinery.collector import EARLY_STOP_GRACE_S, Collector
    from core.session.machinery.facts import RunFacts

    cfg = Config()
    logs: list[str] = []
    stops: list[bool] = []
    session = SimpleNamespace(
        strategy=SimpleNamespace(keeps_best=True),
        config=cfg,
        info=SimpleNamespace(task="classification", imbalanced=False, schema=object()),
        request_stop=lambda timeout: stops.append(timeout),
    )
    facts = RunFacts(cfg)  # where the collector writes what the session shows
    collector = Collector.__new__(Collector)
    collector.session = session  # type: ignore[assignment]
    collector.ctx = SimpleNamespace(log=lambda level, message: logs.append(message), facts=facts)  # type: ignore[assignment]
    accuracy = [0.5, 0.6, 0.65, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.7, 0.8]  # epochs 1..11; 10 and 11 came late
    for epoch, value in enumerate(accuracy, start=1):
        collector._on_eval({"worker": 0, "epoch": epoch, "val_accuracy": value, "val_loss": 1.0 - value})
    assert stops == [EARLY_STOP_GRACE_S]  # one stop, unhurried: a worker still starting may stop cleanly
    assert facts.best == {"monitor": "val_accuracy", "value": 0.65, "worker": 0, "epoch": 3}
    assert facts.early_stop == {"monitor": "val_accuracy", "patience": 5, "epoch": 8}
    # the line is the end's, once the epochs the run completed are known
    assert facts.stop_reason == "stopping early: val_accuracy has not improved for 5 epochs (best 0.65 at epoch 3)"
    assert logs == []
