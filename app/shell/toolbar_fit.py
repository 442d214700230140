"""A toolbar that keeps every action on screen: text beside icons when the window is wide enough,
icons alone (text for actions without an icon of their own) when it is not.

Qt's toolbar hides what does not fit behind an overflow button; in a 900 px
window that hid Open run and Export. Icons alone take a third of the width;
the tooltips still name each action and its shortcut.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QToolBar, QToolButton, QWidget


class ToolbarFit(QObject):
    """Watches ``window``'s width and chooses ``toolbar``'s button style to fit it."""

    def __init__(self, toolbar: QToolBar, window: QWidget) -> None:
        super().__init__(toolbar)
        self.toolbar = toolbar
        self.window = window
        self.compact = False
        self._buttons_styled = False
        window.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.window and event.type() in (QEvent.Type.Resize, QEvent.Type.Show):
            self.fit()  # before the toolbar lays itself out for the new width
        return False

    def _buttons(self) -> list[tuple[QAction, QToolButton]]:
        out = []
        for action in self.toolbar.actions():
            button = self.toolbar.widgetForAction(action)
            if isinstance(button, QToolButton) and not action.isSeparator():
                out.append((action, button))
        return out

    def _wide_width(self) -> int:
        """The toolbar's width with text beside every icon."""
        margins = self.toolbar.contentsMargins()
        spacing = self.toolbar.layout().spacing() if self.toolbar.layout() is not None else 0
        total = margins.left() + margins.right()
        for action in self.toolbar.actions():
            if action.isSeparator():
                total += 8 + spacing
                continue
            button = self.toolbar.widgetForAction(action)
            if isinstance(button, QToolButton):
                style = button.toolButtonStyle()
                button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
                total += button.sizeHint().width() + spacing
                button.setToolButtonStyle(style)
        return total

    def fit(self) -> None:
        """Text beside icons if it all fits the window's width, else icons alone."""
        compact = self._wide_width() > self.window.width()
        if compact == self.compact and self._buttons_styled:
            return
        icons = [a.data() for a, _b in self._buttons() if not a.icon().isNull()]  # the icon's name
        for action, button in self._buttons():
            if not compact:
                style = Qt.ToolButtonStyle.ToolButtonTextBesideIcon
            elif action.icon().isNull() or icons.count(action.data()) > 1:
                style = Qt.ToolButtonStyle.ToolButtonTextOnly  # no icon of its own to tell it apart
            else:
                style = Qt.ToolButtonStyle.ToolButtonIconOnly
            button.setToolButtonStyle(style)
        self.compact = compact
        self._buttons_styled = True
        self.toolbar.updateGeometry()
