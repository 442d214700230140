"""Live plots: training loss, validation, throughput (pyqtgraph).

Each plot draws from the numpy series of one :class:`RunData`; ``refresh``
calls ``setData`` once per changed curve per frame (``PlotsPanel`` paces the
frames), never once per record. Curves use peak
downsampling and clip-to-view so a million points still redraw quickly.
"""

from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QFileDialog, QFrame, QHBoxLayout, QLabel, QMenu, QScrollArea, QSlider, QSplitter,
    QToolButton, QVBoxLayout, QWidget,
)

from app.run_data import (
    EPOCH, LOSS, LR, LSTEP, LTIME, RATE, RSTEP, RTIME, SMOOTH, STEP, TIME, VAL_ACC, VAL_LOSS, VTIME, Changes, RunData,
)
from app.plot_text import compact_axis, set_fitting_title
from app.robust_range import robust_range
from app.series import Series, flat_range
from app.settings import open_settings

# Tableau 10: distinct and readable on both a light and a dark background.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
RAW_ALPHA = 60  # the raw loss is drawn faint so the smoothed curve reads first
MIN_FRAME_MS = 33    # at most ~30 redraws a second
MAX_FRAME_MS = 500   # and at least 2, however slow painting is
FRAME_BUDGET = 0.2  # share of one core the live plots may use
SIDE_EVERY_S = 0.25  # the plots beside the loss (validation, throughput, lr) redraw at most this often
MAX_LEGEND_ROWS = 12  # more rows than this would not fit beside a plot


def worker_color(worker: int) -> QColor:
    if worker < len(PALETTE):
        return QColor(PALETTE[worker])
    return pg.intColor(worker, hues=17, values=1, maxValue=220)


class ValueAxis(pg.AxisItem):
    """A left axis whose log scale stays readable when the values span little.

    pyqtgraph labels log axes by powers of ten and, under a few decades, labels
    every minor tick (2..9 x 10^n) at the top level: eight labels on top of each
    other in a small plot, or a single label when the data spans less than one
    minor step (a validation loss from 0.10 to 0.12). Here: under one decade,
    ordinary linear ticks placed on the log axis; under a few, 1, 2 and 5 x 10^n
    first, the other minor ticks labelled only where they fit.
    """

    _linear_labels = False

    def logTickValues(self, minVal: float, maxVal: float, size: float, stdTicks: Any) -> Any:  # noqa: N802,N803
        self._linear_labels = maxVal - minVal < 1.0
        if self._linear_labels:
            lo, hi = 10.0 ** minVal, 10.0 ** maxVal
            levels = []
            for spacing, offset in self.tickSpacing(lo, hi, size):
                first = math.ceil((lo - offset) / spacing) * spacing + offset
                values = [first + i * spacing for i in range(int((hi - first) / spacing) + 1)]
                levels.append((None, [math.log10(v) for v in values if v > 0]))
            return levels
        levels = super().logTickValues(minVal, maxVal, size, stdTicks)
        if levels and levels[0][0] is None:
            minor = levels[0][1]
            major = [v for v in minor if round(10 ** (v - math.floor(v))) in (1, 2, 5)]
            return [(None, major), (None, [v for v in minor if v not in major])]
        return levels

    def logTickStrings(self, values: Any, scale: float, spacing: Any) -> list[str]:  # noqa: N802
        if self._linear_labels:
            return [f"{10.0 ** v * scale:.3g}" for v in values]
        return super().logTickStrings(values, scale, spacing)


class LiveViewBox(pg.ViewBox):
    """A ViewBox whose auto-range, while a run is live, leaves headroom and then holds still.

    pyqtgraph's auto-range fits the data at every frame, so a growing curve
    moves both axes every frame, and each move regenerates the axes' ticks and
    clips every curve again: most of what a live frame costs. While ``live``,
    the bounds auto-range fits are held until the data leaves them (or fills
    less than half of them), then taken again with headroom: X_HEADROOM past
    the last x, Y_HEADROOM of the span on both sides of y. The axes move a few
    dozen times in a run instead of every frame. Zooming or panning by hand
    turns auto-range off as usual; a finished run is fitted tightly.
    """

    X_HEADROOM = 0.25
    Y_HEADROOM = 0.08

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.live = False
        self.robust_y = False  # a far-out curve (a diverged trial) does not set the y range (robust_range)
        self._held: list[list[float] | None] = [None, None]

    def set_live(self, live: bool) -> None:
        self.live = live
        self._held = [None, None]
        self.queueUpdateAutoRange()

    def childrenBounds(  # noqa: N802 - pyqtgraph's name
            self, frac: Any = None, orthoRange: Any = (None, None), items: Any = None) -> Any:  # noqa: N803
        bounds = super().childrenBounds(frac=frac, orthoRange=orthoRange, items=items)
        if self.robust_y and bounds[1] is not None:
            curves = [i for i in self.addedItems if isinstance(i, pg.PlotDataItem) and i.isVisible()]
            fit = robust_range((c.getData()[1] for c in curves if c.yData is not None and len(c.yData)),
                               log_values=any(c.opts["logMode"][1] for c in curves))
            if fit is not None:  # the pens' padding of the full range would be far too wide as well
                span = fit[1] - fit[0]
                bounds[1] = [fit[0] - 0.02 * span, fit[1] + 0.05 * span]
        if not self.live:
            return bounds
        # a little room below x too: the bounds include the pens' pixel padding, which grows with the range
        for ax, headroom in ((0, (0.02, self.X_HEADROOM)), (1, (self.Y_HEADROOM, self.Y_HEADROOM))):
            if bounds[ax] is None:
                self._held[ax] = None
                continue
            lo, hi = (float(v) for v in bounds[ax])
            held = self._held[ax]
            if held is None or lo < held[0] or hi > held[1] or hi - lo < 0.5 * (held[1] - held[0]):
                span = hi - lo or abs(hi) or 1.0
                held = self._held[ax] = [lo - headroom[0] * span, hi + headroom[1] * span]
            bounds[ax] = list(held)
        return bounds


@dataclass(frozen=True)
class PlotColors:
    background: str = "#ffffff"
    foreground: str = "#333333"
    legend_background: str = "#ffffffd0"


class BasePlot(pg.GraphicsLayoutWidget):
    """A GraphicsLayoutWidget of one or more PlotItems fed from a RunData."""

    x_label = {"step": "step", "time": "wall time (s)"}

    def __init__(self, object_name: str, data: RunData, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(object_name)
        self.data = data
        self.x_mode = "step"
        self.colors = PlotColors()
        self.items: list[pg.PlotItem] = []
        self.legends: list[pg.LegendItem] = []
        self.ci.setContentsMargins(4, 4, 8, 4)
        self._marks: dict[int, list[Any]] = {}  # plot item -> marker items drawn on it
        self.paint_cpu_s = 0.0  # CPU seconds spent painting, read by PlotsPanel to pace redraws

    def paintEvent(self, event: Any) -> None:  # noqa: N802 - Qt override
        start = time.thread_time()
        super().paintEvent(event)
        self.paint_cpu_s += time.thread_time() - start

    def _add_plot(self, col: int, title: str, y_label: str, legend: bool = False) -> pg.PlotItem:
        item: pg.PlotItem = self.addPlot(row=0, col=col, axisItems={"left": ValueAxis(orientation="left"),
                                                                    "bottom": compact_axis()},
                                         viewBox=LiveViewBox())
        set_fitting_title(item, title)
        item.setLabel("left", y_label)
        item.getAxis("left").enableAutoSIPrefix(False)  # "loss (x0.001)" reads worse than 0.002
        item.setDownsampling(auto=True, mode="peak")
        item.setClipToView(True)
        item.hideButtons()
        menu = item.getViewBox().menu
        menu.addSeparator()
        menu.addAction("Save plot as PNG…", self._on_save_png)
        menu.addAction("Save data as CSV…", self._on_save_csv)
        self.items.append(item)
        if legend:
            self._add_legend(col + 1)
        return item

    def _add_legend(self, col: int) -> pg.LegendItem:
        """A legend in its own column beside the plots: it never covers a curve."""
        legend = pg.LegendItem(labelTextSize="8pt", verSpacing=-6, horSpacing=6)
        legend.setSizePolicy(pg.QtWidgets.QSizePolicy.Policy.Fixed, pg.QtWidgets.QSizePolicy.Policy.Fixed)
        self.ci.addItem(legend, row=0, col=col)
        self.ci.layout.setColumnAlignment(col, Qt.AlignmentFlag.AlignTop)
        self.legends.append(legend)
        return legend

    def _add_markers(self, item: pg.PlotItem) -> None:
        """Draw the run's markers (vertical lines) and pauses (shaded spans) on ``item``."""
        for old in self._marks.get(id(item), []):
            item.removeItem(old)
        drawn: list[Any] = []
        data = self.data
        time_axis = self._marker_x_is_time()
        fg = QColor(self.colors.foreground)
        shade = QColor(fg)
        shade.setAlpha(28)
        for span in data.pauses:
            if time_axis:
                end = span.end if math.isfinite(span.end) else data.now()
                region = pg.LinearRegionItem((span.start, max(end, span.start)), movable=False,
                                             brush=pg.mkBrush(shade), pen=pg.mkPen(None))
                region.setZValue(-10)
                region.setToolTip("paused")
                item.addItem(region, ignoreBounds=True)
                drawn.append(region)
            else:
                line = pg.InfiniteLine(span.step, angle=90, movable=False,
                                       pen=pg.mkPen(shade.darker(100), width=6))
                line.setToolTip("paused here")
                item.addItem(line, ignoreBounds=True)
                drawn.append(line)
        for marker in data.markers:
            x = marker.t if time_axis else marker.step
            line = pg.InfiniteLine(x, angle=90, movable=False, pen=pg.mkPen(fg, width=1, style=Qt.PenStyle.DashLine),
                                   label=marker.text,
                                   labelOpts={"position": 0.92, "color": fg, "anchors": [(1, 0), (1, 0)],
                                              "fill": pg.mkBrush(self.colors.legend_background)})
            line.setToolTip(marker.text)
            item.addItem(line, ignoreBounds=True)
            drawn.append(line)
        self._marks[id(item)] = drawn

    def _marker_x_is_time(self) -> bool:
        return self.x_mode == "time"

    # -- appearance ------------------------------------------------------------
    def apply_colors(self, colors: PlotColors) -> None:
        self.colors = colors
        self.setBackground(colors.background)
        for item in self.items:
            for name in ("left", "bottom"):
                axis = item.getAxis(name)
                axis.setPen(colors.foreground)
                axis.setTextPen(colors.foreground)
            item.titleLabel.setText(item.titleLabel.text, color=colors.foreground, size="10pt")
        for legend in self.legends:
            legend.setLabelTextColor(colors.foreground)
            legend.setBrush(pg.mkBrush(colors.legend_background))
            legend.setPen(pg.mkPen(None))
            for _sample, label in legend.items:  # existing rows keep their old colour otherwise
                label.setText(label.text, color=colors.foreground)
        self._restyle()
        self.refresh(Changes(events=True))

    def _restyle(self) -> None:
        """Re-apply pens that depend on the colours (the mean/total curves use the foreground)."""

    def _relegend(self, legend: pg.LegendItem, entries: list[tuple[Any, str]]) -> None:
        """Legend rows in worker order whatever order workers first reported in (rebuilt only if they changed:
        a rebuild lays out every label's text again, 10-15 ms of a live frame)."""
        entries = [(item, name) for item, name in entries if item is not None]
        if len(entries) > MAX_LEGEND_ROWS:  # a search's many trials: the newest (the curves keep their colours)
            entries = entries[-MAX_LEGEND_ROWS:]
        key = [(id(item), name) for item, name in entries]
        if getattr(legend, "_traindesk_key", None) == key:
            return
        legend.clear()
        for item, name in entries:
            legend.addItem(item, name)
        legend._traindesk_key = key

    def prepare_workers(self, workers: list[int]) -> None:
        """Make the curves (and legend rows) of workers about to report, before the stream starts."""

    def set_x_mode(self, mode: str) -> None:
        self.x_mode = mode
        self._update_x_label()
        self.refresh(None)

    def _update_x_label(self) -> None:
        for item in self.items:
            item.setLabel("bottom", self.x_label[self.x_mode])

    def set_log_y(self, on: bool) -> None:
        for item in self.items:
            item.setLogMode(y=on)
            # a loss is never below zero (log view coordinates are log10, unbounded)
            item.setLimits(yMin=-1e307 if on else 0.0)

    def set_live(self, live: bool) -> None:
        """A live run's axes hold still between jumps (``LiveViewBox``); a finished one is fitted tightly."""
        for item in self.items:
            item.getViewBox().set_live(live)

    def reset(self, data: RunData) -> None:
        self.data = data
        for item in self.items:
            item.clear()
            vb = item.getViewBox()
            vb.set_live(vb.live)  # forget the held bounds of the old data
        for legend in self.legends:
            legend.clear()
            legend._traindesk_key = None
        self._marks.clear()
        self._forget_curves()

    def _pen(self, w: int, color: QColor | None = None, alpha: int | None = None) -> Any:
        """A worker's pen: the run's result (a sweep's winner) drawn bolder."""
        c = QColor(color or worker_color(w))
        if alpha is not None:
            c.setAlpha(alpha)
        return pg.mkPen(c, width=3 if self.data.winner == w and alpha is None else 1)

    def _forget_curves(self) -> None:
        raise NotImplementedError

    def refresh(self, changes: Changes | None) -> None:
        """Push changed series to their curves; ``None`` means everything."""
        raise NotImplementedError

    # -- saving ----------------------------------------------------------------
    def save_png(self, path: str | Path) -> None:
        if not self.grab().save(str(path), "PNG"):
            raise OSError(f"could not write {path}")

    def save_csv(self, path: str | Path) -> None:
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(self.csv_header())
            for label, series, cols in self.csv_series():
                rows = series.rows() if isinstance(series, Series) else series
                for row in rows[:, cols]:
                    writer.writerow([label, *(_csv_num(v) for v in row)])

    def csv_header(self) -> list[str]:
        raise NotImplementedError

    def csv_series(self) -> Iterable[tuple[str, Series | np.ndarray, list[int]]]:
        raise NotImplementedError

    def _on_save_png(self) -> None:
        path = _ask_save_path(self, f"{self.objectName()}.png", "PNG image (*.png)")
        if path:
            self.save_png(path)

    def _on_save_csv(self) -> None:
        path = _ask_save_path(self, f"{self.objectName()}.csv", "CSV file (*.csv)")
        if path:
            self.save_csv(path)


def _csv_num(v: float) -> str:
    if not math.isfinite(v):
        return ""
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(float(v))


def _ask_save_path(parent: QWidget, default_name: str, filt: str) -> str:
    settings = open_settings()
    folder = str(settings.value("dirs/plots", "") or "")
    path, _ = QFileDialog.getSaveFileName(parent, "Save", str(Path(folder) / default_name), filt)
    if path:
        settings.setValue("dirs/plots", str(Path(path).parent))
    return path


class LossPlot(BasePlot):
    """Training loss per worker: raw (faint) and smoothed, plus the mean of the workers."""

    def __init__(self, data: RunData, parent: QWidget | None = None) -> None:
        super().__init__("plot_loss", data, parent)
        self.plot = self._add_plot(0, "Training loss", "loss", legend=True)
        self.plot.setLimits(yMin=0.0)
        self.plot.getViewBox().robust_y = True
        self._update_x_label()
        self.raw: dict[int, pg.PlotDataItem] = {}
        self.smooth: dict[int, pg.PlotDataItem] = {}
        self.mean: pg.PlotDataItem | None = None

    def _forget_curves(self) -> None:
        self.raw.clear()
        self.smooth.clear()
        self.mean = None

    def _ensure(self, w: int, legend: bool = True) -> None:
        if w in self.raw:
            return
        color = worker_color(w)
        faint = QColor(color)
        faint.setAlpha(RAW_ALPHA)
        self.raw[w] = self.plot.plot(pen=pg.mkPen(faint, width=1))
        self.smooth[w] = self.plot.plot(pen=self._pen(w))
        self._ensure_mean()
        if legend:
            self._update_legend()

    def prepare_workers(self, workers: list[int]) -> None:
        for w in workers:
            self._ensure(w, legend=False)
        self._update_legend()

    def _update_legend(self) -> None:
        mean = [(self.mean, "mean")] if self.mean is not None and not self.data.separate_models else []
        self._relegend(self.legends[0], [(self.smooth[k], self.data.label(k)) for k in sorted(self.smooth)] + mean)

    def _ensure_mean(self) -> None:
        if self.mean is None and not self.data.separate_models:
            self.mean = self.plot.plot(pen=self._mean_pen())
            self.mean.setZValue(10)  # drawn over the workers' curves

    def _mean_pen(self) -> Any:
        return pg.mkPen(self.colors.foreground, width=2)

    def _restyle(self) -> None:
        if self.mean is not None:
            self.mean.setPen(self._mean_pen())
        for w, curve in self.smooth.items():
            curve.setPen(self._pen(w))
            curve.setZValue(5 if self.data.winner == w else 0)

    def relabel(self) -> None:
        """Labels, the winner or the model layout changed: legends and pens follow."""
        if self.data.separate_models and self.mean is not None:
            self.plot.removeItem(self.mean)
            self.mean = None
        self._restyle()
        self._update_legend()

    def refresh(self, changes: Changes | None) -> None:
        if changes is None or changes.events:
            self._add_markers(self.plot)
        xc = STEP if self.x_mode == "step" else TIME
        workers = self.data.loss.keys() if changes is None else changes.loss
        for w in sorted(workers):
            self._ensure(w)
            s = self.data.loss[w]
            x = s.column(xc)
            self.raw[w].setData(x, s.column(LOSS))
            self.smooth[w].setData(x, s.column(SMOOTH))
        if (changes is None or changes.mean) and len(self.data.mean) and not self.data.separate_models:
            self._ensure_mean()
            assert self.mean is not None
            # One worker: its own curve already is the mean, so hide the duplicate.
            self.mean.setVisible(len(self.data.loss) > 1)
            self.mean.setData(self.data.mean.column(xc), self.data.mean.column(SMOOTH))

    def point_count(self, worker: int) -> int:
        """Points currently plotted for a worker's raw loss (what tests look at)."""
        item = self.raw.get(worker)
        if item is None or item.xData is None:
            return 0
        return len(item.xData)

    def csv_header(self) -> list[str]:
        return ["worker", "step", "time_s", "loss", "smoothed"]

    def csv_series(self) -> Iterable[tuple[str, Series, list[int]]]:
        for w in sorted(self.data.loss):
            yield str(w), self.data.loss[w], [STEP, TIME, LOSS, SMOOTH]
        if not self.data.separate_models:
            yield "mean", self.data.mean, [STEP, TIME, LOSS, SMOOTH]


class ValPlot(BasePlot):
    """Validation loss (left) and accuracy (right; RMSE for a regression run) per worker, by epoch."""

    x_label = {"step": "epoch", "time": "epoch"}
    SYMBOLS_UP_TO = 40  # epochs drawn with a dot each; past that the dots only clutter
    MIN_WIDTH = 380  # two plots whose titles fit, plus the legend's width when there is one

    def __init__(self, data: RunData, parent: QWidget | None = None) -> None:
        super().__init__("plot_val", data, parent)
        self.loss_plot = self._add_plot(0, "Validation loss", "loss")
        self.acc_plot = self._add_plot(1, "Validation accuracy", "accuracy", legend=True)
        self.acc_plot.setXLink(self.loss_plot)
        self.loss_plot.getViewBox().robust_y = True
        # Axes stay inside what the metrics can be: accuracy in [0, 1], loss above 0, epochs from 1.
        self.loss_plot.setLimits(yMin=0.0, xMin=0.0)
        self.acc_plot.setLimits(yMin=-0.01, yMax=1.01, xMin=0.0)
        self._update_x_label()
        self.loss_curves: dict[int, pg.PlotDataItem] = {}
        self.acc_curves: dict[int, pg.PlotDataItem] = {}
        self._task = "classification"
        self.setMinimumWidth(self.MIN_WIDTH)

    def _show_task(self) -> None:
        """The right plot shows accuracy, or validation RMSE once the run's records say it is a regression."""
        task = self.data.task
        if task == self._task:
            return
        self._task = task
        if task == "regression":
            set_fitting_title(self.acc_plot, "Validation RMSE")
            self.acc_plot.setLabel("left", "RMSE")
            self.acc_plot.setLimits(yMin=0.0, yMax=None)
            self.acc_plot.getViewBox().robust_y = True
        else:
            set_fitting_title(self.acc_plot, "Validation accuracy")
            self.acc_plot.setLabel("left", "accuracy")
            self.acc_plot.setLimits(yMin=-0.01, yMax=1.01)
            self.acc_plot.getViewBox().robust_y = False

    def set_log_y(self, on: bool) -> None:
        self.loss_plot.setLogMode(y=on)  # accuracy stays linear: it lives in [0, 1]
        self.loss_plot.setLimits(yMin=-1e307 if on else 0.0)

    def _show_legend(self, show: bool) -> None:
        legend = self.legends[0]
        legend.setVisible(show)
        extra = int(legend.boundingRect().width()) + 8 if show else 0
        if self.minimumWidth() != self.MIN_WIDTH + extra:
            self.setMinimumWidth(self.MIN_WIDTH + extra)

    def relabel(self) -> None:
        for w in self.loss_curves:
            for curve in (self.loss_curves[w], self.acc_curves[w]):
                curve.setPen(self._pen(w))
                curve.setZValue(5 if self.data.winner == w else 0)
        self._relegend(self.legends[0], [(self.loss_curves[k], self.data.label(k)) for k in sorted(self.loss_curves)])
        self._show_legend(len(self.loss_curves) > 1)

    def _forget_curves(self) -> None:
        self.loss_curves.clear()
        self.acc_curves.clear()
        self._show_task()  # reset: the new run's task (a classification one until its records say otherwise)

    def refresh(self, changes: Changes | None) -> None:
        workers = self.data.val.keys() if changes is None else changes.val
        for w in sorted(workers):
            if w not in self.loss_curves:
                color = worker_color(w)
                style = dict(pen=self._pen(w), symbolBrush=color, symbolPen=None, symbolSize=5)
                self.loss_curves[w] = self.loss_plot.plot(**style)
                self.acc_curves[w] = self.acc_plot.plot(**style)
                self._relegend(self.legends[0], [(self.loss_curves[k], self.data.label(k))
                                                 for k in sorted(self.loss_curves)])
            s = self.data.val[w]
            x = s.column(EPOCH)
            symbol = "o" if len(s) <= self.SYMBOLS_UP_TO else None
            for curve, col in ((self.loss_curves[w], VAL_LOSS), (self.acc_curves[w], VAL_ACC)):
                if curve.opts["symbol"] != symbol:
                    curve.setSymbol(symbol)
                curve.setData(x, s.column(col))
        self._show_task()
        # With one evaluating worker (hogwild evaluates on worker 0) a legend says nothing.
        self._show_legend(len(self.loss_curves) > 1)

    def csv_header(self) -> list[str]:
        return ["worker", "epoch", "time_s", "val_loss", "val_rmse" if self.data.task == "regression" else "val_accuracy"]

    def csv_series(self) -> Iterable[tuple[str, Series, list[int]]]:
        for w in sorted(self.data.val):
            yield str(w), self.data.val[w], [EPOCH, VTIME, VAL_LOSS, VAL_ACC]


class ThroughputPlot(BasePlot):
    """Training samples per second, per worker and all workers together, over wall time.

    Always by time: steps differ between workers, so the total has no step of its own.
    """

    x_label = {"step": "wall time (s)", "time": "wall time (s)"}

    def __init__(self, data: RunData, parent: QWidget | None = None) -> None:
        super().__init__("plot_throughput", data, parent)
        self.plot = self._add_plot(0, "Throughput", "samples/s", legend=True)
        self.plot.setLimits(yMin=0.0)
        self._update_x_label()
        self.curves: dict[int, pg.PlotDataItem] = {}
        self.total: pg.PlotDataItem | None = None

    def set_log_y(self, on: bool) -> None:
        """Throughput stays linear: a log axis hides the differences between workers."""

    def _forget_curves(self) -> None:
        self.curves.clear()
        self.total = None

    def _restyle(self) -> None:
        if self.total is not None:
            self.total.setPen(pg.mkPen(self.colors.foreground, width=2))

    def _marker_x_is_time(self) -> bool:
        return True

    def relabel(self) -> None:
        if self.curves:
            self._relegend(self.legends[0], [(self.curves[k], self.data.worker_label(k)) for k in sorted(self.curves)]
                           + [(self.total, "total")])

    def _ensure(self, w: int) -> None:
        if w in self.curves:
            return
        # connect="finite": a pause (a nan row) breaks the line instead of bridging it
        self.curves[w] = self.plot.plot(pen=pg.mkPen(worker_color(w), width=1), connect="finite")
        if self.total is None:
            self.total = self.plot.plot(pen=pg.mkPen(self.colors.foreground, width=2), connect="finite")
            self.total.setZValue(10)

    def prepare_workers(self, workers: list[int]) -> None:
        for w in workers:
            self._ensure(w)
        self.relabel()

    def refresh(self, changes: Changes | None) -> None:
        if changes is None or changes.events:
            self._add_markers(self.plot)
        xc = RTIME
        workers = self.data.rate.keys() if changes is None else changes.rate
        for w in sorted(workers):
            if w not in self.curves:
                self._ensure(w)
                self.relabel()
            s = self.data.rate[w]
            self.curves[w].setData(s.column(xc), s.column(RATE))
        if (changes is None or changes.total) and len(self.data.total) and self.total is not None:
            self.total.setData(self.data.total.column(xc), self.data.total.column(RATE))

    def csv_header(self) -> list[str]:
        return ["worker", "step", "time_s", "samples_per_s"]

    def csv_series(self) -> Iterable[tuple[str, Series, list[int]]]:
        for w in sorted(self.data.rate):
            yield str(w), self.data.rate[w], [RSTEP, RTIME, RATE]
        yield "total", self.data.total, [RSTEP, RTIME, RATE]


class SweepPlot(BasePlot):
    """A sweep's result: each worker's latest validation accuracy against its swept value."""

    x_label = {"step": "learning rate", "time": "learning rate"}

    def __init__(self, data: RunData, parent: QWidget | None = None) -> None:
        super().__init__("plot_sweep", data, parent)
        self.plot = self._add_plot(0, "Sweep result", "val accuracy")
        self.plot.setLimits(yMin=-0.01, yMax=1.01)
        self.plot.getAxis("bottom").enableAutoSIPrefix(False)
        self._update_x_label()
        self.values: dict[int, float] = {}  # worker -> its swept value
        self.points: pg.ScatterPlotItem | None = None
        self.line: pg.PlotDataItem | None = None

    def set_log_y(self, on: bool) -> None:
        """Accuracy stays linear."""

    def _forget_curves(self) -> None:
        self.points = None
        self.line = None

    def set_values(self, values: dict[int, float]) -> None:
        self.values = dict(values)
        self.refresh(None)

    def result(self) -> list[tuple[int, float, float]]:
        """(worker, swept value, latest validation accuracy) sorted by value."""
        out = []
        for w, v in self.values.items():
            s = self.data.val.get(w)
            if s is not None and len(s) and v > 0:
                out.append((w, v, s.last(VAL_ACC)))
        return sorted(out, key=lambda r: r[1])

    def refresh(self, changes: Changes | None) -> None:
        if changes is not None and not changes.val:
            return
        rows = self.result()
        if self.points is None:
            self.line = self.plot.plot(pen=pg.mkPen(self.colors.foreground, width=1))
            self.points = pg.ScatterPlotItem(size=10, pen=pg.mkPen(None))
            self.plot.addItem(self.points)
        assert self.line is not None
        if not rows:
            self.line.setData([], [])
            self.points.setData([])
            return
        # x is log10 of the swept value, labelled with the values themselves (rates span decades)
        x = np.log10([r[1] for r in rows])
        y = np.array([r[2] for r in rows])
        self.line.setData(x, y)
        self.points.setData([{"pos": (math.log10(v), a), "brush": pg.mkBrush(worker_color(w)),
                              "size": 14 if w == self.data.winner else 9, "data": w}
                             for w, v, a in rows])
        self.plot.getAxis("bottom").setTicks([[(math.log10(v), f"{v:g}") for _w, v, _a in rows]])
        pad = max(0.15, 0.1 * float(x.max() - x.min()))
        self.plot.setXRange(float(x.min()) - pad, float(x.max()) + pad, padding=0)

    def _restyle(self) -> None:
        if self.line is not None:
            self.line.setPen(pg.mkPen(self.colors.foreground, width=1))

    def csv_header(self) -> list[str]:
        return ["worker", "value", "val_accuracy"]

    def csv_series(self) -> Iterable[tuple[str, Series, list[int]]]:
        s = Series(2)
        for _w, v, a in self.result():
            s.append([(v, a)])
        yield "sweep", s, [0, 1]


class LRPlot(BasePlot):
    """The learning rate each worker used (step records carry it): schedules and live changes made visible.

    ``RunData`` keeps only the points where a rate changes, so a curve is a
    handful of points; between changes only its end moves on to the latest
    step, at the pace of the other side plots.
    """

    def __init__(self, data: RunData, parent: QWidget | None = None) -> None:
        super().__init__("plot_lr", data, parent)
        self.plot = self._add_plot(0, "Learning rate", "lr")
        self._update_x_label()
        self.curves: dict[int, pg.PlotDataItem] = {}
        self._flat: tuple[float, float] | None = None  # the y range set for a constant rate

    def set_log_y(self, on: bool) -> None:
        """The rate stays linear: a warm-up starts at 0, which a log axis cannot show."""

    def _forget_curves(self) -> None:
        self.curves.clear()
        if self._flat is not None:
            self.plot.enableAutoRange(axis="y")
        self._flat = None

    def refresh(self, changes: Changes | None) -> None:
        xc = LSTEP if self.x_mode == "step" else LTIME
        workers = self.data.lr.keys() if changes is None else (changes.loss | changes.lr) & self.data.lr.keys()
        for w in sorted(workers):
            if w not in self.curves:  # no legend: a worker's colour is the same as in the loss plot's
                # connect="finite": where a fork or a continued run starts, the old rate's line ends
                self.curves[w] = self.plot.plot(pen=pg.mkPen(worker_color(w), width=1), connect="finite")
            rows = self.data.lr_curve(w)
            self.curves[w].setData(rows[:, xc], rows[:, LR])
        rates = [self.data.lr_curve(w)[:, LR] for w in self.data.lr]
        flat = flat_range(np.concatenate(rates)) if rates else None
        if flat is not None and flat != self._flat:  # a constant rate: an axis around its value, not -0.4..0.4
            self.plot.setYRange(*flat, padding=0)
        elif flat is None and self._flat is not None:
            self.plot.enableAutoRange(axis="y")
        self._flat = flat

    def csv_header(self) -> list[str]:
        return ["worker", "step", "time_s", "lr"]

    def csv_series(self) -> Iterable[tuple[str, Series | np.ndarray, list[int]]]:
        for w in sorted(self.data.lr):
            yield str(w), self.data.lr_curve(w), [LSTEP, LTIME, LR]


class PlotsPanel(QWidget):
    """The plots and their shared controls (x axis, log scale, smoothing, save)."""

    view_changed = Signal()  # a view option changed (for persisting it)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.data = RunData()
        self.loss = LossPlot(self.data)
        self.val = ValPlot(self.data)
        self.throughput = ThroughputPlot(self.data)
        self.sweep = SweepPlot(self.data)
        self.sweep.hide()
        self.lr = LRPlot(self.data)
        self.plots: list[BasePlot] = [self.loss, self.val, self.throughput, self.sweep, self.lr]
        self._pending: Changes | None = None
        self._frame_ms = MIN_FRAME_MS
        self._cost_s = 0.0
        self._painted_before = 0.0
        self._last_frame = 0.0
        self.frames = 0
        self.frame_callbacks: list[Any] = []  # called with the Changes of each frame (benchmarks)
        self._redraw_timer = QTimer(self, singleShot=True)
        self._redraw_timer.timeout.connect(self._on_frame)
        self._held: dict[BasePlot, Changes] = {}  # side plots' changes waiting for their next redraw
        self._side_drawn: dict[BasePlot, float] = {}
        self._side_timer = QTimer(self, singleShot=True)
        self._side_timer.timeout.connect(self._on_side_timer)

        self.combo_x_axis = QComboBox(objectName="combo_x_axis")
        self.combo_x_axis.addItem("Step", "step")
        self.combo_x_axis.addItem("Wall time", "time")
        self.combo_x_axis.setToolTip("Plot the training curves against each worker's step or the wall-clock time")
        self.combo_x_axis.currentIndexChanged.connect(self._on_x_axis_changed)
        self.check_log_y = QCheckBox("Log scale", objectName="check_log_y")
        self.check_log_y.setToolTip("Logarithmic loss axis")
        self.check_log_y.toggled.connect(self._on_log_toggled)
        self.slider_smoothing = QSlider(Qt.Orientation.Horizontal, objectName="slider_smoothing")
        self.slider_smoothing.setRange(0, 99)
        self.slider_smoothing.setTracking(False)  # recompute on release, not on every pixel dragged
        self.slider_smoothing.setFixedWidth(120)
        self.slider_smoothing.setToolTip("Exponential smoothing of the bold loss curves (0 = raw)")
        self.label_smoothing = QLabel()
        self.label_smoothing.setMinimumWidth(30)
        self.slider_smoothing.valueChanged.connect(self._on_smoothing_changed)
        self.slider_smoothing.setValue(int(round(self.data.smoothing * 100)))
        self.label_smoothing.setText(f"{self.data.smoothing:.2f}")

        save = QToolButton(objectName="button_save_plots")
        save.setText("Save")
        save.setToolTip("Save a plot as PNG or its data as CSV")
        save.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(save)
        for plot, title in ((self.loss, "Loss"), (self.val, "Validation"), (self.throughput, "Throughput"),
                            (self.lr, "Learning rate")):
            menu.addAction(QAction(f"{title} plot as PNG…", menu, triggered=plot._on_save_png))
            menu.addAction(QAction(f"{title} data as CSV…", menu, triggered=plot._on_save_csv))
        save.setMenu(menu)
        self.button_save = save

        bar = QHBoxLayout()
        bar.setContentsMargins(4, 0, 4, 0)
        bar.setSpacing(8)
        bar.addWidget(QLabel("X axis"))
        bar.addWidget(self.combo_x_axis)
        bar.addSpacing(8)
        bar.addWidget(self.check_log_y)
        bar.addSpacing(8)
        bar.addWidget(QLabel("Smoothing"))
        bar.addWidget(self.slider_smoothing)
        bar.addWidget(self.label_smoothing)
        bar.addStretch(1)
        bar.addWidget(save)

        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(self.val)
        bottom.addWidget(self.throughput)
        bottom.addWidget(self.sweep)
        bottom.addWidget(self.lr)
        bottom.setChildrenCollapsible(False)
        self.bottom_splitter = bottom
        # Each side plot keeps the width its title, axes and legend need; a narrow window scrolls the row
        # sideways instead of clipping them ("Valida", a lost legend, tick labels run together).
        for plot, width in ((self.throughput, 250), (self.sweep, 170), (self.lr, 200)):
            plot.setMinimumWidth(width)  # the validation plots set theirs: it depends on their legend
        self.bottom_scroll = QScrollArea(objectName="scroll_side_plots")
        self.bottom_scroll.setWidget(bottom)
        self.bottom_scroll.setWidgetResizable(True)
        self.bottom_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.bottom_scroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.bottom_scroll.setMinimumHeight(170)  # a title, a plot and its axis however short the window
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.loss)
        self.splitter.addWidget(self.bottom_scroll)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        bottom.setStretchFactor(0, 4)  # the validation widget holds two plots
        bottom.setStretchFactor(1, 3)  # throughput has a legend beside it
        bottom.setStretchFactor(2, 2)
        bottom.setStretchFactor(3, 2)
        self.splitter.setChildrenCollapsible(False)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        layout.addLayout(bar)
        layout.addWidget(self.splitter, 1)

    # -- data ------------------------------------------------------------------
    def reset(self, t0: float | None = None) -> None:
        self.data = RunData(t0=t0, smoothing=self.data.smoothing, max_points=self.data.max_points)
        self._show_sweep(False)
        self._pending = None
        self._held.clear()
        self._side_drawn.clear()
        self._redraw_timer.stop()
        self._side_timer.stop()
        for plot in self.plots:
            plot.reset(self.data)

    def set_live(self, live: bool) -> None:
        """While a run is live its plots' axes move in steps, not every frame (see ``LiveViewBox``)."""
        for plot in self.plots:
            plot.set_live(live)

    def set_run_shape(self, labels: dict[int, str], separate_models: bool,
                      sweep_values: dict[int, float] | None = None, per_trial: bool = False) -> None:
        """What the workers are: their legend labels, whether each has its own model, a sweep's values;
        ``per_trial``: a search, whose loss and validation curves are its trials, not its workers."""
        self.data.labels = dict(labels)
        self.data.per_trial = per_trial
        self.data.separate_models = separate_models or per_trial
        self.data.expected_workers = len(labels)
        for plot in ((self.throughput,) if per_trial else (self.loss, self.throughput)):
            plot.prepare_workers(sorted(labels))  # legends complete at once, not rebuilt in the first frames
        for plot in (self.loss, self.val, self.throughput):
            plot.relabel()
        self.sweep.set_values(sweep_values or {})
        self._show_sweep(bool(sweep_values) and len(sweep_values or {}) > 1)

    def _show_sweep(self, show: bool) -> None:
        """A sweep's plot takes the learning-rate plot's place in the row, and gives it back.

        The sweep's x axis and the legends give each worker's rate, and a fifth
        plot in the row would crowd out the legends.
        """
        if show == self.sweep.isVisibleTo(self) and show != self.lr.isVisibleTo(self):
            return
        total = sum(self.bottom_splitter.sizes()) or 900
        self.sweep.setVisible(show)
        self.lr.setVisible(not show)
        wide, mid, narrow = total * 4 // 9, total * 3 // 9, total * 2 // 9
        self.bottom_splitter.setSizes([wide, mid, narrow, 0] if show else [wide, mid, 0, narrow])

    def set_winner(self, worker: int | None) -> None:
        """Draw the result's worker (a sweep's best) bolder on every plot."""
        self.data.winner = worker
        for plot in (self.loss, self.val, self.throughput):
            plot.relabel()
        self.sweep.refresh(None)

    def add_records(self, records: list[dict[str, Any]]) -> Changes:
        """Append records to the series; the curves follow at the next frame (``flush`` now)."""
        changes = self.data.add(records)
        if changes:
            self._pending = changes if self._pending is None else self._pending.merge(changes)
            # Draw as soon as the frame interval since the last frame allows: fresh
            # data after a quiet spell shows at once, a steady stream is paced.
            due = max(0, int((self._last_frame + self._frame_ms / 1000.0 - time.monotonic()) * 1000))
            if not self._redraw_timer.isActive() or self._redraw_timer.remainingTime() > due:
                self._redraw_timer.start(due)
        return changes

    def _on_frame(self) -> None:
        self.flush(everything=False)

    def flush(self, everything: bool = True) -> None:
        """Push pending data to the curves now (one setData per changed curve).

        A frame of the live stream (``everything`` False) redraws the loss plot
        only. The side plots (validation, throughput, lr), whose data moves per
        epoch or per throughput window, follow at most every ``SIDE_EVERY_S``,
        one at a time from their own timer, so that no turn of the event loop
        paints them all together: frames stay cheap, so they come often, a step
        shows soon after it is recorded and the window keeps answering.
        """
        self._redraw_timer.stop()
        pending, self._pending = self._pending, None
        if pending is None and not (everything and self._held):
            return
        self._last_frame = time.monotonic()
        start = time.thread_time()
        if pending is not None:
            self.loss.refresh(pending)
            for plot in self.plots:
                if plot is not self.loss:
                    held = self._held.get(plot)
                    self._held[plot] = pending if held is None else held.merge(pending)
        if everything:
            self._side_timer.stop()
            for plot in list(self._held):
                self._refresh_side(plot)
        if pending is not None:
            self.frames += 1
            for cb in self.frame_callbacks:
                cb(pending)
        self._pace(time.thread_time() - start)
        if self._held and not self._side_timer.isActive():
            self._side_timer.start(self._frame_ms // 2)  # between two frames of the loss plot

    def _refresh_side(self, plot: BasePlot) -> None:
        changes = self._held.pop(plot, None)
        if changes:
            plot.refresh(changes)
            self._side_drawn[plot] = time.monotonic()

    def _on_side_timer(self) -> None:
        """Redraw the side plot that waited longest, if its time has come; come back for the rest."""
        if not self._held:
            return
        now = time.monotonic()
        plot = min(self._held, key=lambda p: self._side_drawn.get(p, -math.inf))
        changes = self._held[plot]
        due = self._side_drawn.get(plot, -math.inf) + SIDE_EVERY_S
        if now >= due or changes.new_workers or changes.events:
            start = time.thread_time()
            self._refresh_side(plot)
            self._pace(time.thread_time() - start)
        if self._held:
            wait = min(self._side_drawn.get(p, now - SIDE_EVERY_S) + SIDE_EVERY_S for p in self._held) - now
            self._side_timer.start(max(self._frame_ms // 2, int(wait * 1000)))

    def _pace(self, cost_s: float) -> None:
        """Pace the next frame by what drawing costs (setData now plus the painting since last time).

        Plots get about FRAME_BUDGET of one core, however many points or
        workers, so training processes keep the CPU and the GUI stays responsive.
        """
        painted = sum(p.paint_cpu_s for p in self.plots)
        cost = cost_s + painted - self._painted_before
        self._painted_before = painted
        self._cost_s = 0.7 * self._cost_s + 0.3 * cost
        self._frame_ms = int(min(MAX_FRAME_MS, max(MIN_FRAME_MS, 1000 * self._cost_s / FRAME_BUDGET)))

    @property
    def frame_interval_ms(self) -> int:
        return self._frame_ms

    # -- view options ----------------------------------------------------------
    @property
    def x_mode(self) -> str:
        return str(self.combo_x_axis.currentData())

    def set_x_mode(self, mode: str) -> None:
        index = self.combo_x_axis.findData(mode)
        if index >= 0:
            self.combo_x_axis.setCurrentIndex(index)

    def set_smoothing(self, alpha: float) -> None:
        self.slider_smoothing.setValue(int(round(min(0.99, max(0.0, alpha)) * 100)))

    def apply_colors(self, colors: PlotColors) -> None:
        for plot in self.plots:
            plot.apply_colors(colors)

    def _on_x_axis_changed(self, _index: int) -> None:
        self.flush()
        for plot in self.plots:
            plot.set_x_mode(self.x_mode)
        self.view_changed.emit()

    def _on_log_toggled(self, on: bool) -> None:
        for plot in self.plots:
            plot.set_log_y(on)
        self.view_changed.emit()

    def _on_smoothing_changed(self, value: int) -> None:
        alpha = value / 100.0
        self.label_smoothing.setText(f"{alpha:.2f}")
        if alpha != self.data.smoothing:
            self.flush()
            self.data.set_smoothing(alpha)
            self.loss.refresh(None)
        self.view_changed.emit()
