"""An image model's answer on screen, and image files taken from a drag or a dialog.

``image_pixmap`` is an image file as every view shows it: upright, as the models read it (``to_pixmap`` for
pixels already decoded). ``ImageAnswer(prefix)`` shows one picture (a thumbnail, ``label_<prefix>_image``) beside its top classes
and their probabilities as bars (``table_<prefix>_top_classes``); both give way in a small window (the picture
shrinks to ``MIN_THUMB_PX``, the table scrolls past ``MIN_SHOWN_CLASSES`` rows) rather than set its minimum size. ``FileDrops`` lets a widget take files
and folders dropped on it (``dropped`` with their paths); ``image_files`` keeps the images among paths.
The Serve tab's try-it form and the Predict tab both use them.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from PySide6.QtCore import QBuffer, QEvent, QIODevice, QMimeData, QObject, QSize, Qt, Signal
from PySide6.QtGui import QDropEvent, QImage, QPixmap, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.shell.elided_label import ElidedLabel
from core.services.inputs import IMAGE_SUFFIXES, ImageError, preview_image

TOP_CLASSES = 5  # classes listed beside a picture
THUMB_PX = 160  # a thumbnail's longer side, where there is room
MIN_THUMB_PX = 48  # ... and where there is not
MIN_SHOWN_CLASSES = 3  # rows the top-classes table keeps in view at least (the rest scroll)
BAR_STEPS = 1000  # a probability bar's resolution
IMAGE_FILTER = "Images (" + " ".join(f"*{s}" for s in sorted(IMAGE_SUFFIXES)) + ")"
SENT_AS_IS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG"}  # what a server decodes; others go as PNG


def to_pixmap(img: np.ndarray, size: int) -> QPixmap:
    """uint8 HxW (grey) or HxWx3 (RGB) -> a pixmap that fits ``size`` x ``size``, scaled without smoothing: a small
    image is enlarged pixel for pixel, what the model saw rather than a blur of it."""
    img = np.ascontiguousarray(img, dtype=np.uint8)
    h, w = img.shape[:2]
    grey = img.ndim == 2
    fmt = QImage.Format.Format_Grayscale8 if grey else QImage.Format.Format_RGB888
    qimg = QImage(img.data, w, h, img.strides[0], fmt)
    pix = QPixmap.fromImage(qimg.copy())  # copy: the numpy buffer does not outlive this call
    return pix.scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.FastTransformation)


def image_pixmap(path: Path, size: int) -> QPixmap | None:
    """The image file upright (its EXIF orientation applied, as every model reads it) in ``size`` x ``size``;
    None when it is no readable image."""
    try:
        return to_pixmap(preview_image(path, size), size)
    except (ImageError, OSError):
        return None


def is_image(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES


def image_files(paths: Iterable[Path]) -> list[Path]:
    """The image files among ``paths``, a folder's images (sorted, recursively) in its place."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if is_image(f))
        elif is_image(p):
            out.append(p)
    return out


def dropped_paths(mime: QMimeData) -> list[Path]:
    """The local files and folders a drag carries."""
    if not mime.hasUrls():
        return []
    return [Path(u.toLocalFile()) for u in mime.urls() if u.isLocalFile() and u.toLocalFile()]


def image_base64(path: Path) -> str:
    """The file as base64 for ``{"images": [...]}``: a PNG or JPEG as it is, any other image re-encoded as
    PNG (a server decodes those two); ValueError names a file that is no readable image."""
    if path.suffix.lower() in SENT_AS_IS:
        return base64.b64encode(path.read_bytes()).decode("ascii")
    img = QImage(str(path))
    if img.isNull():
        raise ValueError(f"{path.name}: not a readable image")
    buf = QBuffer()
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    img.save(buf, "PNG")
    return base64.b64encode(bytes(buf.data().data())).decode("ascii")


def ranked(probabilities: dict[str, float], k: int = TOP_CLASSES) -> list[tuple[str, float]]:
    """The ``k`` likeliest classes, likeliest first."""
    return sorted(((str(c), float(p)) for c, p in probabilities.items()), key=lambda cp: -cp[1])[:k]


class FileDrops(QObject):
    """Takes the files and folders dropped on the widgets it watches (an event filter): ``dropped`` gives
    their paths; a drag that carries none is refused, so the widget underneath keeps its own behaviour."""

    dropped = Signal(list)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.active = True  # False: drags pass through, as if nothing watched

    def watch(self, *widgets: QWidget) -> None:
        for w in widgets:
            w.setAcceptDrops(True)
            w.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if not self.active or not isinstance(event, QDropEvent):  # drag enter and move events are drop events
            return super().eventFilter(watched, event)
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            if dropped_paths(event.mimeData()):
                event.setDropAction(Qt.DropAction.CopyAction)
                event.accept()
                return True
        elif kind == QEvent.Type.Drop:
            paths = dropped_paths(event.mimeData())
            if paths:
                event.setDropAction(Qt.DropAction.CopyAction)
                event.accept()
                self.dropped.emit(paths)
                return True
        return super().eventFilter(watched, event)


class TopClasses(QTableWidget):
    """Class, probability (as a number and a bar), likeliest first."""

    def __init__(self, object_name: str, parent: QWidget | None = None) -> None:
        super().__init__(0, 2, parent)
        self.setObjectName(object_name)
        self.setHorizontalHeaderLabels(["class", "probability"])
        self.verticalHeader().hide()
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.setAccessibleName("top classes and their probabilities")
        # rows as tall as a line of text and its bar: three classes in the room two took at Qt's default
        self.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)

    def show_classes(self, top: Sequence[tuple[str, float]]) -> None:
        self.setRowCount(len(top))
        for r, (name, p) in enumerate(top):
            self.setItem(r, 0, QTableWidgetItem(name))
            item = QTableWidgetItem(f"{p:.3f}")  # read by tests and screen readers; the bar shows it
            self.setItem(r, 1, item)
            bar = self.cellWidget(r, 1)
            if not isinstance(bar, QProgressBar):  # kept from answer to answer: a replaced one lingers until deleted
                bar = QProgressBar(objectName=f"bar_top_class_{r}", minimum=0, maximum=BAR_STEPS)
                bar.setFocusPolicy(Qt.FocusPolicy.NoFocus)
                self.setCellWidget(r, 1, bar)
            bar.setValue(round(p * BAR_STEPS))
            bar.setFormat(f"{p:.1%}")
        self.updateGeometry()

    def _rows_height(self, rows: int) -> int:
        frame = 2 * self.frameWidth()
        return self.horizontalHeader().sizeHint().height() + sum(self.rowHeight(r) for r in range(rows)) + frame

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), self._rows_height(self.rowCount()))

    def minimumSizeHint(self) -> QSize:
        # a few rows, not all: a fixed height of every row set the window's minimum height (a 900x600 screen)
        return QSize(super().minimumSizeHint().width(), self._rows_height(min(self.rowCount(), MIN_SHOWN_CLASSES)))

    def shown(self) -> list[tuple[str, float]]:
        """The classes and probabilities listed, top first."""
        return [(self._text(r, 0), float(self._text(r, 1))) for r in range(self.rowCount())]

    def _text(self, row: int, col: int) -> str:
        item = self.item(row, col)
        return item.text() if item is not None else ""


class Thumbnail(QLabel):
    """A picture scaled to the label's room, from ``MIN_THUMB_PX`` to ``THUMB_PX``: it takes what the layout
    leaves and never asks for more (its size policy ignores its hint), so a narrow or short window keeps its
    tables readable beside it."""

    def __init__(self, object_name: str) -> None:
        super().__init__(objectName=object_name)
        self.source: QPixmap | None = None  # at THUMB_PX; scaled down to the label's room when shown
        self.setMinimumSize(MIN_THUMB_PX + 4, MIN_THUMB_PX + 4)
        self.setMaximumSize(THUMB_PX + 4, THUMB_PX + 4)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Ignored)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setFrameShape(QLabel.Shape.StyledPanel)

    def sizeHint(self) -> QSize:
        return QSize(THUMB_PX + 4, THUMB_PX + 4)

    def show_pixmap(self, pixmap: QPixmap | None) -> None:
        self.source = pixmap
        self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        if self.source is None:
            return
        side = max(MIN_THUMB_PX, min(self.width(), self.height()) - 4)
        if side >= max(self.source.width(), self.source.height()):
            self.setPixmap(self.source)
        else:  # shrunk smoothly: a photo's detail averaged rather than dropped row by row
            self.setPixmap(
                self.source.scaled(
                    side, side, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation
                )
            )


class ImageAnswer(QWidget):
    """One picture and its top classes: ``show_answer(path, probabilities)``, ``clear()``."""

    def __init__(self, prefix: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(f"image_answer_{prefix}")
        self.path: Path | None = None
        self.label_image = Thumbnail(f"label_{prefix}_image")
        self.label_caption = ElidedLabel(objectName=f"label_{prefix}_image_caption")
        self.table_top = TopClasses(f"table_{prefix}_top_classes")
        # the caption under the picture: the table has the answer's whole height for its rows
        picture = QVBoxLayout()
        picture.setContentsMargins(0, 0, 0, 0)
        picture.addWidget(self.label_image, 1)
        picture.addWidget(self.label_caption)
        side = QVBoxLayout()
        side.setContentsMargins(0, 0, 0, 0)
        side.addWidget(self.table_top)
        side.addStretch(1)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(picture, 2)
        layout.addLayout(side, 3)  # the table's share: its class names and bars stay readable beside the picture
        self.clear()

    def clear(self) -> None:
        self.path = None
        self.label_image.show_pixmap(None)
        self.label_image.clear()
        self.label_image.setText("no image")
        self.label_caption.setText("")
        self.table_top.show_classes([])

    def show_answer(self, path: Path, probabilities: dict[str, float]) -> None:
        """The picture at ``path`` and its likeliest classes."""
        self.path = path
        pixmap = image_pixmap(path, THUMB_PX)
        self.label_image.show_pixmap(pixmap)
        if pixmap is None:
            self.label_image.setText("(unreadable)")
        top = ranked(probabilities)
        self.label_image.setAccessibleName(f"image {path.name}")
        self.label_image.setToolTip(str(path))
        best = f": {top[0][0]} ({top[0][1]:.1%})" if top else ""
        self.label_caption.setText(f"{path.name}{best}")
        self.table_top.show_classes(top)

    def top_class(self) -> str:
        top = self.table_top.shown()
        return top[0][0] if top else ""
