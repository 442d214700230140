"""The window reads well: plots follow the theme, searches draw one curve per trial, small windows fit."""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QColor

from app.lr_finder_view import LRFinderDialog
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

    from app.predict_view import PredictView
    from trained_run import make_run

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


def test_a_text_column_error_is_said_once_with_its_path_once_and_a_fix(make_window: Any, qtbot: Any,
                                                                        tmp_path: Any) -> None:
    from PySide6.QtWidgets import QLabel

    csv = tmp_path / "people.csv"
    csv.write_text("age,city,label\n" + "\n".join(f"{20 + i},{'ab'[i % 2]},{i % 2}" for i in range(40)) + "\n")
    window = make_window()
    panel = window.panel
    panel.add_source(f"csv:{csv}")
    qtbot.waitUntil(lambda: "is not numeric" in panel.label_dataset_summary.text(), timeout=30_000)

    def shown() -> list[str]:
        return [label.text() for label in window.findChildren(QLabel)
                if label.isVisible() and "is not numeric" in label.text()]

    assert len(shown()) == 1
    message = shown()[0]
    assert message.count(str(csv)) == 1 and "data.target = 'city'" in message and "drop the column" in message
    window.action_start.trigger()
    qtbot.waitUntil(lambda: not window.controller.active and window.banner.isVisible(), timeout=60_000)
    qtbot.wait(200)
    assert len(shown()) == 1  # the summary; the banner points at it
    assert window.log_pane.toPlainText().count("is not numeric") == 1
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
    return {"kind": "step", "t": 100.0 + step * 0.01 + trial, "worker": worker, "trial": trial, "epoch": 1,
            "step": step, "samples": step * 64, "loss": loss, "lr": 0.1}


def test_search_records_draw_a_curve_per_trial_and_a_diverged_one_leaves_the_axis(qtbot: Any) -> None:
    from app.plots import PlotsPanel

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
    records += [{"kind": "eval", "t": 103.0, "worker": w, "trial": t, "epoch": 1, "val_loss": v, "val_accuracy": 0.5}
                for t, w, v in ((0, 0, 0.5), (1, 1, 0.6), (2, 0, 0.4), (3, 1, 3e11))]
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
    from app.trial_progress import TrialProgress, search_end_text

    p = TrialProgress(trials=12, epochs=10, workers=2)
    records = [{"kind": "trial", "t": 1.0 + n, "worker": n % 2, "trial": n, "state": "running"} for n in range(10)]
    records += [{"kind": "trial", "t": 2.0 + n, "worker": n % 2, "trial": n, "state": "complete"} for n in range(8)]
    records += [{"kind": "eval", "t": 20.0, "worker": 0, "trial": 8, "epoch": 10, "val_loss": 1, "val_accuracy": 1}]
    p.add(records)
    assert p.label("ETA 5s") == "Trial 10 of 12 · 8 done · %p% · ETA 5s"
    assert abs(p.progress - (8 + 1.0) / 12) < 1e-9  # trial 8 has run all its epochs, trial 9 none yet
    text = search_end_text("finished", {"trials": [{"number": 0, "state": "complete", "value": 0.9},
                                                   {"number": 1, "state": "pruned", "value": 0.2}],
                                        "best_trial": 0, "metric": "val_accuracy"})
    assert text == "finished: 2 trial(s): 1 complete, 1 pruned; best trial 0, val_accuracy 0.9000"


def test_a_search_in_the_window_reads_as_trials(make_window: Any, qtbot: Any, tmp_path: Any) -> None:
    path = tmp_path / "search.toml"
    path.write_text(SEARCH_TOML)
    window = make_window()
    assert window.open_config(str(path))
    window.action_start.trigger()
    qtbot.waitUntil(lambda: "trial(s)" in window.log_pane.toPlainText(), timeout=180_000)  # the run's end
    window.plots.flush()
    loss = window.plots.loss
    assert sorted(loss.smooth) == [0, 1, 2, 3] and loss.mean is None
    assert [label.text for _s, label in loss.legends[0].items] == [f"trial {n}" for n in range(4)]
    assert window.progress_run.format().startswith("4 of 4 trials")
    log = window.log_pane.toPlainText()
    assert "finished: 4 trial(s): 4 complete; best trial" in log and "after 0 epoch(s)" not in log
    best = window.controller.session.summary["best_trial"] if window.controller.session else None
    if isinstance(best, int):
        assert window.plots.data.winner == best


def test_robust_range_leaves_only_a_far_out_curve_off() -> None:
    import numpy as np

    from app.robust_range import robust_range

    healthy = [np.linspace(2.3, 0.01 * k, 500) for k in (1, 2, 3)]
    assert robust_range(healthy) is None  # curves that agree keep their whole range
    assert robust_range([np.array([2.3, 1e-4, np.nan])]) is None  # one curve: nothing to compare with
    diverged = np.concatenate([np.linspace(2.3, 0.5, 100), [1e3, 1e7, 4e11, np.inf]])
    low, top = robust_range(healthy + [diverged])
    assert low == 0.01 and top == 2.3
