"""A diverged loss does not ruin the plots: axes keep to each curve's steady values, the diverged points are
drawn at the edge and marked, marker labels neither overlap nor leave the plot, and Compare has a log scale."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
import pytest

from app.plots.live import PlotsPanel
from app.viewmodels.series import spikes, without_spikes
from core.config import Config

# What a digits MLP at optim.lr = 100, momentum 0.9, train.on_divergence = "recover" writes (one worker).
LOSSES = [(4, 1.66e22), (11, 4.91e35), (21, 2.13), (22, 1.63), (36, 3.2), (44, 4.3), (57, 2.9), (81, 2.58), (90, 2.44)]
VAL = [(1, 1.74, 0.57), (2, 60657.0, 0.10), (3, 2.86, 0.10), (4, 2.40, 0.10)]


def diverged_records(t0: float = 1000.0) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = [{"kind": "state", "t": t0, "worker": None, "state": "starting", "detail": ""}]
    lr = 100.0
    for i, (step, loss) in enumerate(LOSSES):
        t = t0 + 0.01 * (i + 1)
        recs.append(
            {
                "kind": "step",
                "t": t,
                "worker": 0,
                "epoch": 1,
                "step": step,
                "samples": step * 64,
                "loss": loss,
                "lr": lr,
            }
        )
        if loss > 1e10:  # rolled back: the next part trains at a tenth of the rate
            recs.append(
                {
                    "kind": "recovery",
                    "t": t,
                    "worker": 0,
                    "epoch": 1,
                    "step": step,
                    "lr_from": lr,
                    "lr_to": lr / 10,
                    "loss": "nan",
                    "weights_from": 0,
                }
            )
            lr /= 10
    recs += [
        {"kind": "eval", "t": t0 + 1 + e, "worker": 0, "epoch": e, "val_loss": vl, "val_accuracy": acc}
        for e, vl, acc in VAL
    ]
    return recs


def test_spikes_are_values_far_above_the_rest_of_their_curve() -> None:
    losses = np.array([v for _s, v in LOSSES])
    assert spikes(losses).tolist() == [True, True] + [False] * 7
    assert spikes(np.array([v for _e, v, _a in VAL])).tolist() == [False, True, False, False]
    assert not spikes(np.geomspace(2.3, 1e-5, 1000)).any()  # a loss falling over many decades is not diverged
    assert not spikes(np.array([0.0, 1e6, 2.0])).any()  # not positive: nothing to judge in decades
    assert without_spikes(losses)[:3].tolist() == [2.13, 2.13, 2.13]


def _labels_rects(item: pg.PlotItem) -> list[Any]:
    return [
        i.label.mapRectToScene(i.label.boundingRect())
        for i in item.items
        if isinstance(i, pg.InfiniteLine) and getattr(i, "label", None) is not None and i.label.isVisible()
    ]


@pytest.mark.parametrize("size", [(900, 440), (560, 360), (420, 300)])
def test_a_recovered_divergence_keeps_the_loss_axes_to_the_steady_values(qtbot: Any, size: tuple[int, int]) -> None:
    panel = PlotsPanel()
    panel.resize(*size)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    panel.add_records(diverged_records())
    panel.flush()
    loss = panel.loss.plot
    qtbot.waitUntil(lambda: 3.0 < loss.getViewBox().viewRange()[1][1] < 10.0, timeout=5_000)
    smooth = panel.loss.smooth[0].getData()[1]
    assert float(np.nanmax(smooth)) < 5.0  # the smoothed curve leaves the diverged losses out
    marks = [m for m in panel.loss._spike_marks.values() if m.xData is not None and len(m.xData)]
    assert len(marks) == 1 and marks[0].xData.tolist() == [4.0, 11.0]  # at the diverged steps,
    assert marks[0].yData.tolist() == [4.3, 4.3]  # drawn at the top of the steady values
    assert "1.66e+22" in marks[0].toolTip()
    val = panel.val.loss_plot
    qtbot.waitUntil(lambda: 2.0 < val.getViewBox().viewRange()[1][1] < 10.0, timeout=5_000)  # not 60,657

    panel.grab()  # the labels take their places when painted
    rects = _labels_rects(loss)
    assert len(rects) == (2 if size[0] > 500 else 0)  # a plot too small for a label leaves it to the tooltip
    view = loss.getViewBox().sceneBoundingRect()
    for rect in rects:
        assert view.contains(rect), (rect, view)  # not cut at the left edge ("ed at step 10")
    assert not any(a.intersects(b) for i, a in enumerate(rects) for b in rects[i + 1 :])

    panel.set_log_y(True)
    qtbot.waitUntil(lambda: loss.getViewBox().viewRange()[1][1] < 1.0, timeout=5_000)  # log10: under 10


def _write_run(runs: Path, name: str, records: list[dict[str, Any]], acc: float) -> Path:
    run = runs / name
    run.mkdir(parents=True)
    (run / "config.toml").write_text(Config().replace("parallel", strategy="single", workers=1).to_toml())
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "summary.json").write_text(
        json.dumps({"status": "finished", "strategy": "single", "workers": 1, "final": {"val_accuracy": acc}})
    )
    return run


def test_compare_keeps_a_diverged_run_off_its_axes_and_has_a_log_scale(qtbot: Any, tmp_path: Path) -> None:
    from app.views.compare import CompareView

    steady = [dict(r, loss=2.0 / r["step"]) if r["kind"] == "step" else r for r in diverged_records()]
    steady = [r for r in steady if r["kind"] != "recovery"]
    steady = [dict(r, val_loss=1.0 / r["epoch"]) if r["kind"] == "eval" else r for r in steady]
    runs = [_write_run(tmp_path, "a-diverged", diverged_records(), 0.57), _write_run(tmp_path, "b-steady", steady, 0.9)]
    view = CompareView()
    view.resize(1000, 600)
    qtbot.addWidget(view)
    view.show()
    with qtbot.waitSignal(view.compared, timeout=20_000):
        view.compare(runs)
    for metric in ("train_loss", "val_loss"):
        vb = view.items[metric].getViewBox()
        qtbot.waitUntil(lambda vb=vb: 1.5 < vb.viewRange()[1][1] < 10.0, timeout=5_000)  # not 1e35
    assert view.check_log_y.text() == "Log scale"
    view.check_log_y.setChecked(True)
    assert view.items["train_loss"].ctrl.logYCheck.isChecked() and view.items["val_loss"].ctrl.logYCheck.isChecked()
    assert not view.items["figure"].ctrl.logYCheck.isChecked()
    vb = view.items["train_loss"].getViewBox()
    qtbot.waitUntil(lambda: vb.viewRange()[1][1] < 1.0, timeout=5_000)
    assert len(view.curves["train_loss"]) == 2
    view.wait()
