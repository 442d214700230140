"""A non-modal message strip above the plots (errors, warnings), closable."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QWidget


class Banner(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        self.label = QLabel(objectName="banner_text")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        close = QToolButton(objectName="banner_close")
        close.setText("✕")
        close.setToolTip("Dismiss")
        close.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 4, 4, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()

    @property
    def text(self) -> str:
        return self.label.text()

    def show_message(self, text: str, level: str = "error") -> None:
        self.setProperty("level", level)
        self.style().unpolish(self)  # re-evaluate the [level=...] style sheet rule
        self.style().polish(self)
        self.label.setText(text)
        self.show()
