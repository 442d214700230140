"""Live plots: training loss, validation, throughput, a sweep's result, the learning rate (pyqtgraph).

:class:`PlotsPanel` lays the plots out with their shared controls (x axis,
log scale, smoothing, save) and feeds them from one :class:`RunData`. Each
plot (app.plots.curves) calls ``setData`` once per changed curve per frame and
app.plots.pacing decides when frames come, never once per record. Curves use
peak downsampling and clip-to-view so a million points still redraw quickly.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QScrollArea,
    QSlider,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.plots.base import BasePlot, PlotColors, worker_color
from app.plots.curves import LossPlot, LRPlot, SweepPlot, ThroughputPlot, ValPlot
from app.plots.pacing import FramePacer
from app.viewmodels.run_data import Changes, RunData

# The views take the plots' colours and helpers from here.
__all__ = [
    "BasePlot",
    "LRPlot",
    "LossPlot",
    "PlotColors",
    "PlotsPanel",
    "SweepPlot",
    "ThroughputPlot",
    "ValPlot",
    "worker_color",
]


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
        self.pacer = FramePacer(self.loss, [p for p in self.plots if p is not self.loss], self)

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
        for plot, title in (
            (self.loss, "Loss"),
            (self.val, "Validation"),
            (self.throughput, "Throughput"),
            (self.lr, "Learning rate"),
        ):
            menu.addAction(QAction(f"{title} plot as PNG…", menu, triggered=plot.ask_save_png))
            menu.addAction(QAction(f"{title} data as CSV…", menu, triggered=plot.ask_save_csv))
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
        for plot, width in ((self.sweep, 170), (self.lr, 200)):
            plot.setMinimumWidth(width)  # the validation and throughput plots set theirs: it depends on their legend
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
        self.pacer.reset()
        for plot in self.plots:
            plot.reset(self.data)

    def set_live(self, live: bool) -> None:
        """While a run is live its plots' axes move in steps, not every frame (see ``LiveViewBox``)."""
        for plot in self.plots:
            plot.set_live(live)

    def set_run_shape(
        self,
        labels: dict[int, str],
        separate_models: bool,
        sweep_values: dict[int, float] | None = None,
        per_trial: bool = False,
        groups: dict[int, int] | None = None,
    ) -> None:
        """What the workers are: their legend labels, whether each has its own model, a sweep's values;
        ``per_trial``: a search, whose loss and validation curves are its trials, not its workers; ``groups``:
        curves drawn as part of another (a race variant's other workers), in its colour, without a row."""
        self.data.labels = dict(labels)
        self.data.groups = dict(groups or {})
        self.data.per_trial = per_trial
        self.data.separate_models = separate_models or per_trial
        self.data.expected_workers = len(labels)
        for plot in (self.throughput,) if per_trial else (self.loss, self.throughput):
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

    def set_out(self, out: dict[int, str]) -> None:
        """Curves that are out (a race's eliminated variants) and why: grey and dashed, the reason in their
        legend row and tooltip."""
        if out == self.data.out:
            return
        self.data.out = dict(out)
        for plot in (self.loss, self.val, self.throughput, self.lr):
            plot.relabel()

    def add_records(self, records: list[dict[str, Any]]) -> Changes:
        """Append records to the series; the curves follow at the next frame (``flush`` now)."""
        changes = self.data.add(records)
        if changes:
            self.pacer.add(changes)
        return changes

    def flush(self, everything: bool = True) -> None:
        """Push pending data to the curves now; ``everything``: the side plots too (see FramePacer)."""
        self.pacer.flush(everything)

    @property
    def frames(self) -> int:
        return self.pacer.frames

    @property
    def frame_callbacks(self) -> list[Any]:
        """Called with the Changes of each frame (benchmarks)."""
        return self.pacer.frame_callbacks

    @property
    def frame_interval_ms(self) -> int:
        return self.pacer.frame_interval_ms

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

    # -- what the window asks of the run on screen -------------------------------------------------
    @property
    def log_y(self) -> bool:
        return self.check_log_y.isChecked()

    def set_log_y(self, on: bool) -> None:
        self.check_log_y.setChecked(on)

    @property
    def smoothing(self) -> float:
        return self.data.smoothing

    @property
    def per_trial(self) -> bool:
        """The curves are a search's trials, not its workers."""
        return self.data.per_trial

    def label(self, worker: int) -> str:
        """A worker's (or trial's) legend label."""
        return self.data.label(worker)

    def total_rate(self) -> float:
        """The latest samples per second of all workers together (nan before the first)."""
        return self.data.total_rate()

    def mark_next_start(self, marker: tuple[str, str]) -> None:
        """The marker (label, kind) where the next records start: a fork branching from its parent's curves."""
        self.data.next_start = marker
