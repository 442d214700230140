"""The run's plots, one class per kind of series: training loss, validation, throughput, a sweep's
result, the learning rate. Each keeps its curves in step with its series of the RunData.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QWidget

from app.plots.base import BasePlot, legend_rows, worker_color
from app.plots.text import set_fitting_title
from app.viewmodels.run_data import (
    EPOCH,
    LOSS,
    LR,
    LSTEP,
    LTIME,
    RATE,
    RSTEP,
    RTIME,
    SMOOTH,
    STEP,
    TIME,
    VAL_ACC,
    VAL_LOSS,
    VTIME,
    Changes,
    RunData,
)
from app.viewmodels.series import Series, flat_range

RAW_ALPHA = 60  # the raw loss is drawn faint so the smoothed curve reads first


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
        self.raw[w] = self.plot.plot(pen=self._raw_pen(w))
        self.smooth[w] = self.plot.plot(pen=self._pen(w))
        self._name_curve(self.smooth[w], w)
        self._ensure_mean()
        if legend:
            self._update_legend()

    def prepare_workers(self, workers: list[int]) -> None:
        for w in workers:
            self._ensure(w, legend=False)
        self._update_legend()

    def _update_legend(self) -> None:
        mean = [(self.mean, "mean")] if self.mean is not None and not self.data.separate_models else []
        self._relegend(self.legends[0], legend_rows(self.data, self.smooth) + mean)

    def _ensure_mean(self) -> None:
        if self.mean is None and not self.data.separate_models:
            self.mean = self.plot.plot(pen=self._mean_pen())
            self.mean.setZValue(10)  # drawn over the workers' curves

    def _mean_pen(self) -> Any:
        return pg.mkPen(self.colors.foreground, width=2)

    def _raw_pen(self, w: int) -> Any:
        faint = self._color(w)
        faint.setAlpha(RAW_ALPHA)
        return pg.mkPen(faint, width=1)

    def _restyle(self) -> None:
        if self.mean is not None:
            self.mean.setPen(self._mean_pen())
        for w, curve in self.smooth.items():
            curve.setPen(self._pen(w))
            curve.setZValue(5 if self.data.winner == self.data.group(w) else 0)
            self.raw[w].setPen(self._raw_pen(w))
            self._name_curve(curve, w)

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
            self._set_curve(self.plot, self.raw[w], x, s.column(LOSS))
            self._set_curve(self.plot, self.smooth[w], x, s.column(SMOOTH))
        if (changes is None or changes.mean) and len(self.data.mean) and not self.data.separate_models:
            self._ensure_mean()
            assert self.mean is not None
            # One worker: its own curve already is the mean, so hide the duplicate.
            self.mean.setVisible(len(self.data.loss) > 1)
            self._set_curve(self.plot, self.mean, self.data.mean.column(xc), self.data.mean.column(SMOOTH))

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
    whole_x = {"step": True, "time": True}
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
                curve.setSymbolBrush(self._color(w))
                curve.setZValue(5 if self.data.winner == self.data.group(w) else 0)
                self._name_curve(curve, w)
        self._relegend(self.legends[0], legend_rows(self.data, self.loss_curves))
        self._show_legend(len(legend_rows(self.data, self.loss_curves)) > 1)

    def _forget_curves(self) -> None:
        self.loss_curves.clear()
        self.acc_curves.clear()
        self._show_task()  # reset: the new run's task (a classification one until its records say otherwise)

    def refresh(self, changes: Changes | None) -> None:
        workers = self.data.val.keys() if changes is None else changes.val
        for w in sorted(workers):
            if w not in self.loss_curves:
                style = dict(pen=self._pen(w), symbolBrush=self._color(w), symbolPen=None, symbolSize=5)
                self.loss_curves[w] = self.loss_plot.plot(**style)
                self.acc_curves[w] = self.acc_plot.plot(**style)
                self._name_curve(self.loss_curves[w], w)
                self._name_curve(self.acc_curves[w], w)
                self._relegend(self.legends[0], legend_rows(self.data, self.loss_curves))
            s = self.data.val[w]
            x = s.column(EPOCH)
            symbol = "o" if len(s) <= self.SYMBOLS_UP_TO else None
            for item, curve, col in (
                (self.loss_plot, self.loss_curves[w], VAL_LOSS),
                (self.acc_plot, self.acc_curves[w], VAL_ACC),
            ):
                if curve.opts["symbol"] != symbol:
                    curve.setSymbol(symbol)
                self._set_curve(item, curve, x, s.column(col))
        self._show_task()
        # With one evaluating worker (hogwild evaluates on worker 0) a legend says nothing.
        self._show_legend(len(legend_rows(self.data, self.loss_curves)) > 1)

    def csv_header(self) -> list[str]:
        return [
            "worker",
            "epoch",
            "time_s",
            "val_loss",
            "val_rmse" if self.data.task == "regression" else "val_accuracy",
        ]

    def csv_series(self) -> Iterable[tuple[str, Series, list[int]]]:
        for w in sorted(self.data.val):
            yield str(w), self.data.val[w], [EPOCH, VTIME, VAL_LOSS, VAL_ACC]


class ThroughputPlot(BasePlot):
    """Training samples per second, per worker and all workers together, over wall time.

    Always by time: steps differ between workers, so the total has no step of its own.
    """

    x_label = {"step": "wall time (s)", "time": "wall time (s)"}
    whole_x = {"step": False, "time": False}
    MIN_WIDTH = 170  # the plot, its title and axes; its legend's width comes on top

    def __init__(self, data: RunData, parent: QWidget | None = None) -> None:
        super().__init__("plot_throughput", data, parent)
        self.plot = self._add_plot(0, "Throughput", "samples/s", legend=True)
        self.plot.setLimits(yMin=0.0)
        self._update_x_label()
        self.curves: dict[int, pg.PlotDataItem] = {}
        self.total: pg.PlotDataItem | None = None
        self.setMinimumWidth(self.MIN_WIDTH + 80)  # room for a legend of two workers before it exists

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
        for w, curve in self.curves.items():
            curve.setPen(pg.mkPen(self._color(w), width=1))
        if self.curves:
            self._relegend(
                self.legends[0],
                legend_rows(self.data, self.curves, worker_labels=True) + [(self.total, "total")],
            )
        # the plot keeps its width beside a legend of long labels ("worker 0 (trials)") rather than be squeezed
        width = self.MIN_WIDTH + (int(self.legends[0].boundingRect().width()) if self.curves else 0)
        if self.minimumWidth() != width:
            self.setMinimumWidth(width)

    def _ensure(self, w: int) -> None:
        if w in self.curves:
            return
        # connect="finite": a pause (a nan row) breaks the line instead of bridging it
        self.curves[w] = self.plot.plot(pen=pg.mkPen(self._color(w), width=1), connect="finite")
        if self.total is None:
            self.total = self.plot.plot(pen=pg.mkPen(self.colors.foreground, width=2), connect="finite")
            self.total.setZValue(10)

    def prepare_workers(self, workers: list[int]) -> None:
        for w in workers:
            self._ensure(w)
        self.relabel()

    def refresh(self, changes: Changes | None) -> None:
        if changes is None or changes.events:
            self._add_markers(self.plot, labels=False)  # the loss plot names them
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
    whole_x = {"step": False, "time": False}

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
        self.points.setData(
            [
                {
                    "pos": (math.log10(v), a),
                    "brush": pg.mkBrush(worker_color(w)),
                    "size": 14 if w == self.data.winner else 9,
                    "data": w,
                }
                for w, v, a in rows
            ]
        )
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

    def relabel(self) -> None:
        """A curve that went out turns grey here too."""
        for w, curve in self.curves.items():
            curve.setPen(pg.mkPen(self._color(w), width=1))

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
                self.curves[w] = self.plot.plot(pen=pg.mkPen(self._color(w), width=1), connect="finite")
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
