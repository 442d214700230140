"""One plot widget fed from a RunData: colours, legends, markers and pauses, saving as PNG or CSV.

The plots of app.plots.curves subclass :class:`BasePlot` and draw their own series;
``refresh`` pushes changed series to the curves (app.plots.pacing decides when).
"""

from __future__ import annotations

import csv
import html
import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFileDialog, QWidget

from app.plots.axes import LiveViewBox, ValueAxis
from app.plots.text import CompactAxis, compact_axis, set_fitting_title
from app.shell.settings import open_settings
from app.shell.theme import PlotColors
from app.viewmodels.run_data import Changes, RunData
from app.viewmodels.series import Series, spikes

# Tableau 10: distinct and readable on both a light and a dark background.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
SPIKE_COLOR = "#d62728"
OUT_COLOR = "#999999"  # a curve that is out (a race's eliminated variant): mid grey reads on light and dark
MAX_LEGEND_ROWS = 12  # more rows than this would not fit beside a plot
LEGEND_ROW_PX = 15  # about what a legend row adds to a plot's height (8pt labels)


def worker_color(worker: int) -> QColor:
    if worker < len(PALETTE):
        return QColor(PALETTE[worker])
    return pg.intColor(worker, hues=17, values=1, maxValue=220)


def legend_rows(data: RunData, curves: dict[int, Any], worker_labels: bool = False) -> list[tuple[Any, str]]:
    """A legend row, in curve order, for each curve that has a row of its own (a group's others share its row:
    a race variant's workers)."""
    label = data.worker_label if worker_labels else data.label
    return [(curves[k], label(k)) for k in sorted(curves) if data.group(k) == k]


class WorkerLegend(pg.LegendItem):
    """A legend in its own column beside its plots, its rows in worker order; it remembers the rows it was
    asked for (``entries``) and the ones it lays out (``shown_key``), so rows are laid out again only when they
    change."""

    def __init__(self) -> None:
        super().__init__(labelTextSize="8pt", verSpacing=-6, horSpacing=6)
        self.entries: list[tuple[Any, str]] | None = None  # (curve, name) of every row asked for
        self.shown_key: list[tuple[int, str]] | None = None  # the rows laid out, by curve and name

    def forget(self) -> None:
        """No rows: the next ones asked for are laid out whatever they are."""
        self.clear()
        self.entries = None
        self.shown_key = None


class BasePlot(pg.GraphicsLayoutWidget):
    """A GraphicsLayoutWidget of one or more PlotItems fed from a RunData."""

    x_label = {"step": "step", "time": "wall time (s)"}
    whole_x = {"step": True, "time": False}  # x counts (steps, epochs): ticks at whole numbers only

    def __init__(self, object_name: str, data: RunData, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(object_name)
        self.data = data
        self.x_mode = "step"
        self.colors = PlotColors()
        self.items: list[pg.PlotItem] = []
        self.legends: list[WorkerLegend] = []
        self.ci.setContentsMargins(4, 4, 8, 4)
        self._marks: dict[int, list[Any]] = {}  # plot item -> marker items drawn on it
        self._spike_marks: dict[int, pg.PlotDataItem] = {}  # curve -> the marks of its diverged points
        self.paint_cpu_s = 0.0  # CPU seconds spent painting, read by PlotsPanel to pace redraws

    def paintEvent(self, event: Any) -> None:
        start = time.thread_time()
        super().paintEvent(event)
        self.paint_cpu_s += time.thread_time() - start

    def _add_plot(self, col: int, title: str, y_label: str, legend: bool = False) -> pg.PlotItem:
        item: pg.PlotItem = self.addPlot(
            row=0,
            col=col,
            axisItems={"left": ValueAxis(orientation="left"), "bottom": compact_axis()},
            viewBox=LiveViewBox(),
        )
        set_fitting_title(item, title)
        item.setLabel("left", y_label)
        item.getAxis("left").enableAutoSIPrefix(False)  # "loss (x0.001)" reads worse than 0.002
        item.setDownsampling(auto=True, mode="peak")
        item.setClipToView(True)
        item.hideButtons()
        item.getViewBox().sigRangeChanged.connect(lambda *_a, it=item: arrange_labels(it))
        item.getViewBox().sigResized.connect(lambda *_a, it=item: arrange_labels(it))
        menu = item.getViewBox().menu
        menu.addSeparator()
        menu.addAction("Save plot as PNG…", self.ask_save_png)
        menu.addAction("Save data as CSV…", self.ask_save_csv)
        self.items.append(item)
        if legend:
            self._add_legend(col + 1)
        return item

    def _add_legend(self, col: int) -> WorkerLegend:
        """A legend in its own column beside the plots: it never covers a curve."""
        legend = WorkerLegend()
        legend.setSizePolicy(pg.QtWidgets.QSizePolicy.Policy.Fixed, pg.QtWidgets.QSizePolicy.Policy.Fixed)
        self.ci.addItem(legend, row=0, col=col)
        self.ci.layout.setColumnAlignment(col, Qt.AlignmentFlag.AlignTop)
        self.legends.append(legend)
        return legend

    def _add_markers(self, item: pg.PlotItem, labels: bool = True) -> None:
        """Draw the run's markers (vertical lines) and pauses (shaded spans) on ``item``; ``labels``: with their
        text (the loss plot's; on a side plot the text would cover its curves, and the line's tooltip says it)."""
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
                region = pg.LinearRegionItem(
                    (span.start, max(end, span.start)), movable=False, brush=pg.mkBrush(shade), pen=pg.mkPen(None)
                )
                region.setZValue(-10)
                region.setToolTip("paused")
                item.addItem(region, ignoreBounds=True)
                drawn.append(region)
            else:
                line = pg.InfiniteLine(span.step, angle=90, movable=False, pen=pg.mkPen(shade.darker(100), width=6))
                line.setToolTip("paused here")
                item.addItem(line, ignoreBounds=True)
                drawn.append(line)
        for marker in data.markers:
            x = marker.t if time_axis else marker.step
            text = (
                {
                    "label": marker.text,
                    "labelOpts": {
                        "position": 0.92,
                        "color": fg,
                        "anchors": [(0, 0), (1, 0)],  # the text on the side of the line where the view is
                        "fill": pg.mkBrush(self.colors.legend_background),
                    },
                }
                if labels
                else {}
            )
            line = pg.InfiniteLine(
                x, angle=90, movable=False, pen=pg.mkPen(fg, width=1, style=Qt.PenStyle.DashLine), **text
            )
            line.setToolTip(marker.text)
            item.addItem(line, ignoreBounds=True)
            drawn.append(line)
        self._marks[id(item)] = drawn
        arrange_labels(item)

    def _set_curve(self, item: pg.PlotItem, curve: pg.PlotDataItem, x: np.ndarray, y: np.ndarray) -> None:
        """``curve.setData(x, y)``, its diverged points (``spikes``) drawn at the top of its steady range and
        marked, so that the axis keeps to the values that are not diverged."""
        marks = self._spike_marks.get(id(curve))
        shown, marked = clip_spikes(y)
        curve.setData(x, shown)
        if marks is None and marked is None:
            return
        if marks is None:
            marks = self._spike_marks[id(curve)] = spike_marks()
            item.addItem(marks)
        show_spikes(marks, x, y, shown, marked)

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

    def _relegend(self, legend: WorkerLegend, entries: list[tuple[Any, str]]) -> None:
        """Legend rows in worker order whatever order workers first reported in (rebuilt only if they changed:
        a rebuild lays out every label's text again, 10-15 ms of a live frame)."""
        entries = [(item, name) for item, name in entries if item is not None]
        if len(entries) > MAX_LEGEND_ROWS:  # a search's many trials: the newest (the curves keep their colours)
            entries = entries[-MAX_LEGEND_ROWS:]
        key = [(id(item), name) for item, name in entries]
        if legend.shown_key == key:
            return
        legend.clear()
        for item, name in entries:
            legend.addItem(item, html.escape(name, quote=False))  # a label is rich text: "0.91 < 0.93" is not a tag
        legend.shown_key = key
        legend.entries = entries
        self._fit_legend(legend)

    def _layout_height(self) -> float:
        """The height the plot's layout needs at least (its plots, axes and legends)."""
        return float(self.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).height())

    def _fit_legend(self, legend: WorkerLegend) -> None:
        """Leave a legend's oldest rows out while the layout would be taller than the plot: a legend taller
        than its plot pushes the plot's x axis out of view (a search's trials beside a short side plot)."""
        height = self.height()
        if len(legend.items) <= 1 or self._layout_height() <= height:
            return
        while len(legend.items) > 1 and self._layout_height() > height:
            legend.removeItem(legend.items[0][0].item)
        pg.GraphicsView.resizeEvent(self, None)  # the layout takes the view's height again, now that it fits

    def resizeEvent(self, event: Any) -> None:
        super().resizeEvent(event)
        height = self.height()
        for legend in getattr(self, "legends", ()):  # pyqtgraph calls this before our __init__ has run
            entries = legend.entries
            if not entries:
                continue
            shown = len(legend.items)
            needed = self._layout_height()
            if (shown > 1 and needed > height) or (shown < len(entries) and needed + LEGEND_ROW_PX <= height):
                legend.shown_key = None  # the rows that fit changed: lay them out again
                self._relegend(legend, entries)

    def prepare_workers(self, workers: list[int]) -> None:
        """Make the curves (and legend rows) of workers about to report, before the stream starts."""

    def set_x_mode(self, mode: str) -> None:
        self.x_mode = mode
        self._update_x_label()
        self.refresh(None)

    def _update_x_label(self) -> None:
        for item in self.items:
            item.setLabel("bottom", self.x_label[self.x_mode])
            axis = item.getAxis("bottom")
            if isinstance(axis, CompactAxis):
                axis.set_whole(self.whole_x[self.x_mode])

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
            # nor its axes: a plot the new run has not reached yet (validation, throughput) read the old run's
            vb.setRange(xRange=(0.0, 1.0), yRange=(0.0, 1.0), padding=0.0, disableAutoRange=False)
            vb.enableAutoRange()  # nor a zoom by hand of the old run: it turned auto-range off for good
        for legend in self.legends:
            legend.forget()
        self._marks.clear()
        self._spike_marks.clear()
        self._forget_curves()

    def _color(self, w: int) -> QColor:
        """A worker's colour (its group's: a race variant's workers share one): grey once its curve is out (a
        race's eliminated variant)."""
        g = self.data.group(w)
        return QColor(OUT_COLOR) if g in self.data.out else worker_color(g)

    def _pen(self, w: int, color: QColor | None = None, alpha: int | None = None) -> Any:
        """A worker's pen: the run's result (a sweep's winner, a race's leader, each of its workers) drawn
        bolder, a curve that is out grey and dashed."""
        c = QColor(color or self._color(w))
        if alpha is not None:
            c.setAlpha(alpha)
        g = self.data.group(w)
        if g in self.data.out:
            return pg.mkPen(c, width=1, style=Qt.PenStyle.DashLine)
        return pg.mkPen(c, width=3 if self.data.winner == g and alpha is None else 1)

    def _name_curve(self, curve: pg.PlotDataItem, w: int) -> None:
        """The curve's tooltip: its legend label (a curve that is out says why)."""
        curve.curve.setToolTip(self.data.label(w))

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

    def ask_save_png(self) -> None:
        """Ask where to save the plot as a PNG image, and save it there."""
        path = ask_save_path(self, f"{self.objectName()}.png", "PNG image (*.png)")
        if path:
            self.save_png(path)

    def ask_save_csv(self) -> None:
        """Ask where to save the plot's data as CSV, and save it there."""
        path = ask_save_path(self, f"{self.objectName()}.csv", "CSV file (*.csv)")
        if path:
            self.save_csv(path)


def arrange_labels(item: pg.PlotItem) -> None:
    """Place the marker lines' labels of ``item`` so that none covers another: each at the highest row, from
    the top of the plot down, where it overlaps no label placed before it (left to right). A label reads on
    the side of its line where the middle of the view is, so it stays inside the plot (pyqtgraph's anchors)."""
    vb = item.getViewBox()
    lines = sorted(
        (i for i in item.items if isinstance(i, pg.InfiniteLine) and getattr(i, "label", None) is not None),
        key=lambda i: float(i.value()),
    )
    height = vb.height()
    if not lines or height <= 0:
        return
    (x0, x1), _y = vb.viewRange()
    if x1 <= x0:
        return
    width = vb.width()
    placed: list[tuple[float, float, int]] = []  # (left, right, row) in pixels
    for line in lines:
        label = line.label
        box = label.boundingRect()
        px = (float(line.value()) - x0) / (x1 - x0) * width
        left, right = (px, px + box.width()) if px < width / 2 else (px - box.width(), px)
        row_h = box.height() + 2
        rows = int((height - 4) // row_h)
        free = (r for r in range(rows) if not any(r == o and left < b and a < right for a, b, o in placed))
        row = next(free, None) if 0 <= left and right <= width else None
        fits = row is not None
        if label.isVisible() != fits:  # a label with no room is left out: its line's tooltip says it
            label.setVisible(fits)
        if row is not None:
            placed.append((left, right, row))
            label.setPosition(max(0.0, 1.0 - (4 + row * row_h) / height))


def clip_spikes(y: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(``y`` with its diverged values lowered to the highest steady one, the mask of those values or None)."""
    mask = spikes(y)
    if not mask.any():
        return y, None
    steady = y[~mask & np.isfinite(y)]
    shown = np.array(y, dtype=np.float64)
    shown[mask] = float(steady.max()) if steady.size else math.nan
    return shown, mask


def spike_marks() -> pg.PlotDataItem:
    """Where a curve's diverged points are drawn: a red triangle pointing up, at the top of the steady range."""
    marks = pg.PlotDataItem(
        pen=None, symbol="t1", symbolSize=11, symbolBrush=pg.mkBrush(SPIKE_COLOR), symbolPen=pg.mkPen(SPIKE_COLOR)
    )
    marks.setZValue(15)
    return marks


def show_spikes(
    marks: pg.PlotDataItem, x: np.ndarray, y: np.ndarray, shown: np.ndarray, mask: np.ndarray | None
) -> None:
    """Put ``marks`` on the diverged points of a curve (none: empty), their true values in the tooltip."""
    if mask is None:
        marks.setData([], [])
        marks.setToolTip("")
        return
    marks.setData(np.asarray(x)[mask], shown[mask])
    values = ", ".join(f"{v:.3g} at {xv:g}" for xv, v in list(zip(np.asarray(x)[mask], y[mask]))[:5])
    marks.setToolTip(f"diverged, drawn at the top of the axis: {values}" + (" …" if mask.sum() > 5 else ""))


def _csv_num(v: float) -> str:
    if not math.isfinite(v):
        return ""
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(float(v))


def ask_save_path(parent: QWidget, default_name: str, filt: str) -> str:
    settings = open_settings()
    folder = str(settings.value("dirs/plots", "") or "")
    path, _ = QFileDialog.getSaveFileName(parent, "Save", str(Path(folder) / default_name), filt)
    if path:
        settings.setValue("dirs/plots", str(Path(path).parent))
    return path
