"""Bundled SVG icons drawn in the theme's colour, with Qt's standard icons as a fallback."""

from __future__ import annotations

from functools import lru_cache

from PySide6.QtCore import QByteArray, QRectF, Qt
from PySide6.QtGui import QIcon, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import QApplication, QStyle

from app.shell.theme import RESOURCES

_FALLBACK = {
    "start": QStyle.StandardPixmap.SP_MediaPlay,
    "pause": QStyle.StandardPixmap.SP_MediaPause,
    "resume": QStyle.StandardPixmap.SP_MediaSeekForward,
    "stop": QStyle.StandardPixmap.SP_MediaStop,
    "export": QStyle.StandardPixmap.SP_DialogSaveButton,
    "open": QStyle.StandardPixmap.SP_DialogOpenButton,
    "save": QStyle.StandardPixmap.SP_DialogSaveButton,
    "runs": QStyle.StandardPixmap.SP_DirIcon,
    "browse": QStyle.StandardPixmap.SP_DirOpenIcon,
}


def icon(name: str, color: str) -> QIcon:
    """The icon ``name`` from resources/icons, its black drawn as ``color``; disabled state greyed."""
    return _icon(name, color)


@lru_cache(maxsize=64)
def _icon(name: str, color: str) -> QIcon:
    try:
        svg = (RESOURCES / "icons" / f"{name}.svg").read_text(encoding="utf-8")
    except OSError:
        return QApplication.style().standardIcon(_FALLBACK.get(name, QStyle.StandardPixmap.SP_FileIcon))
    renderer = QSvgRenderer(QByteArray(svg.replace("#000000", color).encode("utf-8")))
    result = QIcon()
    for size in (16, 24, 32, 48):
        result.addPixmap(_render(renderer, size, 1.0), QIcon.Mode.Normal)
        result.addPixmap(_render(renderer, size, 0.35), QIcon.Mode.Disabled)
    return result


def _render(renderer: QSvgRenderer, size: int, opacity: float) -> QPixmap:
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setOpacity(opacity)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    return pixmap
