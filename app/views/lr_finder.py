"""The learning-rate finder dialog: the range test on the panel's config, loss against lr (log x)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.shell.tasks import BackgroundCalls
from core.config import Config

STEPS = 100


class LRFinderDialog(QDialog):
    """Runs :func:`core.services.lr_finder.find_lr` in the background; "Use this rate" hands the suggestion over."""

    use_lr = Signal(float)
    _progress = Signal(int, float, float)  # from the finder's thread: step, lr, smoothed loss

    def __init__(self, config: Config, parent: QWidget | None = None) -> None:
        super().__init__(parent, objectName="dialog_lr_finder")
        self.setWindowTitle("Find a learning rate")
        self.config = config
        self.result: Any = None
        self._cancel = False
        self._calls = BackgroundCalls(self)
        self._points: list[tuple[float, float]] = []
        layout = QVBoxLayout(self)
        self.plot_lr_finder = pg.PlotWidget(objectName="plot_lr_finder")
        self.plot_lr_finder.setLogMode(x=True, y=False)
        self.plot_lr_finder.setLabel("bottom", "learning rate")
        self.plot_lr_finder.setLabel("left", "smoothed loss")
        self.plot_lr_finder.showGrid(x=True, y=True, alpha=0.2)
        self._curve = self.plot_lr_finder.plot([], [], pen=pg.mkPen(width=1))
        self._marker = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("r", width=1))
        self._marker.hide()
        self.plot_lr_finder.addItem(self._marker)
        layout.addWidget(self.plot_lr_finder, 1)
        self.label_lr_suggestion = QLabel(
            f"The range test trains a copy of the model for {STEPS} batches; the model's weights stay as they are.",
            objectName="label_lr_suggestion",
        )
        self.label_lr_suggestion.setWordWrap(True)
        layout.addWidget(self.label_lr_suggestion)
        row = QHBoxLayout()
        self.button_lr_find_run = QPushButton("Run", objectName="button_lr_find_run")
        self.button_lr_find_run.clicked.connect(self.run)
        self.button_lr_use = QPushButton("Use this rate", objectName="button_lr_use")
        self.button_lr_use.setEnabled(False)
        self.button_lr_use.clicked.connect(self._on_use)
        close = QPushButton("Close", objectName="button_lr_close")
        close.clicked.connect(self.reject)
        row.addWidget(self.button_lr_find_run)
        row.addStretch(1)
        row.addWidget(self.button_lr_use)
        row.addWidget(close)
        layout.addLayout(row)
        self._progress.connect(self._on_progress)
        self.resize(560, 420)

    @property
    def running(self) -> bool:
        return self._calls.busy

    def run(self) -> None:
        if self._calls.busy:
            return
        from core.services.lr_finder import find_lr

        self._cancel = False
        self._points = []
        self.result = None
        self._marker.hide()
        self.button_lr_find_run.setEnabled(False)
        self.button_lr_use.setEnabled(False)
        self.label_lr_suggestion.setText("Running the range test…")
        cfg, emit = self.config, self._progress.emit
        self._calls.call(
            lambda: find_lr(cfg, steps=STEPS, progress=emit, should_stop=lambda: self._cancel),
            self._on_done,
            self._on_failed,
            name="lr-find",
        )

    @Slot(int, float, float)
    def _on_progress(self, step: int, lr: float, loss: float) -> None:
        self._points.append((lr, loss))
        if step % 5 == 0:
            xs, ys = np.array(self._points).T
            self._curve.setData(xs, ys)

    def _on_done(self, result: Any) -> None:
        self.result = result
        self._curve.setData(np.asarray(result.lrs), np.asarray(result.losses))
        self._marker.setValue(np.log10(result.suggestion))
        self._marker.show()
        self.label_lr_suggestion.setText(
            f"Suggested learning rate: {result.suggestion:.3g} (fastai's valley; "
            f"loss {result.losses[result.index]:.4f})"
        )
        self.button_lr_find_run.setEnabled(True)
        self.button_lr_use.setEnabled(True)

    def _on_failed(self, exc: BaseException) -> None:
        self.label_lr_suggestion.setText(f"The range test failed: {exc}")
        self.button_lr_find_run.setEnabled(True)

    def _on_use(self) -> None:
        if self.result is not None:
            self.use_lr.emit(float(self.result.suggestion))
            self.accept()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        self._cancel = True
        self._calls.wait_all(timeout_s)

    def done(self, code: int) -> None:
        self.shutdown()
        super().done(code)
