"""Evaluate view: a run's validation results. Confusion matrix heat map, per-class table, mistakes gallery.

``EvaluateView()``; ``load_run(run_dir)`` reads the run's eval.json (or
evaluates the checkpoint when there is none, or when ``recompute``) on a
background thread; ``evaluated`` (the eval dict) or ``failed`` (one line)
follows. Widgets change only in the GUI thread, from the result callbacks.
``combo_checkpoint`` chooses the run's best evaluation (the default once
checkpoints/best.pt exists) or its last checkpoint; changing it evaluates
that one. Only the evaluation of the checkpoint the run hands on (best once it
exists, else last: the run's figure) is written to eval.json; the other one's is
computed when shown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QListView,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.plots.live import PlotColors
from app.plots.text import keep_rows, set_fitting_title
from app.shell.elided_label import ElidedLabel
from app.shell.tasks import BackgroundCalls
from app.shell.theme import style_plot_widget
from app.views.checkpoint_choice import CheckpointCombo
from app.views.class_tables import ConfusionTable, PerClassTable, heat_color  # noqa: F401 - heat_color: one place
from app.views.export_dialog import error_text
from app.views.image_answer import to_pixmap
from core.services.runs.files import RunDir

GALLERY_LIMIT = 48
THUMB = 72
ROWS_SHOWN = 3  # table rows a short window keeps in view


def _load(run_dir: Path, recompute: bool, which: str = "last") -> tuple[dict[str, Any], list[tuple[np.ndarray, str]]]:
    """Background thread: the evaluation of checkpoint ``which`` and the images of its mistakes."""
    from core.services.evaluate_run import evaluate_run, misclassified_images

    full = None if recompute or _stale(run_dir, which) else _saved(run_dir, which)
    if full is None:
        full = evaluate_run(run_dir, write=which == RunDir(run_dir).default_checkpoint(), checkpoint=which)
    try:
        images = misclassified_images(run_dir, full, GALLERY_LIMIT)
    except Exception:  # the gallery is a bonus: data moved or unreadable images must not hide the metrics
        images = []
    return full, images


def _saved(run_dir: Path, which: str) -> dict[str, Any] | None:
    """eval.json when it evaluated checkpoint ``which`` (the end-of-run evaluation is of the handed-on one)."""
    from core.services.evaluate_run import load_evaluation

    full = load_evaluation(run_dir)
    if full is None or (full.get("checkpoint") or {}).get("which", "last") != which:
        return None
    return full


def _stale(run_dir: Path, which: str = "last") -> bool:
    """eval.json is older than the checkpoint (e.g. the run was resumed): evaluate again."""
    try:
        run = RunDir(run_dir)
        return run.evaluation.stat().st_mtime < run.checkpoint(which).stat().st_mtime
    except OSError:
        return False


class EvaluateView(QWidget):
    evaluated = Signal(dict)
    failed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("evaluate_view")
        self.run_dir: Path | None = None
        self.evaluation: dict[str, Any] | None = None
        self._calls = BackgroundCalls(self)
        self._token = 0  # results of an older load_run are dropped

        self.label_context = QLabel(objectName="label_eval_context")
        self.label_context.setWordWrap(True)
        self.label_context.hide()
        # one line, whole in its tooltip: wrapped beside the weights' combo it took five lines at 900x600
        self.label_summary = ElidedLabel("No run loaded.", objectName="label_eval_summary")
        self.combo_checkpoint = CheckpointCombo()
        self.button_reevaluate = QPushButton("Re-evaluate", objectName="button_reevaluate")
        self.button_reevaluate.setEnabled(False)
        self.button_reevaluate.setToolTip("evaluate the run's checkpoint on its validation split again")
        self.table_confusion = ConfusionTable(objectName="table_confusion")
        self.table_per_class = PerClassTable(objectName="table_per_class")
        self.label_gallery = QLabel("Misclassified samples", objectName="label_gallery")
        self.list_misclassified = QListWidget(objectName="list_misclassified")
        self.list_misclassified.setViewMode(QListView.ViewMode.IconMode)
        self.list_misclassified.setIconSize(QSize(THUMB, THUMB))
        self.list_misclassified.setResizeMode(QListView.ResizeMode.Adjust)
        self.list_misclassified.setMovement(QListView.Movement.Static)
        for table in (self.table_confusion, self.table_per_class):
            keep_rows(table, ROWS_SHOWN)
        # the gallery's thumbnails with their captions under them, and its scroll bar
        self.list_misclassified.setMinimumHeight(THUMB + 2 * self.fontMetrics().height() + 24)
        self._build_regression()
        self._layout()
        self.button_reevaluate.clicked.connect(
            lambda: self.load_run(self.run_dir, recompute=True) if self.run_dir else None
        )
        self.combo_checkpoint.currentIndexChanged.connect(self._on_checkpoint_changed)

    def _build_regression(self) -> None:
        """A regression run's views: the metric table, predicted vs actual, residuals (eval.json's pairs)."""
        self.table_metrics = QTableWidget(0, 2, objectName="table_regression_metrics")
        self.table_metrics.setHorizontalHeaderLabels(["metric", "value"])
        self.table_metrics.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table_metrics.verticalHeader().setVisible(False)
        self.line_identity = pg.PlotCurveItem(pen=pg.mkPen("#7f7f7f", style=Qt.PenStyle.DashLine))
        self.plot_actual, self.scatter_actual = _scatter_plot(
            "plot_predicted_vs_actual",
            "Predicted vs actual",
            "actual",
            "predicted",
            (31, 119, 180, 150),
            self.line_identity,
        )
        self.plot_residuals, self.scatter_residuals = _scatter_plot(
            "plot_residuals",
            "Residuals",
            "predicted",
            "actual − predicted",
            (255, 127, 14, 150),
            pg.InfiniteLine(pos=0, angle=0, pen=pg.mkPen("#7f7f7f")),
        )
        self.regression_panel = QSplitter(Qt.Orientation.Horizontal, objectName="regression_panel")
        self.regression_panel.addWidget(self.table_metrics)
        self.regression_panel.addWidget(self.plot_actual)
        self.regression_panel.addWidget(self.plot_residuals)
        self.regression_panel.hide()
        for widget in (self.plot_actual, self.plot_residuals):
            style_plot_widget(widget, PlotColors())  # the window restyles them with its theme

    def _layout(self) -> None:
        top = QHBoxLayout()
        top.addWidget(self.label_summary, 1)
        top.addWidget(QLabel("Weights"))
        top.addWidget(self.combo_checkpoint)
        top.addWidget(self.button_reevaluate)
        self._tables = tables = QSplitter(Qt.Orientation.Horizontal)
        tables.addWidget(self.table_confusion)
        tables.addWidget(self.table_per_class)
        self._gallery = gallery = QWidget()
        g = QVBoxLayout(gallery)
        g.setContentsMargins(0, 0, 0, 0)
        g.addWidget(self.label_gallery)
        g.addWidget(self.list_misclassified)
        body = QSplitter(Qt.Orientation.Vertical)
        body.addWidget(tables)
        body.addWidget(self.regression_panel)
        body.addWidget(gallery)
        layout = QVBoxLayout(self)
        layout.addWidget(self.label_context)
        layout.addLayout(top)
        layout.addWidget(body, 1)

    # -- loading ----------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._calls.busy

    def load_run(self, run_dir: Path | str, recompute: bool = False) -> None:
        """Show a run's evaluation of the chosen checkpoint: eval.json, or a fresh evaluation (background thread)."""
        if self.combo_checkpoint.stale_for(Path(run_dir)):
            self.combo_checkpoint.set_run(Path(run_dir))  # another run, or best.pt appeared: best by default
        self.run_dir = Path(run_dir)
        which = self.combo_checkpoint.which
        self._token += 1
        token = self._token
        self.button_reevaluate.setEnabled(False)
        self.label_summary.setText(f"Evaluating {self.run_dir.name} ({which} checkpoint) on its validation split…")
        run_dir_ = self.run_dir
        self._calls.call(
            lambda: _load(run_dir_, recompute, which),
            lambda res: self._on_done(token, res),
            lambda exc: self._on_error(token, exc),
            name="evaluate",
        )

    def _on_checkpoint_changed(self) -> None:
        if self.run_dir is not None:
            self.load_run(self.run_dir)

    def _on_done(self, token: int, result: tuple[dict[str, Any], list[tuple[np.ndarray, str]]]) -> None:
        if token != self._token:
            return
        full, images = result
        self.show_evaluation(full, images)
        self.button_reevaluate.setEnabled(True)
        self.evaluated.emit(full)

    def _on_error(self, token: int, exc: BaseException) -> None:
        if token != self._token:
            return
        message = error_text(exc)
        self.label_summary.setText(f"Evaluation failed: {message}")
        self.button_reevaluate.setEnabled(self.run_dir is not None)
        self.failed.emit(message)

    def wait(self, timeout_s: float = 60.0) -> bool:
        """Block until background work has returned (shutdown and tests)."""
        return self._calls.wait_all(timeout_s) and self.combo_checkpoint.wait(timeout_s)

    def set_context(self, text: str) -> None:
        """A line above the results (e.g. which sweep model they are of)."""
        self.label_context.setText(text)
        self.label_context.setVisible(bool(text))

    def refresh_colors(self) -> None:
        """The theme changed: the heat map's colours come from the palette."""
        if self.evaluation is not None and "per_class" in self.evaluation:
            classes = [c["class"] for c in self.evaluation["per_class"]]
            self._fill_confusion(classes, self.evaluation["confusion"])

    # -- showing ----------------------------------------------------------------------------
    def show_evaluation(self, full: dict[str, Any], images: list[tuple[np.ndarray, str]] | None = None) -> None:
        self.evaluation = full
        regression = full.get("task") == "regression"
        self._tables.setVisible(not regression)
        self._gallery.setVisible(not regression)
        self.regression_panel.setVisible(regression)
        if regression:  # no classes: the regression figures, the class tables left empty
            self.label_summary.setText(
                f"RMSE {full['rmse']:.4g} · MAE {full['mae']:.4g} · R² {full['r2']:.3f} on {full['n']:,} "
                f"validation samples · {(full.get('checkpoint') or {}).get('which', 'last')} checkpoint"
            )
            self._fill_confusion([], [])
            self._fill_per_class([])
            self._fill_gallery([])
            self._fill_regression(full)
            return
        self._fill_regression(None)
        self.label_summary.setText(
            f"Accuracy {full['accuracy']:.2%} on {full['n']:,} validation samples · macro F1 "
            f"{full['macro']['f1']:.3f} · {full['misclassified_total']:,} misclassified"
            f" · {(full.get('checkpoint') or {}).get('which', 'last')} checkpoint"
        )
        classes = [c["class"] for c in full["per_class"]]
        self._fill_confusion(classes, full["confusion"])
        self._fill_per_class(full["per_class"])
        self._fill_gallery(images or [])

    def _fill_regression(self, full: dict[str, Any] | None) -> None:
        rows = (
            []
            if full is None
            else [("RMSE", full["rmse"]), ("MAE", full["mae"]), ("R²", full["r2"]), ("samples", full["n"])]
        )
        self.table_metrics.setRowCount(len(rows))
        for i, (name, value) in enumerate(rows):
            self.table_metrics.setItem(i, 0, QTableWidgetItem(name))
            item = QTableWidgetItem(f"{value:,}" if isinstance(value, int) else f"{value:.4g}")
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.table_metrics.setItem(i, 1, item)
        self.table_metrics.resizeColumnsToContents()
        frame = 2 * self.table_metrics.frameWidth() + 2
        self.table_metrics.setMinimumWidth(self.table_metrics.horizontalHeader().length() + frame)  # values whole
        pairs = np.asarray((full or {}).get("pairs") or [], dtype=np.float64).reshape(-1, 2)
        actual, predicted = pairs[:, 0], pairs[:, 1]
        self.scatter_actual.setData(actual, predicted)
        self.scatter_residuals.setData(predicted, actual - predicted)
        if len(pairs):
            lo, hi = float(min(actual.min(), predicted.min())), float(max(actual.max(), predicted.max()))
            self.line_identity.setData([lo, hi], [lo, hi])  # the perfect model's line
        else:
            self.line_identity.setData([], [])
        n_all = int((full or {}).get("n", 0))
        set_fitting_title(
            self.plot_actual.getPlotItem(),
            "Predicted vs actual" + (f" (a random {len(pairs):,} of {n_all:,})" if 0 < len(pairs) < n_all else ""),
        )

    def _fill_confusion(self, classes: list[str], cm: list[list[int]]) -> None:
        self.table_confusion.show_matrix(classes, cm)

    def _fill_per_class(self, per_class: list[dict[str, Any]]) -> None:
        self.table_per_class.show_classes(per_class)

    def _fill_gallery(self, images: list[tuple[np.ndarray, str]]) -> None:
        self.list_misclassified.clear()
        for img, caption in images:
            item = QListWidgetItem(QIcon(to_pixmap(img, THUMB)), caption)
            item.setToolTip(caption)
            self.list_misclassified.addItem(item)
        has = bool(images)
        self.list_misclassified.setVisible(has)
        total = (self.evaluation or {}).get("misclassified_total", 0)
        self.label_gallery.setText(
            f"Misclassified samples (the {len(images)} most confident mistakes of {total})"
            if has
            else "No misclassified images to show (tabular data, or no mistakes)."
        )


def _scatter_plot(
    name: str, title: str, x_label: str, y_label: str, color: tuple[int, int, int, int], guide: Any
) -> tuple[pg.PlotWidget, pg.ScatterPlotItem]:
    """A gridded plot named ``name`` with a scatter of points in ``color`` over a ``guide`` line."""
    plot = pg.PlotWidget(objectName=name)
    set_fitting_title(plot.getPlotItem(), title)
    plot.setLabel("bottom", x_label)
    plot.setLabel("left", y_label)
    plot.showGrid(x=True, y=True, alpha=0.3)
    scatter = pg.ScatterPlotItem(size=5, pen=None, brush=pg.mkBrush(*color))
    plot.addItem(guide)
    plot.addItem(scatter)
    return plot, scatter
