"""What a walk through the window found: counts that agree, a mean curve between its workers, distinct
legend names, axes that read cleanly."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from app.views.runs import COL
from core.config import Config


# -- one count of how far a run got ------------------------------------------------------------
def _tiny(strategy: str = "hogwild", epochs: int = 5000, **parallel: Any) -> Config:
    """Iris, a small MLP: an epoch is a batch or two of a few milliseconds."""
    return (
        Config()
        .replace("data", source="builtin:iris")
        .replace("model", hidden=(8,))
        .replace("train", epochs=epochs, batch_size=64)
        .replace("parallel", strategy=strategy, **parallel)
    )


def _run_and_stop(qtbot: Any, window: Any, cfg: Config, reached: Any) -> dict[str, Any]:
    window.panel.set_config(cfg)
    window.action_start.trigger()
    qtbot.waitUntil(lambda: window.live.progress is not None and reached(window.live.progress), timeout=120_000)
    window.action_stop.trigger()
    qtbot.waitUntil(lambda: window.controller.ended, timeout=60_000)
    assert window.controller.state == "stopped"
    run_dir = window.controller.run_dir
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped"
    view = window.runs_view

    def cell() -> str | None:
        for r in range(view.proxy.rowCount()):
            if view.proxy.index(r, COL["name"]).data() == run_dir.name:
                if view.proxy.index(r, COL["status"]).data() == "stopped":
                    return str(view.proxy.index(r, COL["epochs_done"]).data())
        return None

    view.refresh()
    qtbot.waitUntil(lambda: cell() is not None, timeout=30_000)
    ends = [line for line in window.log_pane.toPlainText().splitlines() if "session: stopped" in line]
    return {"bar": window.progress_run.text(), "log": ends[-1], "summary": summary, "table": cell()}


def _number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found is not None, f"{pattern!r} not in {text!r}"
    return int(found.group(1))


def test_a_stopped_run_says_one_count_of_epochs_everywhere(qtbot: Any, make_window: Any) -> None:
    window = make_window()
    # Waits for the state the assertions need: every worker (the slowest too) has completed two epochs.
    seen = _run_and_stop(qtbot, window, _tiny(workers=2), lambda p: p.stats.epochs_done(range(2)) >= 2)
    summary = seen["summary"]
    done = summary["epochs_done"]
    assert _number(r"^(\d+) of 5000 epochs", seen["bar"]) == done, seen["bar"]
    assert _number(r"stopped after (\d+) of 5000 epochs", seen["log"]) == done, seen["log"]
    assert seen["table"] == f"{done}/5000"
    assert done >= 2 and summary["progress"] == {"done": done, "of": 5000, "unit": "epochs", "slowest": False}


def test_a_stopped_sweep_counts_its_slowest_worker_and_says_so(qtbot: Any, make_window: Any) -> None:
    window = make_window()
    cfg = _tiny("sweep", workers=2, sweep_lr=[0.1, 0.01])
    seen = _run_and_stop(
        qtbot, window, cfg, lambda p: min(p.stats.last_accuracy, default=-1) >= 0 and p.stats.eval_epoch >= 3
    )
    summary = seen["summary"]
    done = summary["epochs_done"]
    assert _number(r"^(\d+) of 5000 epochs \(slowest worker\)", seen["bar"]) == done, seen["bar"]
    assert _number(r"stopped after (\d+) of 5000 epochs \(slowest worker\)", seen["log"]) == done, seen["log"]
    assert seen["table"] == f"{done}/5000 slowest"
    assert summary["progress"] == {"done": done, "of": 5000, "unit": "epochs", "slowest": True}


def test_a_stopped_search_counts_trials_done_everywhere(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    path = tmp_path / "search.toml"
    # far more trials than can run before the Stop reaches the session, however fast the machine
    path.write_text(
        '[data]\nsource = "builtin:iris"\n[model]\nhidden = [8]\n[train]\nepochs = 20\n'
        '[parallel]\nstrategy = "search"\nworkers = 2\n'
        '[search]\ntrials = 400\npruner = "none"\n"optim.lr" = [0.001, 0.1]\n'
    )
    window = make_window()
    assert window.open_config(str(path))
    cfg = window.panel.config()
    seen = _run_and_stop(
        qtbot,
        window,
        cfg,
        lambda _p: sum(t.get("state") == "complete" for t in window.search_view.trials.values()) >= 2,
    )
    summary = seen["summary"]
    done = sum(t["state"] in ("complete", "pruned", "failed") for t in summary["trials"])
    assert _number(r"^(\d+) of 400 trials", seen["bar"]) == done, seen["bar"]
    assert _number(r"stopped: (\d+) of 400 trials", seen["log"]) == done, seen["log"]
    assert seen["table"] == f"{done}/400 trials"
    assert summary["progress"] == {"done": done, "of": 400, "unit": "trials", "slowest": False} and done >= 2


def test_the_live_count_is_the_slowest_workers_and_a_summary_without_one_reads_as_before() -> None:
    from app.viewmodels.run_progress import ProgressTracker
    from core.session.reading.stats import RunCount, RunStats

    p = ProgressTracker(epochs=10, workers=2, samples_per_epoch=64)
    recs = [
        {"kind": "step", "t": 1.0 + i, "worker": 0, "epoch": 1 + i, "step": i + 1, "samples": 64 * (i + 1), "loss": 1.0}
        for i in range(8)
    ]  # worker 0 is in its 8th epoch
    recs += [{"kind": "step", "t": 1.5, "worker": 1, "epoch": 3, "step": 3, "samples": 192, "loss": 1.0}]
    p.add(recs)
    assert p.count() == RunCount(2, 10) and p.progress < 0.3  # worker 1 has done 2 epochs, not the mean's 5
    stats = RunStats()
    stats.add(recs + [{"kind": "eval", "t": 9.0, "worker": 1, "epoch": 3, "val_loss": 1.0}])
    assert stats.epochs_done() == 3 and stats.epochs_done([0, 1, 2]) == 0 and stats.completed == {0: 7, 1: 3}
    assert RunCount.of_summary({"epochs_done": 4}, 9).text() == "4 of 9 epochs"


# -- the mean of workers sharing a model ------------------------------------------------------
def _short_hogwild_records() -> list[dict[str, Any]]:
    """Two hogwild workers of a small table, three step records each, at steps of their own."""
    points = {0: [(1, 2.0), (40, 1.0), (80, 0.5)], 1: [(6, 1.6), (41, 0.9), (81, 0.45)]}
    recs: list[dict[str, Any]] = [{"kind": "state", "t": 100.0, "worker": None, "state": "running"}]
    for i in range(3):
        for w in (0, 1):
            step, loss = points[w][i]
            recs.append(
                {
                    "kind": "step",
                    "t": 100.0 + 0.3 * i + 0.05 * w,
                    "worker": w,
                    "epoch": 1 + i,
                    "step": step,
                    "samples": step * 16,
                    "loss": loss,
                    "lr": 0.05,
                }
            )
    return recs


@pytest.mark.parametrize("smoothing", [0.0, 0.6])
def test_the_mean_of_a_short_run_lies_between_its_workers_curves(qtbot: Any, smoothing: float) -> None:
    import numpy as np

    from app.plots.live import PlotsPanel
    from app.viewmodels.run_data import SMOOTH, STEP

    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.data.smoothing = smoothing
    panel.set_run_shape({0: "worker 0", 1: "worker 1"}, separate_models=False)
    panel.add_records(_short_hogwild_records())
    panel.flush()
    x, y = panel.loss.mean.getData()
    assert x is not None and len(x) >= 3
    curves = [panel.data.loss[w] for w in (0, 1)]
    for step, value in zip(x, y):
        assert all(s.column(STEP)[0] <= step <= s.column(STEP)[-1] for s in curves), step  # where both have run
        at = [float(np.interp(step, s.column(STEP), s.column(SMOOTH))) for s in curves]
        assert min(at) - 1e-9 <= value <= max(at) + 1e-9, (step, value, at)
    # the mean goes on as the records do, and re-smoothing keeps it on the same grid
    more = [
        {
            "kind": "step",
            "t": 101.0 + 0.1 * w,
            "worker": w,
            "epoch": 4,
            "step": 120 + w,
            "samples": 2000,
            "loss": 0.3,
            "lr": 0.05,
        }
        for w in (0, 1)
    ]
    panel.add_records(more)
    panel.flush()
    assert panel.data.mean.last(STEP) == 120.0
    panel.data.set_smoothing(0.9)
    assert np.all(np.isfinite(panel.data.mean.column(SMOOTH)))


# -- Compare's legend ------------------------------------------------------------------------
def test_compare_names_runs_that_differ_only_in_the_middle_apart(qtbot: Any, tmp_path: Path) -> None:
    import numpy as np

    from app.plots.text import distinct_names
    from app.viewmodels.compare_runs import CompareRun
    from app.views.compare import CompareView

    view = CompareView()
    qtbot.addWidget(view)
    view.resize(1200, 700)
    curve = {k: np.arange(1.0, 4.0) for k in ("step", "epoch", "time")}
    names = ["20261202-041530-hogwild-mlp", "20261202-042712-hogwild-mlp", "20261202-042712-hogwild-mlp"]
    runs = [
        CompareRun(
            tmp_path / f"{n}-{i}",
            n,
            {},
            {},
            {
                m: {**curve, "y": np.array([0.5, 0.6, 0.7]) + 0.01 * i}
                for m in ("val_accuracy", "val_loss", "train_loss")
            },
        )
        for i, n in enumerate(names)
    ]
    view.show_runs(runs)
    texts = [label.text for _sample, label in view.legend.items]
    assert len(texts) == 3 and len(set(texts)) == 3, texts
    assert all(len(t) <= 24 for t in texts)
    assert "041530" in texts[0] and "042712" in texts[1] and "042712" in texts[2]  # what differs shows
    assert distinct_names(["short", "20261203-101010-sweep-cnn"]) == ["short", "20261203-10…10-sweep-cnn"]


# -- axes that read cleanly ----------------------------------------------------------------------
def _steps_at(times: list[float], workers: int = 2, first_step: int = 1) -> list[dict[str, Any]]:
    recs = []
    for i, t in enumerate(times):
        for w in range(workers):
            step = first_step + i
            recs.append(
                {
                    "kind": "step",
                    "t": t + 0.001 * w,
                    "worker": w,
                    "epoch": 1,
                    "step": step,
                    "samples": step * 16,
                    "loss": 1.0 / step,
                    "lr": 0.05,
                }
            )
    return recs


def test_the_throughput_axis_label_never_carries_a_scale_that_could_stay_behind(qtbot: Any) -> None:
    from app.plots.live import PlotsPanel

    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.resize(1200, 700)
    panel.show()
    panel.set_run_shape({0: "worker 0", 1: "worker 1"}, separate_models=False)
    axis = panel.throughput.plot.getAxis("bottom")
    labels = []
    # a run of 4 ms (its only rate window spans it: pyqtgraph would label the axis "(x0.001)"), then seconds
    panel.add_records(
        [{"kind": "state", "t": 100.0, "worker": None, "state": "running"}]
        + _steps_at([100.0 + 0.0001 * i for i in range(40)])
        + [{"kind": "state", "t": 100.004, "worker": w, "state": "finished"} for w in (0, 1)]
    )
    panel.flush()
    panel.throughput.grab()  # painted: the view's range, and with it the axis, follows the data
    labels.append(axis.labelString())
    panel.add_records(
        [
            {"kind": "state", "t": 100.01, "worker": None, "state": "starting"},
            {"kind": "state", "t": 100.02, "worker": None, "state": "running"},
        ]
        + _steps_at([100.1 + 0.05 * i for i in range(400)], first_step=41)
    )
    panel.flush()
    panel.throughput.grab()
    labels.append(axis.labelString())
    assert all("wall time (s)" in text and "(x" not in text for text in labels), labels
    assert len(set(labels)) == 1, labels  # the same text whatever the range: nothing to leave behind


def test_a_tick_at_zero_reads_0_and_an_epoch_axis_ticks_whole_epochs(qtbot: Any) -> None:
    from app.plots.curves import ValPlot
    from app.plots.text import compact_axis
    from app.viewmodels.run_data import RunData

    axis = compact_axis()
    assert axis.tickStrings([0.0, 5000.0, 10000.0, 15000.0], 1.0, 5000.0) == ["0", "5k", "10k", "15k"]
    assert axis.tickStrings([-2e-13, 0.5, 1.0], 1.0, 0.5)[0] == "0"
    val = ValPlot(RunData())
    qtbot.addWidget(val)
    for item in (val.loss_plot, val.acc_plot):
        epochs = item.getAxis("bottom")
        for lo, hi, size in ((0.8, 3.2, 200.0), (0.5, 6.5, 110.0), (1.0, 40.0, 300.0)):
            levels = epochs.tickValues(lo, hi, size)
            values = [v for _spacing, ticks in levels for v in ticks]
            assert values and all(float(v).is_integer() for v in values), (lo, hi, values)
            assert all("." not in s for s in epochs.tickStrings(values, 1.0, 1.0))


def test_marker_text_is_drawn_on_the_loss_plot_only(qtbot: Any) -> None:
    import pyqtgraph as pg

    from app.plots.live import PlotsPanel

    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.set_run_shape({0: "worker 0", 1: "worker 1"}, separate_models=False)
    records = _steps_at([100.0 + 0.05 * i for i in range(60)])
    records.append(
        {
            "kind": "config",
            "t": 103.5,
            "worker": None,
            "changes": {"optim.lr": {"from": 0.05, "to": 0.01}},
            "steps": {"0": 60, "1": 60},
        }
    )
    panel.add_records(records)
    panel.flush()

    def lines(plot: Any) -> list[Any]:
        return [item for item in plot.items if isinstance(item, pg.InfiniteLine)]

    on_loss, on_rate = lines(panel.loss.plot), lines(panel.throughput.plot)
    assert [line.label.format for line in on_loss if getattr(line, "label", None)] == ["lr 0.05→0.01"]
    assert on_rate and not any(getattr(line, "label", None) for line in on_rate)  # no text over the curves
    assert on_rate[0].toolTip() == "lr 0.05→0.01"


@pytest.mark.parametrize("size", [(1280, 800), (900, 600)])
def test_the_side_plots_x_axes_stay_in_view_in_a_search(
    qtbot: Any, make_window: Any, tmp_path: Path, size: tuple[int, int]
) -> None:
    from PySide6.QtCore import QPointF

    from core.config import load_config
    from core.services.runs.shape import shape_of

    window = make_window()
    path = tmp_path / "search.toml"
    path.write_text(
        '[data]\nsource = "builtin:iris"\n[train]\nepochs = 6\n[parallel]\nstrategy = "search"\n'
        'workers = 2\n[search]\ntrials = 14\npruner = "none"\n"optim.lr" = [0.001, 0.1]\n'
    )
    window.live.apply_run_shape(shape_of(load_config(path)))
    records: list[dict[str, Any]] = [{"kind": "state", "t": 100.0, "worker": None, "state": "running"}]
    t, step = 100.0, 0
    for trial in range(14):
        for epoch in range(1, 7):
            for _batch in range(5):
                step, t = step + 1, t + 0.01
                records.append(
                    {
                        "kind": "step",
                        "t": t,
                        "worker": trial % 2,
                        "trial": trial,
                        "epoch": epoch,
                        "step": step,
                        "samples": step * 16,
                        "loss": 1.0 / step**0.3,
                        "lr": 0.05,
                    }
                )
            records.append(
                {
                    "kind": "eval",
                    "t": t,
                    "worker": trial % 2,
                    "trial": trial,
                    "epoch": epoch,
                    "val_loss": 1.0 / epoch,
                    "val_accuracy": 0.5 + 0.08 * epoch,
                }
            )
    window.plots.add_records(records)
    window.tabs.setCurrentWidget(window.plots)
    window.resize(*size)
    qtbot.wait(50)
    window.plots.flush()
    qtbot.wait(50)
    scroll = window.plots.bottom_scroll
    viewport = scroll.viewport()
    checked = 0
    for plot in (window.plots.val, window.plots.throughput):
        for item in plot.items:
            axis = item.getAxis("bottom")
            bottom = plot.mapFromScene(axis.label.sceneBoundingRect().bottomLeft())
            at = plot.mapTo(viewport, QPointF(bottom).toPoint())
            assert 0 <= at.y() <= viewport.height(), (plot.objectName(), at.y(), viewport.height())
            checked += 1
    assert checked == 3
    assert 1 <= len(window.plots.val.legends[0].items) <= 12  # the newest trials that fit beside the plots
