"""A one-line label that never widens its window: a long text is elided to the label's width, whole in its
tooltip (status lines: the Serve tab's, the status bar's run folder and state)."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

MIN_WIDTH = 40  # what a layout must leave the label at least; the rest of its text elides


class ElidedLabel(QLabel):
    """``setText`` keeps the whole text (``text()`` returns it); the label shows as much as fits, then "…"."""

    def __init__(self, text: str = "", parent: QWidget | None = None, objectName: str = "") -> None:
        super().__init__(parent)
        if objectName:
            self.setObjectName(objectName)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.setText(text)

    def setText(self, text: str) -> None:
        self._full = " ".join(str(text).split("\n"))
        self._elide()
        self.updateGeometry()

    def text(self) -> str:
        return self._full

    def sizeHint(self) -> QSize:
        margins = self.contentsMargins()
        width = self.fontMetrics().horizontalAdvance(self._full) + margins.left() + margins.right() + 2
        return QSize(width, super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:
        return QSize(MIN_WIDTH, super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        room = self.contentsRect().width()
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, max(room, MIN_WIDTH))
        if shown != super().text():
            super().setText(shown)
        self.setToolTip(self._full if shown != self._full else "")
