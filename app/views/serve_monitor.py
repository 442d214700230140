"""The Serve tab's live figures: latency percentiles and requests/s per second, the batch sizes formed, and the
server's current workers, drawn from what the tab reads off ``/metrics`` and ``/ready`` once a second."""

from __future__ import annotations

import math
import time
from typing import Any

import pyqtgraph as pg
from PySide6.QtWidgets import QGridLayout, QHeaderView, QTableWidget, QTableWidgetItem, QWidget

from app.plots.base import PlotColors
from app.plots.text import compact_axis, set_fitting_title
from app.shell.theme import style_plot_widget
from app.viewmodels.serve_metrics import histogram_quantile, worker_state

HISTORY = 120  # seconds of latency and throughput kept in the plots
WORKER_COLUMNS = ("worker", "pid", "state", "version", "restarts")
MIN_BARS = 4  # batch-size buckets drawn at least


def _dots(color: str) -> dict[str, Any]:
    return {"symbol": "o", "symbolSize": 4, "symbolBrush": color, "symbolPen": None}


class ServeMonitor(QWidget):
    """Three plots and the workers table; ``show_metrics`` and ``show_workers`` take what the server said."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.series: dict[str, list[float]] = {"t": [], "p50": [], "p95": [], "p99": [], "rps": []}
        self._last: tuple[float, dict[str, Any]] | None = None
        self._busy: dict[Any, tuple[float, float]] = {}  # (worker, pid) -> (when, its busy_s then)
        self._t0 = 0.0
        self.batches_per_s = 0.0  # batches the server formed over the last poll
        self.plot_serve_latency = pg.PlotWidget(axisItems={"bottom": compact_axis()})  # ticks that do not run together
        self.plot_serve_latency.setObjectName("plot_serve_latency")
        self.plot_serve_latency.addLegend(offset=(-5, 5), labelTextSize="8pt", verSpacing=-6)  # small: a small plot
        # a dot on each reading: a request alone in a quiet minute is a point with no line to either side
        self.curves = {
            q: self.plot_serve_latency.plot(name=q, pen=pg.mkPen(color, width=2), **_dots(color))
            for q, color in (("p50", "#1f77b4"), ("p95", "#ff7f0e"), ("p99", "#d62728"))
        }
        self.plot_serve_throughput = pg.PlotWidget(axisItems={"bottom": compact_axis()})
        self.plot_serve_throughput.setObjectName("plot_serve_throughput")
        self.curve_rps = self.plot_serve_throughput.plot(pen=pg.mkPen("#2ca02c", width=2), **_dots("#2ca02c"))
        self.plot_serve_batches = pg.PlotWidget()
        self.plot_serve_batches.setObjectName("plot_serve_batches")
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush="#9467bd")
        self.plot_serve_batches.addItem(self.bars)
        for plot, title in (
            (self.plot_serve_latency, "latency (ms)"),
            (self.plot_serve_throughput, "requests/s"),
            (self.plot_serve_batches, "rows per batch"),
        ):
            set_fitting_title(plot.getPlotItem(), title)  # elided to a narrow plot, whole in the tooltip
        for plot in (self.plot_serve_latency, self.plot_serve_throughput):
            plot.setLabel("bottom", "s")
            # seconds since the start and latencies and rates are never negative, nor the axes, data or none
            plot.setLimits(xMin=0.0, yMin=0.0)
        self.plot_serve_batches.setLimits(xMin=-0.5, yMin=0.0)
        self.table_workers = QTableWidget(0, len(WORKER_COLUMNS), objectName="table_serve_workers")
        self.table_workers.setHorizontalHeaderLabels(list(WORKER_COLUMNS))
        self.table_workers.verticalHeader().setVisible(False)
        self.table_workers.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table_workers.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table_workers.horizontalHeader().setStretchLastSection(True)
        self.table_workers.setToolTip(
            "The server's current model processes (/ready); serving: the server formed batches in the last second"
        )
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.plot_serve_latency, 0, 0)
        grid.addWidget(self.plot_serve_throughput, 0, 1)
        grid.addWidget(self.plot_serve_batches, 1, 0)
        grid.addWidget(self.table_workers, 1, 1)
        grid.setColumnStretch(0, 1)
        grid.setColumnStretch(1, 1)

    def apply_colors(self, colors: PlotColors) -> None:
        for plot in (self.plot_serve_latency, self.plot_serve_throughput, self.plot_serve_batches):
            style_plot_widget(plot, colors)

    def reset(self, t0: float) -> None:
        """A new server (started at ``t0``, monotonic seconds): nothing of the last one's is kept."""
        self._t0, self._last, self.batches_per_s = t0, None, 0.0
        self._busy = {}
        for key in self.series:
            self.series[key] = []
        for curve in (*self.curves.values(), self.curve_rps):
            curve.setData([], [])
        self.table_workers.setRowCount(0)

    def clear_workers(self) -> None:
        """The server is gone: so are its workers."""
        self.table_workers.setRowCount(0)

    def show_metrics(self, m: dict[str, Any], now: float) -> None:
        """One reading of /metrics (``app.viewmodels.serve_metrics.parse_metrics``) at ``now``: the figures since the last."""
        if self._last is not None:
            then, before = self._last
            dt = max(now - then, 1e-6)
            self.batches_per_s = max(0.0, m["batches"] - before["batches"]) / dt
            self.series["t"].append(now - self._t0)
            self.series["rps"].append((m["ok"] - before["ok"]) / dt)
            window = [(b, c - c0) for (b, c), (_, c0) in zip(m["latency"], before["latency"])]
            for q in ("p50", "p95", "p99"):
                value = histogram_quantile(int(q[1:]) / 100, window)
                self.series[q].append(float("nan") if value is None else value * 1000)
            for key in self.series:
                del self.series[key][:-HISTORY]
            t = self.series["t"]
            for q, curve in self.curves.items():
                if any(math.isfinite(v) for v in self.series[q]):
                    curve.setData(t, self.series[q], connect="finite")
                else:  # no request in the window yet: nothing to draw (the dots of all-nan data warn)
                    curve.setData([], [])
            self.curve_rps.setData(t, self.series["rps"])
        self._last = (now, m)
        counts = [c - prev for (_, c), (_, prev) in zip(m["batch"], [(0, 0.0)] + m["batch"][:-1])]
        bounds = [b for b, _ in m["batch"]]
        shown = [(i, n) for i, (b, n) in enumerate(zip(bounds, counts)) if not math.isinf(b)]
        used = max((i for i, n in shown if n > 0), default=0)
        shown = shown[: max(used + 1, MIN_BARS)]  # the buckets up to the largest batch formed: labels that read
        self.bars.setOpts(x=[i for i, _ in shown], height=[n for _, n in shown])
        axis = self.plot_serve_batches.getAxis("bottom")
        axis.setTicks([[(i, f"≤{int(bounds[i])}") for i, _ in shown]])

    def show_workers(self, workers: list[dict[str, Any]], now: float | None = None) -> None:
        """The workers /ready lists now (a restarted one's old pid is not among them), each one's state and
        the share of the time since the last reading it spent computing."""
        now = time.monotonic() if now is None else now
        busy_then, self._busy = self._busy, {}
        self.table_workers.setRowCount(len(workers))
        for r, w in enumerate(workers):
            share = None
            if isinstance(w.get("busy_s"), (int, float)):
                key = (w.get("worker"), w.get("pid"))
                self._busy[key] = (now, float(w["busy_s"]))
                if key in busy_then and now > busy_then[key][0]:
                    share = (float(w["busy_s"]) - busy_then[key][1]) / (now - busy_then[key][0])
            for c, key_name in enumerate(WORKER_COLUMNS):
                value = w.get(key_name, "")
                text = worker_state(str(value), self.batches_per_s, share) if key_name == "state" else str(value)
                self.table_workers.setItem(r, c, QTableWidgetItem(text))
