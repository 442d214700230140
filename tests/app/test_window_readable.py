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
