"""Flows of the window walked as a user would: editing in Runs, comparing short runs, forking, reopening."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLineEdit

from app.views.runs import COL
from core.config import Config


def write_run(
    runs: Path,
    name: str,
    cfg: Config,
    epochs: int = 20,
    workers: int = 2,
    t0: float = 1000.0,
    startup_s: float = 1.9,
    status: str = "finished",
    first_epoch: int = 1,
) -> Path:
    """A run shaped like a real short hogwild iris run: one step per worker per epoch, workers out of
    step with each other, records of different workers interleaved out of time order, start-up first."""
    run = runs / name
    run.mkdir(parents=True)
    (run / "config.toml").write_text(cfg.to_toml())
    recs: list[dict[str, Any]] = [{"kind": "state", "t": t0, "worker": None, "state": "starting", "detail": ""}]
    t1 = t0 + startup_s
    recs += [{"kind": "state", "t": t1, "worker": w, "state": "running", "detail": ""} for w in range(workers)]
    recs.append({"kind": "state", "t": t1, "worker": None, "state": "running", "detail": ""})
    # worker 1 races through its epochs first, worker 0 (the evaluating one) follows more slowly
    for w in reversed(range(workers)):
        dt = 0.001 if w else 0.005
        for epoch in range(first_epoch, first_epoch + epochs):
            t = t1 + (epoch - first_epoch + 1) * dt
            recs.append(
                {
                    "kind": "step",
                    "t": t,
                    "worker": w,
                    "epoch": epoch,
                    "step": epoch,
                    "samples": epoch * 60,
                    "loss": 1.0 / epoch,
                    "lr": cfg.optim.lr,
                }
            )
            if w == 0:
                recs.append(
                    {
                        "kind": "eval",
                        "t": t,
                        "worker": 0,
                        "epoch": epoch,
                        "samples": epoch * 60,
                        "val_loss": 1.0 / epoch,
                        "val_accuracy": min(1.0, 0.5 + epoch / 40),
                    }
                )
        recs.append({"kind": "state", "t": t1 + epochs * dt, "worker": w, "state": status, "detail": ""})
    end = t1 + epochs * 0.005 + 0.05
    recs.append({"kind": "state", "t": end, "worker": None, "state": status, "detail": ""})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (run / "summary.json").write_text(
        json.dumps(
            {
                "status": status,
                "strategy": cfg.parallel.strategy,
                "workers": workers,
                "epochs_done": epochs,
                "samples_per_s": 20000.0,
                "wall_s": end - t0,
                "train_s": epochs * 0.005,
                "dataset": "iris",
                "final": {"val_accuracy": 1.0, "val_loss": 1.0 / epochs, "train_loss": 0.05},
            }
        )
    )
    return run


def iris(epochs: int = 20, lr: float = 0.05) -> Config:
    return Config().replace("data", source="builtin:iris").replace("train", epochs=epochs).replace("optim", lr=lr)


# -- Runs: an open editor survives the rescans ----------------------------------------------
def test_note_typed_across_rescans_is_saved_whole(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run = write_run(runs, "20261201-100000-hogwild-mlp", iris())
    window = make_window()
    window.tabs.setCurrentWidget(window.runs_view)
    view = window.runs_view
    qtbot.waitUntil(lambda: view.proxy.rowCount() == 1, timeout=20_000)
    index = view.proxy.index(0, COL["notes"])
    view.table.edit(index)
    editor = view.table.viewport().findChild(QLineEdit)
    assert editor is not None
    words = ["kept ", "while ", "the ", "folder ", "is ", "rescanned"]
    for i, word in enumerate(words):
        qtbot.keyClicks(editor, word)
        if i == 2:  # a new run appears meanwhile and the live one's numbers move
            write_run(runs, "20261201-110000-hogwild-mlp", iris())
        with qtbot.waitSignal(view.scanned, timeout=20_000):
            view.refresh()
        assert editor.text() == "".join(words[: i + 1])  # the scan left the editor alone
    assert view.proxy.rowCount() == 2
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: (run / "notes.json").is_file(), timeout=5_000)
    assert json.loads((run / "notes.json").read_text())["notes"] == "kept while the folder is rescanned"


# -- Runs: long fork names elide, the results stay in view ------------------------------------
def test_long_fork_names_keep_accuracy_and_samples_per_s_in_view(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    parent = write_run(runs, "20261201-201410-hogwild-mlp", iris())
    fork = write_run(runs, "20261201-201424-20261201-201410-hogwild-mlp-fork-with-a-long-name", iris())
    summary = json.loads((fork / "summary.json").read_text())
    summary["parent"] = {"run": str(parent), "name": parent.name, "epoch": 20, "step": 20}
    (fork / "summary.json").write_text(json.dumps(summary))
    window = make_window()
    window.resize(1280, 800)
    window.tabs.setCurrentWidget(window.runs_view)
    view = window.runs_view
    qtbot.waitUntil(lambda: view.proxy.rowCount() == 2, timeout=20_000)
    qtbot.waitUntil(lambda: view.table.viewport().width() > 0, timeout=5_000)
    names = [view.proxy.index(r, COL["name"]).data() for r in range(2)]
    assert all("(fork of" not in n for n in names)
    fork_row = next(r for r in range(2) if "long-name" in names[r])
    assert parent.name in view.proxy.index(fork_row, COL["name"]).data(Qt.ItemDataRole.ToolTipRole)
    width = view.table.viewport().width()
    for attr in ("best_figure", "final_figure", "samples_per_s"):
        c = COL[attr]
        right = view.table.columnViewportPosition(c) + view.table.columnWidth(c)
        assert 0 < right <= width, (attr, right, width)


# -- the toolbar follows the window's state, failures included ------------------------------
def actions_match_state(window: Any) -> None:
    from PySide6.QtGui import QAction

    from app.viewmodels.window_state import derive

    derived = derive(window.window_state())
    for name, enabled in derived.enabled.items():
        target = window.menu_recent if name == "menu_recent_runs" else window.findChild(QAction, name)
        assert target.isEnabled() == enabled, name
    assert window.panel.mode == derived.panel_mode
    assert window.label_state.text() == derived.status


def open_and_wait(qtbot: Any, window: Any, run: Path) -> None:
    window.open_run(run)
    qtbot.waitUntil(lambda: window.viewing_run == run and not window._calls.busy, timeout=20_000)


def test_a_failed_fork_leaves_the_toolbar_as_the_state_says(
    qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    run = write_run(tmp_path / "runs", "20261201-100000-hogwild-mlp", iris())
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.pt").write_bytes(b"not a checkpoint")
    window = make_window()
    open_and_wait(qtbot, window, run)
    assert window.label_state.text() == f"Viewing {run.name}"
    assert window.action_fork.isEnabled() and window.action_export.isEnabled()
    actions_match_state(window)
    asked: list[int] = []
    monkeypatch.setattr(window, "ask_fork", lambda d: asked.append(d.widgets["train.epochs"].minimum() - 1) or True)
    window.panel.edit_lr.setText("0.01")
    window.action_fork.trigger()
    qtbot.waitUntil(
        lambda: not window._preparing and not window._calls.busy and window.banner.isVisible(), timeout=20_000
    )
    assert asked == [20]  # finished all its epochs: the fork asks for more instead of failing on them
    assert not window.controller.active
    # the run's settings became the user's (the fork's): Start is theirs, the run's curves stay on screen
    assert window.viewing_run == run and window.label_state.text() == "Ready"
    assert window.action_fork.isEnabled() and window.action_export.isEnabled()  # not stuck greyed out
    actions_match_state(window)

    window.open_run(tmp_path / "no-such-run")  # another failure: still in step
    actions_match_state(window)
    window.panel.spin_epochs.setValue(30)
    window.action_continue_run.trigger()  # continuing the bogus checkpoint fails too
    qtbot.waitUntil(
        lambda: not window._preparing and not window._calls.busy and not window.controller.active, timeout=20_000
    )
    actions_match_state(window)
    assert window.action_fork.isEnabled() and window.action_open_run.isEnabled()


def test_enablement_is_derived_from_the_state_alone() -> None:
    from app.viewmodels.window_state import WindowState, derive

    viewing = WindowState(viewing="r", run_config_shown=True, fork_source=True, export_target=True, continuable=True)
    d = derive(viewing)
    assert d.panel_mode == "view" and d.status == "Viewing r"
    assert d.enabled["action_fork"] and d.enabled["action_export"] and d.enabled["action_continue_run"]
    assert not d.enabled["action_start"]  # "Use these settings" first
    busy = derive(WindowState(viewing="r", preparing=True, fork_source=True, export_target=True))
    assert not busy.enabled["action_fork"] and not busy.enabled["action_open_run"] and busy.panel_mode == "locked"
    paused = derive(WindowState(run_state="paused", run_active=True, fork_source=True))
    assert paused.panel_mode == "live" and paused.enabled["action_fork"] and paused.enabled["action_resume"]
    assert not paused.enabled["action_export"]
    attached = derive(WindowState(run_state="running", run_active=True, attached=True, run_config_shown=True))
    assert attached.panel_mode == "locked" and attached.status == "Running (attached)"


# -- settings: the user's own are saved, not those of the run on screen ----------------------
def test_closing_while_viewing_a_run_keeps_the_users_own_settings(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    from app.shell.settings import AppSettings
    from core.config import parse_toml

    run = write_run(tmp_path / "runs", "20261201-100000-hogwild-mlp", iris(epochs=20, lr=0.3))
    window = make_window()
    window.panel.spin_epochs.setValue(7)
    open_and_wait(qtbot, window, run)
    assert window.panel.spin_epochs.value() == 20  # the run's settings are shown
    window.close()
    saved = parse_toml(AppSettings().last_config_toml)
    assert saved.train.epochs == 7 and saved.data.source != "builtin:iris"
    again = make_window()
    assert again.panel.spin_epochs.value() == 7


# -- progress: an early stop is not a full run -------------------------------------------------
def test_progress_of_an_early_stopped_run() -> None:
    from app.viewmodels.run_data import ProgressTracker

    p = ProgressTracker(60, 1)
    p.add(
        [
            {"kind": "eval", "t": 1.0, "worker": 0, "epoch": 9},
            {"kind": "state", "t": 2.0, "worker": None, "state": "finished"},
        ]
    )
    p.end("finished", {"status": "finished", "epochs_done": 9, "stop_reason": "early stop: val_loss ..."})
    assert p.describe_end() == "stopped early at epoch 9 of 60"
    assert p.progress == 9 / 60
    full = ProgressTracker(60, 1)
    full.end("finished", {"status": "finished", "epochs_done": 60})
    assert full.describe_end() is None and full.progress == 1.0


# -- Compare: short runs on every axis ------------------------------------------------------------
def check_compared_curves(qtbot: Any, window: Any, runs: list[Path]) -> None:
    import numpy as np

    window.tabs.setCurrentWidget(window.runs_view)
    qtbot.waitUntil(lambda: window.runs_view.proxy.rowCount() == len(runs), timeout=20_000)
    window.runs_view.select_runs(runs)
    with qtbot.waitSignal(window.compare_view.compared, timeout=20_000):
        window.action_compare.trigger()
    view = window.compare_view
    for x_mode in ("step", "epoch", "time"):
        view.combo_x.setCurrentIndex(view.combo_x.findData(x_mode))
        for metric in ("figure", "val_loss", "train_loss"):
            curves = view.curves[metric]
            assert len(curves) == len(runs), (x_mode, metric)
            for curve in curves:
                x = np.asarray(curve.xData)
                assert len(np.unique(x)) > 1, (x_mode, metric, x)
                assert np.all(np.diff(x) >= 0), (x_mode, metric, x)
                if x_mode == "time":
                    assert x[0] < 0.5, (metric, x)  # from the first training step, not from start-up
        if x_mode == "step":
            for run in view.runs:  # a point per step of the 20-step run, not a few sampled means
                assert len(run.curves["train_loss"]["y"]) >= 20


def test_two_short_iris_runs_compare_on_every_axis(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    runs = [
        write_run(tmp_path / "runs", "20261201-100000-hogwild-mlp", iris()),
        write_run(tmp_path / "runs", "20261201-100100-hogwild-mlp", iris(lr=0.01), startup_s=0.7),
    ]
    window = make_window()
    check_compared_curves(qtbot, window, runs)


# -- reopened runs and forks draw what happened -----------------------------------------------
def test_a_reopened_fork_draws_training_time_a_step_in_lr_and_its_fork_marker(
    qtbot: Any, make_window: Any, tmp_path: Path
) -> None:
    import numpy as np

    runs = tmp_path / "runs"
    parent = write_run(runs, "20261201-100000-hogwild-mlp", iris(lr=0.05))
    fork = write_run(
        runs,
        "20261201-103400-hogwild-mlp-fork",
        iris(epochs=40, lr=0.01),
        t0=1000.0 + 34 * 60,
        epochs=20,
        first_epoch=21,
    )
    summary = json.loads((fork / "summary.json").read_text())
    summary["parent"] = {
        "run": str(parent),
        "name": parent.name,
        "epoch": 21,
        "step": 20,
        "changes": {"optim.lr": 0.01},
    }
    (fork / "summary.json").write_text(json.dumps(summary))
    window = make_window()
    open_and_wait(qtbot, window, fork)
    data = window.plots.data
    forks = [m for m in data.markers if m.kind == "fork"]
    assert [m.text for m in forks] == [f"forked from {parent.name}"]  # not "resumed"
    times = np.concatenate([data.loss[w].column(1) for w in data.loss])
    assert times.max() < 5.0, times.max()  # training time: neither start-up nor the 34 minutes between
    assert abs(forks[0].t - 0.1) < 0.05  # the fork follows on where the parent's training ended
    rows = data.lr_curve(0)
    finite = np.isfinite(rows[:, 2])
    old = np.flatnonzero(finite & np.isclose(rows[:, 2], 0.05))
    new = np.flatnonzero(finite & np.isclose(rows[:, 2], 0.01))
    assert len(old) and len(new)
    between = rows[old.max() + 1 : new.min(), 2]
    assert len(between) and np.isnan(between).all()  # the line breaks: a step, not a ramp across the fork


def test_a_constant_learning_rate_gets_an_axis_around_its_value(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs", "20261201-100000-hogwild-mlp", iris(lr=0.05))
    window = make_window()
    open_and_wait(qtbot, window, run)
    window.plots.flush()
    lo, hi = window.plots.lr.plot.viewRange()[1]
    assert 0.0 < lo < 0.05 < hi < 0.2, (lo, hi)


def test_throughput_of_a_run_shorter_than_a_window(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    import numpy as np

    run = write_run(tmp_path / "runs", "20261201-100000-hogwild-mlp", iris())  # 0.02 and 0.1 s of training
    window = make_window()
    open_and_wait(qtbot, window, run)
    window.plots.flush()
    data = window.plots.data
    for w in (0, 1):
        rates = data.rate[w].column(2)
        assert np.isfinite(rates).sum() >= 1, w
        assert np.isclose(rates[np.isfinite(rates)][0], 19 * 60 / (19 * (0.005 if w == 0 else 0.001)))
        x, _y = window.plots.throughput.curves[w].getData()
        assert x is not None and len(x) >= 2 and x.max() > x.min()  # a visible stretch, not a lone point


def test_throughput_of_a_run_of_about_one_window_is_a_line_per_worker_and_in_total() -> None:
    import numpy as np

    from app.viewmodels.run_data import RATE, RTIME, RunData

    recs: list[dict[str, Any]] = [{"kind": "state", "t": 0.0, "worker": None, "state": "starting"}]
    for w, dt in ((0, 0.05), (1, 0.03)):  # 0.6 s and 0.36 s of training: one window at most
        recs += [
            {"kind": "step", "t": 1.0 + i * dt, "worker": w, "epoch": 1, "step": i, "samples": 64 * i, "loss": 1.0}
            for i in range(1, 13)
        ]
        recs.append({"kind": "state", "t": 1.0 + 12 * dt, "worker": w, "state": "finished"})
    recs.append({"kind": "state", "t": 2.0, "worker": None, "state": "finished"})
    data = RunData()
    data.add(recs)
    for w, dt in ((0, 0.05), (1, 0.03)):
        s = data.rate[w]
        assert s.trailing(RATE) >= 2 and np.ptp(s.column(RTIME)) > 0, w
        assert np.allclose(s.column(RATE), 64 / dt)
    assert data.total.trailing(RATE) >= 2
    assert np.isclose(data.total.last(RATE), 64 / 0.05 + 64 / 0.03)


def test_the_window_model_announces_each_change_once() -> None:
    from app.viewmodels.window_state import WindowModel

    model = WindowModel()
    heard: list[Any] = []
    model.connect(heard.append)
    model.update(preparing=True)
    model.update(preparing=True)  # nothing changed: nothing said
    model.update(advising=True, cancelling=False)
    assert [a.preparing for a in heard] == [True, True] and heard[-1].advising
    assert model.facts() == {
        "advising": True,
        "cancelling": False,
        "downloading": False,
        "preparing": True,
        "closing": False,
        "viewing": "",
    }
    model.update(viewing_run=Path("runs/r1"))
    assert model.facts()["viewing"] == "r1"
    done: list[int] = []
    model.update(after_end=lambda: done.append(1))
    after = model.take_after_end()
    assert after is not None and model.after_end is None and model.take_after_end() is None
    after()
    assert done == [1]
