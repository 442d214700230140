"""Compare runs: their curves overlaid (one colour per run), the settings that differ, the best marked.

``CompareView.compare(paths)`` reads the runs on a background thread
(``load_runs``, no Qt) and then draws ``plot_compare``: the runs' figure (the
metric each selects its model by: accuracy, RMSE, ...), validation loss and
training loss against step, epoch or wall time. The
result's worker stands for each run (a sweep's best model; hogwild's and
ddp's evaluating worker); its training loss is the mean over workers when
they share one model. ``table_compare_diff`` lists only the config keys whose
values differ; ``table_compare`` each run's own figure and the best value of
each loss, the best of all (of runs of one figure) in bold.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pyqtgraph as pg
import pyqtgraph.exporters
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.plots.axes import ValueAxis
from app.plots.base import ask_save_path, clip_spikes, show_spikes, spike_marks
from app.plots.live import PlotColors, worker_color
from app.plots.text import compact_axis, distinct_names, keep_rows, set_fitting_title
from app.shell.elided_label import ElidedLabel
from app.shell.tasks import BackgroundCalls
from app.viewmodels.compare_runs import CompareRun, differing_keys, flatten, load_runs
from app.viewmodels.run_index import race_lines
from core.metric_names import (
    CLASSIFICATION_ONLY,
    FIGURE_NAMES,
    SHORT_NAMES,
    figure_text,
    higher_is_better,
)

# panel, title, higher is better; "figure" shows the compared runs' figure (``CompareView.figure_metric``)
METRICS = [
    ("figure", "Validation accuracy", True),
    ("val_loss", "Validation loss", False),
    ("train_loss", "Training loss", False),
]
X_LABELS = {"step": "step", "epoch": "epoch", "time": "wall time (s)"}


ROWS_SHOWN = 3  # table rows a short window keeps in view
LEGEND_MIN_WIDTH = 700  # narrower, the plots need the legend's column


class CompareView(QWidget):
    compared = Signal(list)  # the CompareRuns shown
    failed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("compare_view")
        self.runs: list[CompareRun] = []
        self.colors = PlotColors()
        self._calls = BackgroundCalls(self)
        self.curves: dict[str, list[pg.PlotDataItem]] = {m: [] for m, _t, _h in METRICS}

        # one line, whole in its tooltip: a wrapped list of run names took the tables' rows at 900x600
        self.label_title = ElidedLabel(
            "Select two or more runs in Runs and choose Compare.", objectName="label_compare"
        )
        self.combo_x = QComboBox(objectName="combo_compare_x")
        for key, text in (("step", "Step"), ("epoch", "Epoch"), ("time", "Wall time")):
            self.combo_x.addItem(text, key)
        self.combo_x.currentIndexChanged.connect(lambda _i: self._draw())
        self.check_log_y = QCheckBox("Log scale", objectName="check_compare_log_y")
        self.check_log_y.setToolTip("Logarithmic loss axes (as on the Training tab)")
        self.check_log_y.toggled.connect(self.set_log_y)
        self.button_csv = QPushButton("Save CSV…", objectName="button_compare_csv")
        self.button_csv.clicked.connect(self._on_save_csv)
        self.button_png = QPushButton("Save PNG…", objectName="button_compare_png")
        self.button_png.clicked.connect(self._on_save_png)

        self.plot = pg.GraphicsLayoutWidget()
        self.plot.setObjectName("plot_compare")
        self.plot.ci.setContentsMargins(4, 4, 8, 4)
        self.items: dict[str, pg.PlotItem] = {}
        for col, (metric, title, _higher) in enumerate(METRICS):
            item = self.plot.addPlot(
                row=0, col=col, axisItems={"bottom": compact_axis(), "left": ValueAxis(orientation="left")}
            )
            set_fitting_title(item, title)
            item.getAxis("left").enableAutoSIPrefix(False)
            item.hideButtons()
            if metric != "figure":
                item.setLimits(yMin=0.0)
            self.items[metric] = item
        self.legend = pg.LegendItem(labelTextSize="8pt", verSpacing=-6)
        self.legend.setSizePolicy(pg.QtWidgets.QSizePolicy.Policy.Fixed, pg.QtWidgets.QSizePolicy.Policy.Fixed)
        self.plot.ci.layout.setColumnAlignment(len(METRICS), Qt.AlignmentFlag.AlignTop)
        self._legend_at: tuple[int, int, int, int] | None = None
        self._place_legend(True)
        self.best_marks: dict[str, pg.ScatterPlotItem] = {}

        self.table_diff = QTableWidget(objectName="table_compare_diff")
        self.table_diff.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table_diff.setToolTip("The settings that differ between the compared runs")
        self.table_best = QTableWidget(objectName="table_compare")
        self.table_best.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table_best.setToolTip("Each run's best value of each metric; the best of all in bold")
        for table in (self.table_best, self.table_diff):  # a short window still shows a few rows of each
            keep_rows(table, ROWS_SHOWN)

        bar = QHBoxLayout()
        bar.setContentsMargins(4, 0, 4, 0)
        bar.addWidget(self.label_title, 1)
        bar.addWidget(QLabel("X axis"))
        bar.addWidget(self.combo_x)
        bar.addWidget(self.check_log_y)
        bar.addWidget(self.button_csv)
        bar.addWidget(self.button_png)
        tables = QSplitter(Qt.Orientation.Horizontal)
        tables.addWidget(self.table_best)
        tables.addWidget(self.table_diff)
        tables.setChildrenCollapsible(False)
        body = QSplitter(Qt.Orientation.Vertical)
        body.addWidget(self.plot)
        body.addWidget(tables)
        body.setStretchFactor(0, 3)
        body.setStretchFactor(1, 2)
        body.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(body, 1)
        self._update_buttons()

    def resizeEvent(self, event: Any) -> None:
        """A narrow view puts the legend under the plots, its names side by side, rather than beside them,
        where it would squeeze the plots and clip its names."""
        super().resizeEvent(event)
        self._place_legend(event.size().width() >= LEGEND_MIN_WIDTH)

    def _place_legend(self, beside: bool) -> None:
        where = (0, len(METRICS), 1, 1) if beside else (1, 0, 1, len(METRICS))
        columns = 1 if beside else self._legend_columns()
        if self._legend_at == where and self.legend.columnCount == columns:
            return
        if self._legend_at is not None:
            self.plot.ci.removeItem(self.legend)
        self.legend.setColumnCount(columns)
        self.plot.ci.addItem(self.legend, *where)
        self._legend_at = where
        # the layout grows to its preferred width when its items change: it takes the view's size again
        pg.GraphicsView.resizeEvent(self.plot, None)

    def _legend_columns(self) -> int:
        """As many names side by side as the plots' width holds (a wider legend would push the plots out)."""
        widths = [label.boundingRect().width() + 40 for _sample, label in self.legend.items]  # 40: its sample line
        if not widths:
            return 1
        return max(1, min(len(widths), int((self.width() - 24) // max(widths))))

    # -- loading ---------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._calls.busy

    def compare(self, paths: list[Path]) -> None:
        paths = [Path(p) for p in paths]
        self.label_title.setText(f"Reading {len(paths)} runs…")
        self._calls.call(
            lambda: load_runs(paths),
            self.show_runs,
            lambda exc: self._on_failed(f"could not compare: {exc}"),
            name="compare-runs",
        )

    def _on_failed(self, message: str) -> None:
        self.label_title.setText(message)
        self.failed.emit(message)

    def wait(self, timeout_s: float = 10.0) -> bool:
        self._calls.forget_all()
        return self._calls.wait_all(timeout_s)

    def show_runs(self, runs: list[CompareRun]) -> None:
        self.runs = runs
        self.label_title.setText(
            f"Comparing {len(runs)} runs: " + ", ".join(r.name for r in runs)
            if runs
            else "Select two or more runs in Runs and choose Compare."
        )
        self._draw()
        self._fill_best()
        self._fill_diff()
        self._update_buttons()
        self.compared.emit(runs)

    def forget(self, paths: list[Path]) -> None:
        """Runs that are gone (moved to the trash) leave the comparison."""
        gone = {Path(p) for p in paths}
        if any(run.path in gone for run in self.runs):
            self.show_runs([run for run in self.runs if run.path not in gone])

    def rename(self, path: Path, name: str) -> None:
        """A compared run was renamed: its curves, rows and column say its new name."""
        for run in self.runs:
            if run.path == Path(path) and run.name != name:
                run.name = name
                self.show_runs(self.runs)
                return

    def _update_buttons(self) -> None:
        self.button_csv.setEnabled(bool(self.runs))
        self.button_png.setEnabled(bool(self.runs))

    # -- drawing ---------------------------------------------------------------------------------
    @property
    def x_mode(self) -> str:
        return str(self.combo_x.currentData())

    @property
    def figure_metric(self) -> str:
        """The figure the first panel compares: the one most of the runs share (the first run's on a tie);
        a run of another figure has no curve there, its figure is in the table."""
        metrics = [run.metric for run in self.runs]
        return max(dict.fromkeys(metrics), key=metrics.count) if metrics else "val_accuracy"

    def _draw(self) -> None:
        x_mode = self.x_mode
        self.legend.clear()
        self._apply_log()
        names = distinct_names([run.name for run in self.runs])  # elided, yet never two alike
        figure = self.figure_metric
        figure_item = self.items["figure"]
        set_fitting_title(figure_item, "Validation " + FIGURE_NAMES.get(figure, figure).removeprefix("val "))
        if figure in CLASSIFICATION_ONLY:  # a share: 0 to 1
            figure_item.setLimits(yMin=-0.01, yMax=1.01)
        else:  # an error is never negative; R² may be
            figure_item.setLimits(yMin=None if figure == "val_r2" else 0.0, yMax=None)
        for panel, _title, higher in METRICS:
            metric = figure if panel == "figure" else panel
            higher = higher_is_better(figure) if panel == "figure" else higher
            item = self.items[panel]
            item.clear()
            item.setLabel("bottom", X_LABELS[x_mode])
            item.getAxis("bottom").set_whole(x_mode != "time")  # steps and epochs are counted in whole numbers
            self.curves[panel] = []
            self.best_marks.pop(panel, None)
            best: tuple[float, float, int] | None = None  # value, x, run
            for i, run in enumerate(self.runs):
                c = run.curves.get(metric)
                if c is None or (panel == "figure" and run.metric != figure):
                    continue
                color = worker_color(i)
                style: dict[str, Any] = {"pen": pg.mkPen(color, width=2)}
                if metric != "train_loss":
                    style.update(symbol="o", symbolSize=5, symbolBrush=color, symbolPen=None)
                shown, marked = clip_spikes(c["y"])  # a diverged point at the top of the axis, marked
                curve = item.plot(c[x_mode], shown, **style)
                self.curves[panel].append(curve)
                if marked is not None:
                    marks = spike_marks()
                    item.addItem(marks)
                    show_spikes(marks, c[x_mode], c["y"], shown, marked)
                if panel == "val_loss":  # every run has one: the legend names them all
                    self.legend.addItem(curve, names[i])
                b = run.best(metric, higher)
                if b is not None and (best is None or (b[0] > best[0] if higher else b[0] < best[0])):
                    best = (b[0], float(c[x_mode][b[1]]), i)
            if best is not None:  # the best value of all runs: a star on its point
                log = self.log_y and metric != "val_accuracy" and best[0] > 0  # a scatter is not log-scaled
                mark = pg.ScatterPlotItem(
                    [best[1]],
                    [math.log10(best[0]) if log else best[0]],
                    symbol="star",
                    size=16,
                    brush=pg.mkBrush(worker_color(best[2])),
                    pen=pg.mkPen(self.colors.foreground),
                )
                mark.setToolTip(f"best: {best[0]:.4g} ({self.runs[best[2]].name})")
                mark.setZValue(20)
                item.addItem(mark)
                self.best_marks[panel] = mark
        self.apply_colors(self.colors)
        self._place_legend(self.width() >= LEGEND_MIN_WIDTH)  # its columns follow the runs' names
        pg.GraphicsView.resizeEvent(self.plot, None)  # new legend rows: the layout keeps to the view's size

    @property
    def log_y(self) -> bool:
        return self.check_log_y.isChecked()

    def set_log_y(self, on: bool) -> None:
        """Log loss axes, as the Training tab's "Log scale"; accuracy stays linear (it lives in [0, 1])."""
        if self.check_log_y.isChecked() != on:
            self.check_log_y.setChecked(on)  # comes back here
            return
        self._draw()

    def _apply_log(self) -> None:
        for metric in ("val_loss", "train_loss"):
            item = self.items[metric]
            item.setLogMode(y=self.log_y)
            item.setLimits(yMin=-1e307 if self.log_y else 0.0)  # log view coordinates are log10, unbounded

    def apply_colors(self, colors: PlotColors) -> None:
        self.colors = colors
        self.plot.setBackground(colors.background)
        for item in self.items.values():
            for name in ("left", "bottom"):
                axis = item.getAxis(name)
                axis.setPen(colors.foreground)
                axis.setTextPen(colors.foreground)
            item.titleLabel.setText(item.titleLabel.text, color=colors.foreground, size="10pt")
        self.legend.setLabelTextColor(colors.foreground)
        for _sample, label in self.legend.items:
            label.setText(label.text, color=colors.foreground)

    def _fill_best(self) -> None:
        t = self.table_best
        metrics = list(dict.fromkeys(run.metric for run in self.runs))
        named = len(metrics) > 1  # runs of several figures: each cell names its own
        figure = "figure" if named or not metrics else SHORT_NAMES.get(metrics[0], metrics[0])
        headers = ["run", f"best {figure}", f"final {figure}", "lowest val loss", "lowest train loss", "samples/s"]
        t.clear()
        t.setColumnCount(len(headers))
        t.setHorizontalHeaderLabels(headers)
        t.setRowCount(len(self.runs))
        values: list[list[float]] = []
        for r, run in enumerate(self.runs):
            kept, last = run.figures()  # the model the run hands on, measured on its weights
            vloss = run.best("val_loss", False)
            tloss = run.best("train_loss", False)
            rate = run.summary.get("samples_per_s")
            row = [
                kept,
                last,
                vloss[0] if vloss else math.nan,
                tloss[0] if tloss else math.nan,
                rate if isinstance(rate, (int, float)) else math.nan,
            ]
            values.append(row)
            races = race_lines(run.summary)  # each race it went through: its variants' figures at each rung
            name = QTableWidgetItem(
                run.name + (f"  (raced ×{sum(not x.startswith(' ') for x in races)})" if races else "")
            )
            name.setForeground(worker_color(r))
            name.setToolTip("\n".join([str(run.path), *races]))
            t.setItem(r, 0, name)
            for c, v in enumerate(row, start=1):
                if c <= 2:
                    text = figure_text(run.metric, v, named)
                else:
                    text = "" if math.isnan(v) else (f"{v:,.0f}" if c == 5 else f"{v:.4f}")
                item = QTableWidgetItem(text)
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                t.setItem(r, c, item)
        for c in range(5):
            # a figure is compared among the runs of that figure, each which way it is better
            groups = [(m, [r for r, run in enumerate(self.runs) if run.metric == m]) for m in metrics] if c < 2 else []
            for metric, members in groups or [("", list(range(len(self.runs))))]:
                higher = higher_is_better(metric) if c < 2 else c == 4
                col = {r: values[r][c] for r in members if not math.isnan(values[r][c])}
                if len(col) < 2:
                    continue
                best = max(col.values()) if higher else min(col.values())
                for r, v in col.items():
                    if v == best:
                        item = t.item(r, c + 1)
                        font = QFont(item.font())
                        font.setBold(True)
                        item.setFont(font)
                        item.setText(item.text() + " ★")
        t.resizeColumnsToContents()

    def _fill_diff(self) -> None:
        t = self.table_diff
        keys = differing_keys([r.config for r in self.runs if not r.imported])  # an imported run has no settings
        flat = [flatten(r.config) for r in self.runs]
        t.clear()
        t.setColumnCount(len(self.runs))
        t.setHorizontalHeaderLabels([r.name for r in self.runs])
        t.setRowCount(len(keys))
        t.setVerticalHeaderLabels(keys)
        t.setToolTip(
            "The settings that differ between the compared runs" if keys else "These runs ran with the same settings"
        )
        for r, key in enumerate(keys):
            for c, f in enumerate(flat):
                value = f.get(key)
                item = QTableWidgetItem(_value_text(value))
                item.setForeground(QColor(worker_color(c)))
                if self.runs[c].imported:
                    item.setToolTip("Imported from TensorBoard logs: no TrainDesk settings")
                t.setItem(r, c, item)
        t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)

    def diff_keys(self) -> list[str]:
        return [self.table_diff.verticalHeaderItem(r).text() for r in range(self.table_diff.rowCount())]

    # -- saving ----------------------------------------------------------------------------------
    def save_csv(self, path: Path | str) -> None:
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["run", "metric", "step", "epoch", "time_s", "value"])
            for run in self.runs:
                for metric, c in run.curves.items():
                    for i in range(len(c["y"])):
                        writer.writerow([run.name, metric, *(_num(c[k][i]) for k in ("step", "epoch", "time", "y"))])

    def save_png(self, path: Path | str) -> None:
        exporter = pg.exporters.ImageExporter(self.plot.scene())
        exporter.parameters()["width"] = max(800, self.plot.width())
        exporter.export(str(path))
        if not Path(path).is_file():
            raise OSError(f"could not write {path}")

    def _on_save_csv(self) -> None:
        path = ask_save_path(self, "comparison.csv", "CSV file (*.csv)")
        if path:
            self.save_csv(path)

    def _on_save_png(self) -> None:
        path = ask_save_path(self, "comparison.png", "PNG image (*.png)")
        if path:
            self.save_png(path)


def _value_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    return "" if value is None else str(value)


def _num(v: float) -> str:
    v = float(v)
    if not math.isfinite(v):
        return ""
    return str(int(v)) if v.is_integer() else repr(v)
