"""The window reads well: plots follow the theme, searches draw one curve per trial, small windows fit."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtGui import QAction, QColor
from PySide6.QtWidgets import QToolButton

from app.views.lr_finder import LRFinderDialog
from core.config import Config


def _lightness(widget: Any) -> int:
    return QColor(widget.backgroundBrush().color()).lightness()


def test_lr_finder_and_search_plots_follow_the_theme(make_window: Any, qtbot: Any) -> None:
    window = make_window()
    assert window._theme.name == "light"
    search_plot = window.search_view.plot_search_parallel
    assert _lightness(search_plot) > 200
    dialog = LRFinderDialog(Config(), window)  # made after the theme: starts in its colours
    qtbot.addWidget(dialog)
    window.lr_finder = dialog
    assert _lightness(dialog.plot_lr_finder) > 200
    axis = dialog.plot_lr_finder.getPlotItem().getAxis("bottom")
    assert QColor(axis.textPen().color()).lightness() < 120  # dark text on the light background
    window.action_dark.trigger()
    try:
        assert _lightness(search_plot) < 60 and _lightness(dialog.plot_lr_finder) < 60
        assert QColor(axis.textPen().color()).lightness() > 150
    finally:
        window.action_dark.trigger()
    assert _lightness(search_plot) > 200


def test_predict_shows_the_expected_columns_and_offers_them_by_position(qtbot: Any, tmp_path: Any) -> None:
    import numpy as np
    from sklearn.datasets import load_digits

    from app.views.predict import PredictView
    from tests.trained_run import make_run

    run_dir = make_run(tmp_path / "runs")
    digits = load_digits()
    header = "label," + ",".join(f"f{j}" for j in range(64))
    rows = [f"{y}," + ",".join(f"{v:g}" for v in x) for x, y in zip(digits.data[:40], digits.target[:40])]
    (tmp_path / "renamed.csv").write_text(header + "\n" + "\n".join(rows) + "\n")
    view = PredictView()
    qtbot.addWidget(view)
    view.set_model(run_dir)
    qtbot.waitUntil(lambda: "64 columns" in view.label_columns.text(), timeout=30_000)
    assert "pixel_0_0" in view.label_columns.text() and "pixel_7_7" in view.label_columns.toolTip()
    assert not view.check_by_position.isVisibleTo(view)
    view.set_input(tmp_path / "renamed.csv")
    with qtbot.waitSignal(view.failed, timeout=60_000) as blocker:
        view.run()
    assert "f0" in blocker.args[0] and "pixel_0_0" in blocker.args[0] and "by position" in blocker.args[0]
    qtbot.waitUntil(lambda: not view.busy, timeout=30_000)
    assert view.check_by_position.isVisibleTo(view)
    view.check_by_position.setChecked(True)
    with qtbot.waitSignal(view.predicted, timeout=60_000):
        view.run()
    assert view.table.model().rowCount() == 40 and view.evaluation is not None  # the label column is the truth
    assert view.evaluation["n"] == 40 and np.isfinite(view.result.probs).all()
    view.wait(30.0)


def test_a_data_error_is_said_once_with_its_path_once_and_a_fix(make_window: Any, qtbot: Any, tmp_path: Any) -> None:
    from PySide6.QtWidgets import QLabel

    csv = tmp_path / "people.csv"  # a column with no value at all: the fit refuses it, naming it and the way out
    csv.write_text("age,notes,label\n" + "\n".join(f"{20 + i},,{i % 2}" for i in range(40)) + "\n")
    window = make_window()
    panel = window.panel
    panel.add_source(f"csv:{csv}")
    qtbot.waitUntil(lambda: "all missing" in panel.label_dataset_summary.text(), timeout=30_000)

    def shown() -> list[str]:
        return [
            label.text() for label in window.findChildren(QLabel) if label.isVisible() and "all missing" in label.text()
        ]

    assert len(shown()) == 1
    message = shown()[0]
    assert message.count(str(csv)) == 1 and "'notes'" in message and 'data.columns = {notes = "ignore"}' in message
    assert not window.action_start.isEnabled() and window.label_state.text().startswith("Cannot start")
    window.live.start()  # as a Start pressed before the description had failed
    qtbot.waitUntil(lambda: not window.controller.active and window.banner.isVisible(), timeout=60_000)
    qtbot.wait(200)
    assert len(shown()) == 1  # the summary; the banner points at it
    assert window.log_pane.toPlainText().count("all missing") == 1
    assert window.log_pane.toPlainText().count(str(csv)) == 2  # "starting: ... csv:PATH" and the error


SEARCH_TOML = """
[train]
epochs = 2
[model]
hidden = [16]
[parallel]
strategy = "search"
workers = 2
[search]
trials = 4
sampler = "grid"
pruner = "none"
"optim.lr" = [0.1, 0.05, 0.02, 0.01]
"""


def _step(trial: int, worker: int, step: int, loss: float) -> dict[str, Any]:
    return {
        "kind": "step",
        "t": 100.0 + step * 0.01 + trial,
        "worker": worker,
        "trial": trial,
        "epoch": 1,
        "step": step,
        "samples": step * 64,
        "loss": loss,
        "lr": 0.1,
    }


def test_search_records_draw_a_curve_per_trial_and_a_diverged_one_leaves_the_axis(qtbot: Any) -> None:
    from app.plots.live import PlotsPanel

    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.resize(1000, 700)
    panel.show()
    qtbot.waitExposed(panel)
    panel.reset(t0=100.0)
    panel.set_run_shape({0: "worker 0 (trials)", 1: "worker 1 (trials)"}, False, None, per_trial=True)
    records = []
    for trial, worker in ((0, 0), (1, 1), (2, 0)):  # worker 0 trains trials 0 and 2 one after the other
        base = 200 * (trial // 2)
        records += [_step(trial, worker, base + i, 2.0 / (1 + i / 20)) for i in range(1, 200)]
    records += [_step(3, 1, 200 + i, 1.0 * 10.0 ** (i / 2)) for i in range(1, 24)]  # diverges to 4e11
    records += [
        {"kind": "eval", "t": 103.0, "worker": w, "trial": t, "epoch": 1, "val_loss": v, "val_accuracy": 0.5}
        for t, w, v in ((0, 0, 0.5), (1, 1, 0.6), (2, 0, 0.4), (3, 1, 3e11))
    ]
    panel.add_records(records)
    panel.flush()
    qtbot.wait(50)  # the view boxes fit their ranges at the next turn of the event loop
    loss = panel.loss
    assert sorted(loss.smooth) == [0, 1, 2, 3] and loss.mean is None  # no mean across different models
    assert [label.text for _s, label in loss.legends[0].items] == ["trial 0", "trial 1", "trial 2", "trial 3"]
    assert loss.point_count(0) == 199 and loss.point_count(2) == 199  # trials of one worker stay apart
    assert sorted(panel.val.loss_curves) == [0, 1, 2, 3]
    assert sorted(panel.throughput.curves) == [0, 1]  # throughput is the worker processes'
    top = loss.plot.getViewBox().viewRange()[1][1]
    assert 2.0 <= top < 100.0, top  # the others' losses fill the axis; the diverged one leaves it
    assert panel.val.loss_plot.getViewBox().viewRange()[1][1] < 100.0


def test_search_progress_counts_trials() -> None:
    from app.viewmodels.trial_progress import TrialProgress, search_end_text

    p = TrialProgress(trials=12, epochs=10, workers=2)
    records = [{"kind": "trial", "t": 1.0 + n, "worker": n % 2, "trial": n, "state": "running"} for n in range(10)]
    records += [{"kind": "trial", "t": 2.0 + n, "worker": n % 2, "trial": n, "state": "complete"} for n in range(8)]
    records += [{"kind": "eval", "t": 20.0, "worker": 0, "trial": 8, "epoch": 10, "val_loss": 1, "val_accuracy": 1}]
    p.add(records)
    assert p.label("ETA 5s") == "Trial 10 of 12 · 8 done · %p% · ETA 5s"
    assert abs(p.progress - (8 + 1.0) / 12) < 1e-9  # trial 8 has run all its epochs, trial 9 none yet
    text = search_end_text(
        "finished",
        {
            "trials": [
                {"number": 0, "state": "complete", "value": 0.9},
                {"number": 1, "state": "pruned", "value": 0.2},
            ],
            "best_trial": 0,
            "metric": "val_accuracy",
        },
    )
    assert text == "finished: 2 trial(s): 1 complete, 1 pruned; best trial 0, val_accuracy 0.9000"


def test_a_search_in_the_window_reads_as_trials(make_window: Any, qtbot: Any, tmp_path: Any) -> None:
    path = tmp_path / "search.toml"
    path.write_text(SEARCH_TOML)
    window = make_window()
    assert window.open_config(str(path))
    window.action_start.trigger()
    qtbot.waitUntil(lambda: "of 4 trials" in window.log_pane.toPlainText(), timeout=180_000)  # the run's end
    window.plots.flush()
    loss = window.plots.loss
    assert sorted(loss.smooth) == [0, 1, 2, 3] and loss.mean is None
    assert [label.text for _s, label in loss.legends[0].items] == [f"trial {n}" for n in range(4)]
    assert window.progress_run.format().startswith("4 of 4 trials")
    log = window.log_pane.toPlainText()
    assert "finished: 4 of 4 trials: 4 complete; best trial" in log and "after 0 " not in log
    best = window.controller.session.summary["best_trial"] if window.controller.session else None
    if isinstance(best, int):
        assert window.plots.data.winner == best


def test_robust_range_leaves_only_a_far_out_curve_off() -> None:
    import numpy as np

    from app.plots.robust_range import robust_range

    healthy = [np.linspace(2.3, 0.01 * k, 500) for k in (1, 2, 3)]
    assert robust_range(healthy) is None  # curves that agree keep their whole range
    assert robust_range([np.array([2.3, 1e-4, np.nan])]) is None  # one curve: nothing to compare with
    diverged = np.concatenate([np.linspace(2.3, 0.5, 100), [1e3, 1e7, 4e11, np.inf]])
    low, top = robust_range(healthy + [diverged])
    assert low == 0.01 and top == 2.3


DESIGN_TOOLBAR_ACTIONS = (
    "action_start",
    "action_pause",
    "action_resume",
    "action_stop",
    "action_export",
    "action_open_config",
    "action_save_config",
    "action_fork",
    "action_open_run",
)


@pytest.mark.parametrize("size", [(900, 600), (1280, 800)])
def test_every_toolbar_action_is_on_screen(make_window: Any, qtbot: Any, size: tuple[int, int]) -> None:
    window = make_window()
    window.resize(*size)
    qtbot.waitUntil(lambda: window.width() == size[0], timeout=5_000)
    tb = window.toolbar
    qtbot.waitUntil(lambda: tb.widgetForAction(window.action_export).isVisible(), timeout=5_000)
    for name in DESIGN_TOOLBAR_ACTIONS:
        action = tb.findChild(QAction, name) or window.findChild(QAction, name)
        assert action in tb.actions(), name
        button = tb.widgetForAction(action)
        assert button.isVisible(), f"{name} is behind the toolbar's overflow at {size}"
        assert button.geometry().right() <= tb.width()
    more = tb.findChild(QToolButton, "qt_toolbar_ext_button")
    assert more is None or not more.isVisible()
    assert window.toolbar_fit.compact == (size[0] < 1100)


def _small_window(make_window: Any, qtbot: Any) -> Any:
    window = make_window()
    window.resize(900, 600)
    qtbot.waitUntil(lambda: window.width() == 900 and window.height() == 600, timeout=5_000)
    return window


def test_training_tab_reads_at_900x600(make_window: Any, qtbot: Any) -> None:
    from PySide6.QtGui import QFontMetrics

    from app.plots.text import full_title, shown_title

    window = _small_window(make_window, qtbot)
    plots = window.plots
    records = [
        {
            "kind": "step",
            "t": 1.0 + i * 0.01,
            "worker": w,
            "epoch": 1 + i // 1000,
            "step": i,
            "samples": i * 64,
            "loss": 1.0 / (1 + i),
            "lr": 0.1 * (1 - i / 7000),
        }
        for i in range(1, 7000, 7)
        for w in (0, 1)
    ]
    records += [
        {"kind": "eval", "t": 2.0 + e, "worker": 0, "epoch": e, "val_loss": 1.0 / e, "val_accuracy": 0.9}
        for e in range(1, 8)
    ]
    plots.add_records(records)
    plots.flush()
    items = [
        (plot.objectName(), item) for plot in (plots.loss, plots.val, plots.throughput, plots.lr) for item in plot.items
    ]

    def cut() -> list[tuple[str, str]]:
        return [(name, shown_title(item)) for name, item in items if shown_title(item) != full_title(item)]

    try:  # once laid out, every title is whole
        qtbot.waitUntil(lambda: not cut(), timeout=5_000)
    except Exception:
        pytest.fail(f"titles cut at 900x600: {cut()}")
    legend = plots.throughput.legends[0]  # the throughput legend is there, inside its plot's widget
    assert legend.isVisible() and [label.text for _s, label in legend.items] == ["worker 0", "worker 1", "total"]
    qtbot.waitUntil(
        lambda: legend.mapRectToScene(legend.boundingRect()).right() <= plots.throughput.width() + 1, timeout=5_000
    )
    axis = plots.lr.plot.getAxis("bottom")  # step ticks up to 7000: labels that do not run together
    lo, hi = plots.lr.plot.getViewBox().viewRange()[0]
    width = axis.width() if axis.width() > 0 else plots.lr.plot.getViewBox().width()
    levels = axis.tickValues(lo, hi, width)
    metrics = QFontMetrics(axis.style["tickFont"] or axis.font())
    for spacing, values in levels[:1]:
        labels = axis.tickStrings(values, 1.0, spacing)
        pixels = [(v - lo) / (hi - lo) * width for v in values]
        for (a, la), (b, lb) in zip(zip(pixels, labels), zip(pixels[1:], labels[1:])):
            assert b - a > (metrics.horizontalAdvance(la) + metrics.horizontalAdvance(lb)) / 2, labels
    assert axis.tickStrings([2000.0, 12000.0], 1.0, 10000.0) == ["2k", "12k"]


def test_compare_tables_show_three_rows_at_900x600(make_window: Any, qtbot: Any) -> None:
    window = _small_window(make_window, qtbot)
    window.tabs.setCurrentWidget(window.compare_view)
    qtbot.wait(100)
    for table in (window.compare_view.table_best, window.compare_view.table_diff):
        table.setRowCount(5)
        rows = table.viewport().height() / table.verticalHeader().defaultSectionSize()
        assert rows >= 3, (table.objectName(), rows)


@pytest.mark.parametrize("size", [(900, 600), (1280, 800)])
def test_a_sweeps_validation_legend_is_not_cut(make_window: Any, qtbot: Any, size: tuple[int, int]) -> None:
    window = make_window()
    window.resize(*size)
    qtbot.waitUntil(lambda: window.width() == size[0], timeout=5_000)
    plots = window.plots
    plots.set_run_shape({0: "lr 0.2", 1: "lr 0.05", 2: "lr 0.005"}, True, {0: 0.2, 1: 0.05, 2: 0.005})
    plots.add_records(
        [
            {"kind": "eval", "t": 1.0 + e, "worker": w, "epoch": e, "val_loss": 1.0 / e, "val_accuracy": 0.9}
            for e in range(1, 9)
            for w in range(3)
        ]
    )
    plots.flush()
    qtbot.wait(100)
    legend = plots.val.legends[0]
    assert legend.isVisible() and [label.text for _s, label in legend.items] == ["lr 0.2", "lr 0.05", "lr 0.005"]
    # once laid out (the validation widget widens by its legend), the legend is inside it
    qtbot.waitUntil(
        lambda: legend.mapRectToScene(legend.boundingRect()).right() <= plots.val.width() + 1, timeout=5_000
    )


def test_narrow_axes_thin_their_ticks(qtbot: Any) -> None:
    from app.plots.text import MIN_TICK_PX, compact_axis

    axis = compact_axis()
    for lo, hi, size in ((1.5, 2.3, 90.0), (0.0, 7000.0, 120.0), (0.0, 1.0, 400.0)):
        (spacing, _offset), *_rest = axis.tickSpacing(lo, hi, size)
        assert (hi - lo) / spacing * MIN_TICK_PX <= size or spacing >= hi - lo, (lo, hi, size, spacing)
    assert axis.tickSpacing(0.0, 1.0, 400.0)[0][0] <= 0.2  # a wide plot keeps pyqtgraph's own ticks
