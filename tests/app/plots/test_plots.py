"""The live plots: curves per worker, view options, saving, and a soak test of 5,000 updates, 1,000 redraws."""

from __future__ import annotations

import csv
import gc
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import QCoreApplication
from PySide6.QtGui import QImage

from app.plots.live import PlotsPanel
from app.shell.gc_policy import GuiGarbageCollector


def step_records(workers: int, steps: range, t0: float = 1000.0, dt: float = 0.01) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = []
    for i in steps:
        for w in range(workers):
            recs.append(
                {
                    "kind": "step",
                    "t": t0 + i * dt,
                    "worker": w,
                    "epoch": 1 + i // 100,
                    "step": i + 1,
                    "samples": (i + 1) * 64,
                    "loss": 2.0 / (1 + 0.01 * i) + 0.05 * w,
                    "lr": 0.1,
                }
            )
        if i % 100 == 99:
            for w in range(workers):
                recs.append(
                    {
                        "kind": "eval",
                        "t": t0 + i * dt,
                        "worker": w,
                        "epoch": 1 + i // 100,
                        "val_loss": 1.0 / (1 + i),
                        "val_accuracy": min(1.0, i / 1000),
                    }
                )
    return recs


@pytest.fixture
def panel(qtbot: Any) -> PlotsPanel:
    p = PlotsPanel()
    p.resize(900, 600)
    qtbot.addWidget(p)
    p.show()
    qtbot.waitExposed(p)
    return p


def test_each_worker_gets_curves_and_the_frame_follows(qtbot: Any, panel: PlotsPanel) -> None:
    panel.add_records(step_records(3, range(300)))
    # setData happens on the next frame, not per record; the side plots follow one at a time
    qtbot.waitUntil(lambda: panel.loss.point_count(2) == 300, timeout=20_000)
    qtbot.waitUntil(
        lambda: sorted(panel.throughput.curves) == [0, 1, 2] and sorted(panel.lr.curves) == [0, 1, 2], timeout=20_000
    )
    assert sorted(panel.loss.raw) == [0, 1, 2]
    assert panel.loss.mean is not None and panel.loss.mean.isVisible()
    assert sorted(panel.val.loss_curves) == [0, 1, 2]
    assert len(panel.val.loss_curves[0].xData) == 3
    assert sorted(panel.throughput.curves) == [0, 1, 2] and panel.throughput.total is not None
    # distinct colours per worker, the same in every plot
    colours = {panel.loss.smooth[w].opts["pen"].color().name() for w in range(3)}
    assert len(colours) == 3
    assert panel.val.loss_curves[1].opts["pen"].color().name() == panel.loss.smooth[1].opts["pen"].color().name()


def test_learning_rate_has_its_own_curve(qtbot: Any, panel: PlotsPanel, tmp_path: Path) -> None:
    recs = step_records(2, range(200))
    for r in recs:
        if r["kind"] == "step":
            r["lr"] = 0.1 if r["step"] <= 100 else 0.01 * (r["worker"] + 1)  # a step down, per worker
    panel.add_records(recs)
    lr = panel.findChild(type(panel.lr), "plot_lr")
    assert lr is panel.lr and lr.isVisible()
    qtbot.waitUntil(
        lambda: 1 in lr.curves and lr.curves[1].xData is not None and len(lr.curves[1].xData) == 4, timeout=20_000
    )
    assert sorted(lr.curves) == [0, 1]
    assert lr.curves[1].xData.tolist() == [1, 100, 101, 200]
    assert lr.curves[1].yData.tolist() == [0.1, 0.1, 0.02, 0.02]
    panel.set_x_mode("time")
    panel.flush()
    assert lr.curves[1].xData[-1] == pytest.approx(199 * 0.01)
    lr.save_csv(tmp_path / "lr.csv")
    rows = list(csv.reader((tmp_path / "lr.csv").open()))
    assert rows[0] == ["worker", "step", "time_s", "lr"] and len(rows) == 1 + 2 * 4
    # a pause draws every rate curve out to its worker's latest step at once (no 1 s wait for the end)
    panel.set_x_mode("step")
    panel.add_records([{"kind": "step", "t": 1003.0, "worker": 1, "step": 201, "loss": 0.4, "lr": 0.02}])
    panel.flush(everything=False)
    panel.add_records([{"kind": "state", "t": 1003.1, "worker": None, "state": "paused"}])
    panel.flush(everything=False)
    qtbot.waitUntil(lambda: lr.curves[1].xData[-1] == 201, timeout=5_000)
    panel.set_run_shape({0: "lr 0.1", 1: "lr 0.01"}, True, {0: 0.1, 1: 0.01})  # a sweep's plot takes its place
    assert panel.sweep.isVisible() and not lr.isVisible()
    panel.set_run_shape({0: "worker 0", 1: "worker 1"}, False)
    assert lr.isVisible() and not panel.sweep.isVisible() and panel.bottom_splitter.sizes()[3] > 0
    width = panel.bottom_splitter.sizes()[3]
    panel.set_run_shape({0: "lr 0.1", 1: "lr 0.01"}, True, {0: 0.1, 1: 0.01})
    panel.reset()  # the window resets before it sets the next run's shape
    panel.set_run_shape({0: "worker 0"}, False)
    assert lr.isVisible() and panel.bottom_splitter.sizes()[3] >= width * 0.9


def test_x_axis_log_scale_and_smoothing(qtbot: Any, panel: PlotsPanel) -> None:
    panel.add_records(step_records(2, range(200)))
    panel.flush()
    x_steps = np.array(panel.loss.raw[0].xData)
    assert x_steps[-1] == 200
    panel.set_x_mode("time")
    x_time = np.array(panel.loss.raw[0].xData)
    assert x_time[-1] == pytest.approx(1.99, abs=1e-6)
    assert panel.loss.plot.getAxis("bottom").labelText == "wall time (s)"
    panel.check_log_y.setChecked(True)
    assert panel.loss.plot.getViewBox().state["logMode"][1]
    assert not panel.val.acc_plot.getViewBox().state["logMode"][1]  # accuracy stays linear
    raw = np.array(panel.loss.smooth[0].yData)
    panel.set_smoothing(0.0)
    assert np.allclose(panel.loss.smooth[0].yData, panel.loss.raw[0].yData)
    panel.set_smoothing(0.95)
    assert not np.allclose(panel.loss.smooth[0].yData, raw)


def test_save_png_and_csv(qtbot: Any, panel: PlotsPanel, tmp_path: Path) -> None:
    panel.add_records(step_records(2, range(150)))
    panel.flush()
    png = tmp_path / "loss.png"
    panel.loss.save_png(png)
    image = QImage(str(png))
    assert not image.isNull() and image.width() > 100
    path = tmp_path / "loss.csv"
    panel.loss.save_csv(path)
    rows = list(csv.reader(path.open()))
    assert rows[0] == ["worker", "step", "time_s", "loss", "smoothed"]
    assert sum(1 for r in rows[1:] if r[0] == "1") == 150
    assert any(r[0] == "mean" for r in rows)
    for plot in (panel.val, panel.throughput):
        plot.save_csv(tmp_path / f"{plot.objectName()}.csv")
        assert len((tmp_path / f"{plot.objectName()}.csv").read_text().splitlines()) > 2
    # the right-click menu of every plot offers both
    menu_texts = [a.text() for a in panel.loss.plot.getViewBox().menu.actions()]
    assert "Save plot as PNG…" in menu_texts and "Save data as CSV…" in menu_texts


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 1e6


@pytest.mark.slow
def test_soak_5000_updates_1000_redraws_bounded_memory(qtbot: Any, panel: PlotsPanel) -> None:
    """5,000 live updates through the real widgets, 1,000 of them painted: no crash, bounded memory and history.

    Guards against the PySide6 6.12 + pyqtgraph refcount crash after ~1000 redraws: every
    update calls setData on every curve, and the widgets really paint every 5th update
    (1,000 full redraws; painting each one would take minutes on 2 cores).
    """
    collector = GuiGarbageCollector(panel)  # the window's GC policy: frozen startup heap
    panel.resize(700, 450)
    panel.data.max_points = 2_000  # small cap so the history halving runs many times
    panel.reset(t0=1000.0)
    workers = 2
    updates = 5_000
    started = time.monotonic()
    rss_start = 0.0
    for u in range(updates):
        recs = step_records(workers, range(2 * u, 2 * u + 2))
        panel.add_records(recs)
        panel.flush()
        if u % 5 == 0:
            for plot in panel.plots:
                plot.viewport().repaint()
            QCoreApplication.processEvents()
        if u == 1_000:
            gc.collect()
            rss_start = _rss_mb()
    gc.collect()
    grown = _rss_mb() - rss_start
    collector.stop()
    print(f"soak: {updates} updates in {time.monotonic() - started:.1f} s, RSS grew {grown:.1f} MB")
    assert panel.frames == updates
    assert all(len(s) <= 2_000 for s in panel.data.loss.values())
    assert panel.data.loss[0].compactions > 0
    assert panel.loss.point_count(0) == len(panel.data.loss[0])
    assert grown < 60, f"memory grew by {grown:.0f} MB"


def test_live_axes_move_in_steps_and_fit_the_run_at_its_end(qtbot: Any, panel: PlotsPanel) -> None:
    """While a run is live the loss plot's range holds still between jumps; a finished run is fitted tightly."""
    vb = panel.loss.plot.getViewBox()
    moves: list[Any] = []
    vb.sigRangeChanged.connect(lambda _vb, r: moves.append(r))
    panel.set_live(True)
    for start in range(0, 1000, 10):  # 100 frames, 10 steps each
        panel.add_records(step_records(2, range(start, start + 10)))
        panel.flush()
        QCoreApplication.processEvents()
    qtbot.waitUntil(lambda: vb.viewRange()[0][1] > 1000 * 1.05, timeout=10_000)  # headroom past the last step
    assert len(moves) <= 30, len(moves)  # pyqtgraph's own auto-range moves at every frame
    panel.set_live(False)
    qtbot.waitUntil(lambda: 1000 <= vb.viewRange()[0][1] < 1000 * 1.05, timeout=10_000)  # fitted to the data
    panel.set_live(True)
    vb.setXRange(0, 100)  # a zoom by hand turns auto-range off: live or not, the view stays
    panel.add_records(step_records(2, range(1000, 1100)))
    panel.flush()
    qtbot.wait(200)
    assert vb.viewRange()[0][1] == pytest.approx(100, rel=0.05)


def test_legends_are_complete_before_the_first_record(panel: PlotsPanel) -> None:
    panel.set_run_shape({0: "worker 0", 1: "worker 1", 2: "worker 2"}, separate_models=False)
    rows = [label.text for _, label in panel.loss.legends[0].items]
    assert rows == ["worker 0", "worker 1", "worker 2", "mean"]
    assert [label.text for _, label in panel.throughput.legends[0].items] == rows[:3] + ["total"]
    labels = [label for _, label in panel.loss.legends[0].items]
    panel.add_records(step_records(3, range(50)))
    panel.flush()
    panel.set_run_shape({0: "worker 0", 1: "worker 1", 2: "worker 2"}, separate_models=False)
    assert [label for _, label in panel.loss.legends[0].items] == labels  # unchanged rows: not rebuilt
    assert panel.loss.point_count(0) == 50


def test_a_new_run_keeps_nothing_of_the_last_runs_axes(panel: PlotsPanel, qtbot: Any) -> None:
    panel.add_records(step_records(2, range(5000)))
    panel.flush()
    qtbot.waitUntil(lambda: panel.throughput.plot.getViewBox().viewRange()[1][1] > 100, timeout=5_000)
    qtbot.waitUntil(lambda: panel.val.loss_plot.getViewBox().viewRange()[0][1] > 40, timeout=5_000)
    panel.reset()
    panel.add_records(step_records(2, range(10)))  # the new run's first steps: no epoch, no throughput yet
    panel.flush()
    panel.grab()
    for plot in panel.plots:
        for item in plot.items:  # not the old run's 5,000 steps, 50 epochs or thousands of samples/s
            (x0, x1), (y0, y1) = item.getViewBox().viewRange()
            assert x1 < 40 and y1 < 40, (plot.objectName(), (x0, x1), (y0, y1))


def test_a_zoom_by_hand_does_not_outlive_its_run(panel: PlotsPanel, qtbot: Any) -> None:
    """Zoomed (the wheel turns auto-range off), then a new run: its curves are in view, not a blank 0-1 frame."""
    vb = panel.loss.plot.getViewBox()
    panel.add_records(step_records(2, range(200)))
    panel.flush()
    vb.scaleBy((0.5, 0.5))  # what three wheel notches do
    assert not any(vb.autoRangeEnabled())
    panel.reset()
    panel.add_records(step_records(2, range(500, 800)))
    panel.flush()
    qtbot.waitUntil(lambda: vb.viewRange()[0][1] >= 799, timeout=5_000)
    assert vb.viewRange()[0][0] <= 500
