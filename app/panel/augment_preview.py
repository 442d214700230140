"""A grid of augmented samples: what the [augment] settings do to the chosen data set's images.

``AugmentPreviewDialog(augment, images, parent=None)`` (object name
``dialog_augment_preview``) computes ``core.services.models.augment_preview`` on a
background thread (``tasks.BackgroundCalls``) and then shows one row per
sample: the image as it is, then its augmented copies. ``shown`` follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QGridLayout, QLabel, QVBoxLayout, QWidget

from app.shell.tasks import BackgroundCalls
from app.views.export_dialog import error_text
from app.views.image_answer import to_pixmap

SAMPLES = 6
COPIES = 6
CELL = 64


class AugmentPreviewDialog(QDialog):
    shown = Signal()
    failed = Signal(str)

    def __init__(self, augment: Any, images: Sequence[tuple[np.ndarray, str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("dialog_augment_preview")
        self.setWindowTitle("Augmentation preview")
        self.augment = augment
        self.rows: list[list[np.ndarray]] = []
        self._calls = BackgroundCalls(self)
        self._labels = [str(label) for _, label in images[:SAMPLES]]
        self.label_status = QLabel("Augmenting samples…", objectName="label_augment_status")
        self.label_status.setWordWrap(True)
        self.grid = QWidget(objectName="grid_augment_preview")
        self._grid = QGridLayout(self.grid)
        self._grid.setSpacing(4)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.label_status)
        layout.addWidget(self.grid, 1)
        layout.addWidget(buttons)
        arrays = [a for a, _ in images[:SAMPLES]]
        self._calls.call(lambda: _grid(augment, arrays), self._on_done, self._on_error, name="augment-preview")

    @property
    def busy(self) -> bool:
        return self._calls.busy

    def _on_done(self, rows: list[list[np.ndarray]]) -> None:
        self.rows = rows
        self._grid.addWidget(QLabel("original"), 0, 0, Qt.AlignmentFlag.AlignCenter)
        for c in range(1, COPIES + 1):
            self._grid.addWidget(QLabel(f"augmented {c}"), 0, c, Qt.AlignmentFlag.AlignCenter)
        for r, row in enumerate(rows, start=1):
            for c, image in enumerate(row):
                cell = QLabel()
                cell.setPixmap(to_pixmap(image, CELL))
                cell.setFixedSize(CELL, CELL)
                cell.setToolTip(self._labels[r - 1] if r - 1 < len(self._labels) else "")
                self._grid.addWidget(cell, r, c)
        a = self.augment
        self.label_status.setText(
            f"Each row: a training sample, then {COPIES} random augmentations (crop scale {a.crop_scale:g}, "
            f"flip {'on' if a.hflip else 'off'}, rotation ±{a.rotation:g}°, jitter {a.jitter:g}). "
            "Validation images are never augmented."
        )
        self.shown.emit()

    def _on_error(self, exc: BaseException) -> None:
        message = error_text(exc)
        self.label_status.setText(f"Preview failed: {message}")
        self.failed.emit(message)

    def wait(self, timeout_s: float = 30.0) -> bool:
        return self._calls.wait_all(timeout_s)

    def done(self, result: int) -> None:
        self._calls.forget_all()
        self._calls.wait_all(5.0)
        super().done(result)


def _grid(augment: Any, images: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Background thread: the engine's preview (torch stays off the GUI thread)."""
    from core.services.models import augment_preview as preview_grid

    return preview_grid(augment, images, COPIES)
