"""Experiments against the real engine: sweeps, edits while paused, Continue, Fork, attaching to a CLI run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pyqtgraph as pg
import pytest

from core.config import Config
from core.runfiles.writing import read_metrics
from tests.cli_run import start_core

pytestmark = pytest.mark.slow


def counts(window: Any) -> dict[int, int]:
    """Points plotted per worker that has reported (curves of the others exist, empty, from the start)."""
    plotted = {w: window.plots.loss.point_count(w) for w in window.plots.loss.raw}
    return {w: n for w, n in plotted.items() if n}


def start_and_wait_points(qtbot: Any, window: Any, cfg: Config) -> None:
    window.panel.set_config(cfg)
    window.action_start.trigger()
    n = cfg.parallel.workers
    qtbot.waitUntil(lambda: len(counts(window)) == n and min(counts(window).values()) > 0, timeout=60_000)


def wait_end(qtbot: Any, window: Any, timeout: int = 90_000) -> None:
    qtbot.waitUntil(lambda: window.controller.ended, timeout=timeout)


def legend_labels(legend: pg.LegendItem) -> list[str]:
    return [label.text for _sample, label in legend.items]


def test_a_sweep_reads_as_a_sweep(qtbot: Any, make_window: Any) -> None:
    window = make_window()
    cfg = (
        Config()
        .replace("train", epochs=2)
        .replace("parallel", strategy="sweep", workers=3, sweep_lr=[0.2, 0.05, 0.001])
    )
    window.panel.set_config(cfg)
    window.action_start.trigger()
    wait_end(qtbot, window)
    assert window.controller.state == "finished"
    window.plots.flush()
    assert legend_labels(window.plots.loss.legends[0]) == ["lr 0.2", "lr 0.05", "lr 0.001"]  # no "mean"
    assert window.plots.loss.mean is None and len(window.plots.data.mean) == 0
    assert legend_labels(window.plots.val.legends[0]) == ["lr 0.2", "lr 0.05", "lr 0.001"]
    summary = json.loads((window.controller.run_dir / "summary.json").read_text())
    best = summary["best_worker"]
    winner = f"lr {summary['best_lr']:g}"
    assert winner in window.label_winner.text()
    assert f"sweep best: {winner}" in window.log_pane.toPlainText()
    assert winner in window.evaluate_view.label_context.text()
    assert window.plots.loss.smooth[best].opts["pen"].width() == 3  # highlighted
    sweep = window.findChild(pg.GraphicsLayoutWidget, "plot_sweep")
    assert sweep.isVisible()
    assert [round(v, 3) for _w, v, _a in sweep.result()] == [0.001, 0.05, 0.2]


def test_edit_while_paused_applies_at_the_next_batch(qtbot: Any, make_window: Any) -> None:
    window = make_window()
    start_and_wait_points(qtbot, window, Config().replace("train", epochs=2000).replace("optim", lr=0.05))
    panel = window.panel
    assert panel.mode == "locked" and not panel.edit_lr.isEnabled()
    window.action_pause.trigger()
    qtbot.waitUntil(lambda: panel.mode == "live", timeout=10_000)
    assert panel.edit_lr.isEnabled() and panel.spin_batch_size.isEnabled() and panel.spin_epochs.isEnabled()
    assert panel.edit_weight_decay.isEnabled() and not panel.combo_strategy.isEnabled()
    assert not panel.combo_dataset.isEnabled()

    panel.edit_lr.setText("fast")  # a bad value: said, and the run stays paused
    window.action_resume.trigger()
    assert window.controller.state == "paused" and "optim.lr" in window.banner.text
    panel.edit_lr.setText("0.01")
    assert not window.banner.isVisible()  # the cause was fixed
    window.action_resume.trigger()
    assert window.controller.state == "running"
    run_dir = window.controller.run_dir
    qtbot.waitUntil(lambda: any(m.kind == "config" for m in window.plots.data.markers), timeout=20_000)
    marker = next(m for m in window.plots.data.markers if m.kind == "config")
    assert marker.text == "lr 0.05→0.01"
    window.plots.flush()  # onto the plot now, not at the next paced frame
    lines = [item for item in window.plots.loss.plot.items if isinstance(item, pg.InfiniteLine)]
    assert any(getattr(line, "label", None) is not None and line.label.format == "lr 0.05→0.01" for line in lines)
    data = window.plots.data  # the pause closes with the session's "running" record, which follows the change's
    qtbot.waitUntil(lambda: bool(data.pauses) and not math.isnan(data.pauses[0].end), timeout=10_000)
    assert data.pauses[0].end > data.pauses[0].start
    before = dict(counts(window))
    qtbot.waitUntil(lambda: all(counts(window)[w] > before[w] + 3 for w in before), timeout=30_000)
    window.action_stop.trigger()
    wait_end(qtbot, window)

    records = list(read_metrics(run_dir / "metrics.jsonl"))
    change = next(r for r in records if r["kind"] == "config")
    assert change["changes"] == {"optim.lr": {"from": 0.05, "to": 0.01}}
    after = [r for r in records if r["kind"] == "step" and r["t"] > change["t"]]
    assert {r["worker"] for r in after} == {0, 1}
    assert all(r["lr"] == pytest.approx(0.01) for r in after)


def test_continue_keeps_every_earlier_point(qtbot: Any, make_window: Any) -> None:
    window = make_window()
    start_and_wait_points(qtbot, window, Config().replace("train", epochs=2000))
    qtbot.waitUntil(lambda: min(counts(window).values()) > 20, timeout=30_000)
    window.action_stop.trigger()
    wait_end(qtbot, window)
    window.plots.flush()
    before = {w: list(window.plots.loss.raw[w].xData) for w in window.plots.loss.raw}
    run_dir = window.controller.run_dir
    done = json.loads((run_dir / "summary.json").read_text())["epochs_done"]

    window.panel.spin_epochs.setValue(done + 2)
    window.action_continue_run.trigger()
    wait_end(qtbot, window)  # the read of the history and the continued run
    qtbot.waitUntil(
        lambda: (
            window.controller.run_dir == run_dir and window.controller.ended and window.controller.state == "finished"
        ),
        timeout=90_000,
    )
    window.plots.flush()
    for w, xs in before.items():  # every earlier point stays
        assert list(window.plots.loss.raw[w].xData)[: len(xs)] == xs
    # and more follow (a hogwild worker that was an epoch ahead may have had nothing left to do)
    assert sum(window.plots.loss.point_count(w) for w in before) > sum(len(xs) for xs in before.values())
    assert any(m.kind == "resume" for m in window.plots.data.markers)
    assert window.progress_run.value() == window.progress_run.maximum()


def test_fork_a_paused_run(qtbot: Any, make_window: Any) -> None:
    window = make_window()
    start_and_wait_points(qtbot, window, Config().replace("train", epochs=2000))
    parent_dir = window.controller.run_dir
    window.action_pause.trigger()
    qtbot.waitUntil(lambda: window.action_fork.isEnabled(), timeout=10_000)
    window.panel.edit_lr.setText("0.02")
    window.action_fork.trigger()
    # the paused run stops (one run per runs folder), then the fork starts
    qtbot.waitUntil(
        lambda: window.controller.run_dir not in (None, parent_dir) and window.controller.active, timeout=90_000
    )
    fork_dir = window.controller.run_dir
    qtbot.waitUntil(lambda: window.controller.state == "running", timeout=60_000)
    # a worker says "running" just before its first step: stop once the fork has recorded one
    qtbot.waitUntil(lambda: any(r["kind"] == "step" for r in read_metrics(fork_dir / "metrics.jsonl")), timeout=60_000)
    assert any(m.kind == "fork" for m in window.plots.data.markers)
    window.action_stop.trigger()
    wait_end(qtbot, window)
    parent_summary = json.loads((parent_dir / "summary.json").read_text())
    summary = json.loads((fork_dir / "summary.json").read_text())
    assert parent_summary["status"] == "stopped"
    assert summary["parent"]["name"] == parent_dir.name and summary["parent"]["step"] > 0
    assert summary["parent"]["changes"] == {"optim.lr": 0.02}

    # Reopened, the fork is drawn on from its parent's curve.
    window.open_run(fork_dir)
    qtbot.waitUntil(lambda: window.viewing_run == fork_dir, timeout=20_000)
    first = min(window.plots.loss.raw[0].xData)
    fork_first = min(r["step"] for r in read_metrics(fork_dir / "metrics.jsonl") if r["kind"] == "step")
    assert first < fork_first


def test_fork_of_a_finished_run_asks_for_its_epochs_and_starts(
    qtbot: Any, make_window: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = make_window()
    window.panel.set_config(
        Config()
        .replace("data", source="builtin:iris")
        .replace("train", epochs=2)
        .replace("parallel", strategy="single", workers=1)
    )
    window.action_start.trigger()
    wait_end(qtbot, window)
    parent_dir = window.controller.run_dir
    assert window.controller.state == "finished"
    window.open_run(parent_dir)
    qtbot.waitUntil(lambda: window.viewing_run == parent_dir and window.action_fork.isEnabled(), timeout=20_000)
    monkeypatch.setattr(window, "ask_fork", lambda dialog: dialog.set_value("train.epochs", 4) or True)
    window.panel.edit_lr.setText("0.02")  # only the learning rate changes
    window.action_fork.trigger()
    qtbot.waitUntil(lambda: window.controller.run_dir not in (None, parent_dir), timeout=60_000)
    wait_end(qtbot, window)
    fork_dir = window.controller.run_dir
    summary = json.loads((fork_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["epochs_done"] == 4
    assert summary["parent"]["changes"] == {"optim.lr": 0.02, "train.epochs": 4}
    assert fork_dir.name.endswith("-single-mlp-fork") and fork_dir.name.count("-single-mlp") == 1
    assert window.action_fork.isEnabled() and window.action_export.isEnabled()
    assert window.panel.mode == "edit" and window.panel.spin_epochs.value() == 4  # the fork's settings, editable
    assert window.action_start.isEnabled()


def test_early_stopping_says_where_it_stopped(qtbot: Any, make_window: Any) -> None:
    window = make_window()
    window.panel.set_config(
        Config()
        .replace("data", source="builtin:iris")
        .replace("train", epochs=200, early_stop_patience=1)
        .replace("parallel", strategy="single", workers=1)
    )
    window.action_start.trigger()
    wait_end(qtbot, window)
    summary = json.loads((window.controller.run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and "stop_reason" in summary
    done = summary["epochs_done"]
    assert done < 200
    text = f"stopped early at epoch {done} of 200"
    assert window.progress_run.format().startswith(text[0].upper() + text[1:])
    assert window.progress_run.value() < window.progress_run.maximum()
    assert text in window.log_pane.toPlainText()


def test_two_real_20_epoch_iris_runs_compare_on_every_axis(qtbot: Any, make_window: Any) -> None:
    from tests.journeys.window.test_edit_compare_fork_reopen import check_compared_curves

    window = make_window()
    runs = []
    for lr in (0.05, 0.01):
        window.panel.set_config(
            Config()
            .replace("data", source="builtin:iris")
            .replace("train", epochs=20)
            .replace("optim", lr=lr)
            .replace("parallel", strategy="hogwild", workers=2)
        )
        window.action_start.trigger()
        wait_end(qtbot, window)
        assert window.controller.state == "finished"
        runs.append(window.controller.run_dir)
    check_compared_curves(qtbot, window, runs)


def test_attach_to_a_cli_run_follows_and_stops_it(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    cfg_path = tmp_path / "long.toml"
    cfg_path.write_text(Config().replace("train", epochs=2000).to_toml())
    runs = tmp_path / "cli-runs"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = start_core(
        "train",
        str(cfg_path),
        "--runs-dir",
        str(runs),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        run_dir = None
        while time.monotonic() < deadline and run_dir is None:
            found = [
                d
                for d in runs.glob("*")
                if d.is_dir()
                and (d / "metrics.jsonl").is_file()
                and any(r["kind"] == "step" for r in read_metrics(d / "metrics.jsonl"))
            ]
            run_dir = found[0] if found else None
            time.sleep(0.2)
        assert run_dir is not None, "the CLI run did not start"
        window = make_window(runs_dir=str(runs))
        window.open_run(run_dir)
        assert window.controller.attached
        qtbot.waitUntil(lambda: window.controller.state == "running" and len(counts(window)) == 2, timeout=30_000)
        assert "attached" in window.label_state.text()
        assert window.panel.spin_epochs.value() == 2000  # the run's settings, not the window's own
        assert (
            f"attached to {run_dir.name}" in window.label_run_dir.text()
            and "2 worker(s)" in window.label_run_dir.text()
        )
        window.plots.flush()
        first = dict(counts(window))
        qtbot.waitUntil(lambda: all(counts(window)[w] > first[w] + 3 for w in first), timeout=30_000)  # growing
        assert window.action_stop.isEnabled()
        window.action_stop.trigger()
        wait_end(qtbot, window, timeout=60_000)
        assert window.controller.state == "stopped"
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()


def test_closing_the_window_leaves_an_attached_run_running(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    cfg_path = tmp_path / "long.toml"
    cfg_path.write_text(
        Config().replace("train", epochs=2000).replace("parallel", workers=1, strategy="single").to_toml()
    )
    runs = tmp_path / "cli-runs"
    proc = start_core(
        "train",
        str(cfg_path),
        "--runs-dir",
        str(runs),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        from core.runfiles.control_file import active_run_pid, send

        deadline = time.monotonic() + 90
        run_dir = None
        while time.monotonic() < deadline and run_dir is None:
            found = [d for d in runs.glob("*") if d.is_dir() and active_run_pid(d) is not None]
            run_dir = found[0] if found else None
            time.sleep(0.2)
        assert run_dir is not None
        window = make_window(runs_dir=str(runs))
        window.open_run(run_dir)
        qtbot.waitUntil(lambda: window.controller.state == "running", timeout=30_000)
        window.close()
        qtbot.waitUntil(lambda: not window.isVisible(), timeout=10_000)
        time.sleep(1.0)
        assert proc.poll() is None and active_run_pid(run_dir) is not None  # still training
        send(run_dir, "stop")
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
