"""The window is usable at 900x600 and 1280x800: Compare keeps its legend and plots in view, the Compare and
Evaluate tables show three rows or more, and no one-line label wraps into the tables' room."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.config import Config
from tests.app.views.test_runs_compare import write_run

SIZES = [(900, 600), (1280, 800)]


def _window(make_window: Any, qtbot: Any, size: tuple[int, int]) -> Any:
    window = make_window()
    window.resize(*size)
    qtbot.waitUntil(lambda: window.width() == size[0] and window.height() == size[1], timeout=5_000)
    return window


def _rows_in_view(table: Any) -> float:
    return table.viewport().height() / table.rowHeight(0)


@pytest.mark.parametrize("size", SIZES)
def test_compare_keeps_its_legend_plots_and_three_table_rows(
    make_window: Any, qtbot: Any, tmp_path: Path, size: tuple[int, int]
) -> None:
    base = Config().replace("train", epochs=3)
    runs = [
        write_run(tmp_path / "runs", f"20250101-1{i}0000-{name}", base.replace("optim", lr=lr), acc)
        for i, (name, lr, acc) in enumerate(
            (("hogwild-mlp-a", 0.05, 0.9), ("hogwild-mlp-b", 0.01, 0.95), ("c", 0.2, 0.8))
        )
    ]
    window = _window(make_window, qtbot, size)
    view = window.compare_view
    window.show_tab(view)
    with qtbot.waitSignal(view.compared, timeout=20_000):
        view.compare(runs)
    qtbot.wait(50)  # one turn of the event loop: the layouts settle
    plot = view.plot

    def inside() -> list[str]:
        right = plot.width() + 1
        items = [(m, it) for m, it in view.items.items()] + [("legend", view.legend)]
        return [m for m, it in items if it.mapRectToScene(it.boundingRect()).right() > right]

    qtbot.waitUntil(lambda: not inside(), timeout=5_000)  # every plot and the legend in the view, not cut off
    assert view.legend.isVisible() and view.legend.scene() is plot.scene()
    assert len(view.legend.items) == 3
    for table in (view.table_best, view.table_diff):
        assert _rows_in_view(table) >= 3, (table.objectName(), _rows_in_view(table))
    line = view.label_title.fontMetrics().height()
    assert view.label_title.height() < 2 * line  # the runs' names on one line, elided, whole in the tooltip
    assert all(r.name in view.label_title.toolTip() for r in view.runs) or view.label_title.toolTip() == ""


def _classification(classes: int = 10) -> dict[str, Any]:
    cm = [[10 if i == j else 1 for j in range(classes)] for i in range(classes)]
    return {
        "task": "classification",
        "accuracy": 0.5,
        "n": 19 * classes,
        "macro": {"f1": 0.5},
        "misclassified_total": 3,
        "confusion": cm,
        "per_class": [
            {"class": f"class {i}", "precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 19} for i in range(classes)
        ],
        "checkpoint": {"which": "best"},
    }


@pytest.mark.parametrize("size", SIZES)
def test_evaluate_tables_show_three_rows_and_the_gallery_its_captions(
    make_window: Any, qtbot: Any, size: tuple[int, int]
) -> None:
    import numpy as np

    window = _window(make_window, qtbot, size)
    view = window.evaluate_view
    window.show_tab(view)
    images = [(np.full((28, 28), 0.5, dtype=np.float32), f"true {i} → {i + 1} (90%)") for i in range(3)]
    view.show_evaluation(_classification(), images)
    qtbot.wait(50)
    for table in (view.table_confusion, view.table_per_class):
        assert _rows_in_view(table) >= 3, (table.objectName(), _rows_in_view(table))
    line = view.label_summary.fontMetrics().height()
    assert view.label_summary.height() < 2 * line, view.label_summary.height()
    gallery = view.list_misclassified
    item = gallery.visualItemRect(gallery.item(0))
    assert item.height() > 0 and gallery.viewport().rect().contains(item), (item, gallery.viewport().rect())


def test_the_regression_plots_titles_fit_their_plots(qtbot: Any) -> None:
    from PySide6.QtGui import QFont, QFontMetrics

    from app.plots.text import TITLE_SIZE, full_title, shown_title
    from app.views.evaluate import EvaluateView

    view = EvaluateView()
    view.resize(540, 360)
    qtbot.addWidget(view)
    view.show()
    actual = [float(v) for v in range(400, 18_824, 9)]
    full = {
        "task": "regression",
        "rmse": 411.1,
        "mae": 274.1,
        "r2": 0.98,
        "n": 12_000,
        "checkpoint": {"which": "best"},
        "pairs": [[a, a * 1.01] for a in actual],
    }
    view.show_evaluation(full)
    item = view.plot_actual.getPlotItem()
    assert full_title(item) == f"Predicted vs actual (a random {len(actual):,} of 12,000)"

    def fits() -> bool:
        font = QFont(item.titleLabel.item.font())
        font.setPointSizeF(float(TITLE_SIZE.removesuffix("pt")))
        width = QFontMetrics(font).horizontalAdvance(shown_title(item))
        box = item.getViewBox().geometry()
        return box.center().x() + width / 2 <= item.width() and view.plot_actual.width() >= item.width()

    qtbot.waitUntil(fits, timeout=5_000)  # elided ("Predicted vs actual…"), not cut at the plot's edge
    assert shown_title(item).endswith("…")
    assert item.titleLabel.toolTip() == full_title(item)  # the whole title
    qtbot.waitUntil(lambda: item.getViewBox().viewRange()[0][1] >= 18_823, timeout=5_000)  # the highest target


def test_the_serve_plots_keep_to_their_widgets_at_900x600(make_window: Any, qtbot: Any) -> None:
    from app.plots.text import full_title, shown_title
    from tests.app.views.test_serve_view import TABLE_SPEC

    window = _window(make_window, qtbot, (900, 600))
    view = window.serve_view
    window.show_tab(view)
    view.show_spec(TABLE_SPEC)
    monitor = view.monitor
    plots = (monitor.plot_serve_latency, monitor.plot_serve_throughput, monitor.plot_serve_batches)

    def overflowing() -> list[str]:
        return [p.objectName() for p in plots if p.getPlotItem().width() > p.width() + 1]

    qtbot.waitUntil(lambda: not overflowing(), timeout=5_000)  # no plot wider than its widget, cut at its edge
    for plot in plots:
        item = plot.getPlotItem()
        shown = shown_title(item)
        assert shown == full_title(item) or shown.endswith("…"), shown


def test_the_serve_forms_column_names_are_whole_at_900x600(make_window: Any, qtbot: Any) -> None:
    import copy

    from PySide6.QtWidgets import QLabel

    from app.shell.elided_label import ElidedLabel
    from tests.app.views.test_serve_view import TABLE_SPEC

    spec = copy.deepcopy(TABLE_SPEC)
    spec["x-traindesk"]["columns"].append({"name": "flipper_length_mm", "kind": "number", "example": 181.0})
    window = _window(make_window, qtbot, (900, 600))
    view = window.serve_view
    window.show_tab(view)
    view.show_spec(spec)
    labels = [w for w in view.findChildren(ElidedLabel) if w.text() in ("flipper_length_mm", "bill_length_mm")]
    assert len(labels) == 2

    def cut() -> list[str]:
        return [w.text() for w in labels if QLabel.text(w) != w.text()]

    qtbot.waitUntil(lambda: all(w.isVisible() for w in labels) and not cut(), timeout=5_000)


def _settle_layouts() -> None:
    """Deliver the layout requests a change posts, level by level up to the window (each level posts the next)."""
    from PySide6.QtCore import QCoreApplication, QEvent

    for _ in range(20):
        QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        QCoreApplication.processEvents()


def _columns_in_view(table: Any) -> int:
    width = table.viewport().width()
    count = table.model().columnCount()
    return sum(1 for c in range(count) if table.columnViewportPosition(c) + table.columnWidth(c) <= width)


IMAGE_SPEC = {
    "components": {
        "schemas": {"PredictRequest": {"oneOf": [{"properties": {"images": {"description": "PNG or JPEG, 8x8"}}}]}}
    }
}


@pytest.mark.parametrize("size", SIZES)
def test_an_image_models_answer_in_serve_keeps_the_window_to_its_size(
    make_window: Any, qtbot: Any, tmp_path: Path, size: tuple[int, int]
) -> None:
    """The try-it form of an image model with an answer on screen: the window stays 900x600 (its log and status
    bar in it), the picture's classes show three rows and their bars."""
    import json

    from PIL import Image

    window = _window(make_window, qtbot, size)
    view = window.serve_view
    window.show_tab(view)
    view.show_spec(IMAGE_SPEC)
    digit = tmp_path / "digit.png"
    Image.new("L", (8, 8), 128).save(digit)
    view.try_form.set_images([digit])
    probabilities = {str(i): 0.5 if i == 3 else 0.5 / 9 for i in range(10)}
    answer = {"predictions": [{"class": "3", "probabilities": probabilities}]}
    view._keep_image_answers([digit], 200, json.dumps(answer).encode())
    view.text_answer.setPlainText("HTTP 200\n" + "\n".join(f"  {c}  {p:.3f}" for c, p in probabilities.items()))
    table = view.table_serve_top_classes
    qtbot.waitUntil(lambda: table.rowCount() == 5 and table.isVisible(), timeout=5_000)
    _settle_layouts()
    assert window.minimumSizeHint().height() <= 600, window.minimumSizeHint()  # a 900x600 screen holds it
    assert (window.width(), window.height()) == size
    for part in (window.log_pane, window.statusBar()):
        bottom = part.mapTo(window, part.rect().bottomLeft()).y()
        assert part.isVisible() and bottom < size[1], (part.objectName(), bottom)
    assert window.log_pane.height() >= window.log_pane.minimumSizeHint().height()
    assert _rows_in_view(table) >= 3, table.viewport().height()
    assert _columns_in_view(table) == 2 and table.columnWidth(1) >= 60, table.columnWidth(1)  # bars to read
    picture = view.label_serve_image
    assert picture.pixmap() is not None and min(picture.width(), picture.height()) >= 48


def test_the_predict_tabs_tables_show_three_columns_beside_a_picture_at_900x600(
    make_window: Any, qtbot: Any, tmp_path: Path
) -> None:
    import types

    import numpy as np
    from PIL import Image

    window = _window(make_window, qtbot, (900, 600))
    view = window.predict_view
    window.show_tab(view)
    files = []
    for i in range(12):
        files.append(tmp_path / f"digit_{i}.png")
        Image.new("L", (8, 8), 20 * i).save(files[-1])
    classes = [str(i) for i in range(10)]
    probs = np.full((12, 10), 0.05)
    probs[np.arange(12), np.arange(12) % 10] = 0.55
    evaluation = _classification()
    for i, row in enumerate(evaluation["per_class"]):
        row["class"] = classes[i]  # the digits' classes, as the image model names them
    result = types.SimpleNamespace(
        ids=[p.name for p in files],
        classes=classes,
        probs=probs,
        seconds=0.1,
        model_path=tmp_path / "model.safetensors",
        evaluation=lambda: evaluation,
    )
    view._pictured = files
    view._on_done(result)
    qtbot.waitUntil(lambda: view.image_answer.isVisible() and view.test_panel.isVisible(), timeout=5_000)
    _settle_layouts()
    for table in (view.table, view.table_test_confusion, view.table_test_per_class):
        assert _columns_in_view(table) >= 3, (table.objectName(), _columns_in_view(table))
    assert _rows_in_view(view.table_predict_top_classes) >= 3
