"""The Runs table: its columns, the model that holds a ``RunRow`` a row, the delegate that edits name, tags and
notes in place, the sorting and filtering proxy.

The proxy sorts by the raw values (``SORT_ROLE``), not the text, and filters on any column; an edit is saved to
the run's ``notes.json`` (``edit_failed`` says why one was not). The MLflow column shows a run's ``MirrorCell``:
a link (link colour, underlined; the view opens it on a click), a local store's run id, or "pending" (muted).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QFont, QGuiApplication, QMouseEvent, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QStyledItemDelegate,
    QTableView,
    QWidget,
)

from app.viewmodels.run_index import RunRow, parse_tags, write_notes
from app.viewmodels.run_progress import format_duration
from core.metric_names import SHORT_NAMES, figure_text

Index = QModelIndex | QPersistentModelIndex
TOP = QModelIndex()  # the table's own rows and columns: the parent of none
SORT_ROLE = Qt.ItemDataRole.UserRole + 1
LINK_ROLE = Qt.ItemDataRole.UserRole + 2  # a cell's link (the MLflow column's run page), else None
REFRESH_MS = 3000
MAX_COLUMN_WIDTH = 220  # px; a longer name elides in the middle (its end says which fork or variant it is)

# (header, RunRow attribute, editable); what a run achieved comes before what it was, so it stays in view
COLUMNS: list[tuple[str, str, bool]] = [
    ("Name", "name", True),
    ("Started", "started", False),
    ("Status", "status", False),
    ("Epochs", "epochs_done", False),
    ("Best", "best_figure", False),  # each run's own figure (its select_by): the header names it
    ("Final", "final_figure", False),
    ("Samples/s", "samples_per_s", False),
    ("Wall time", "wall_s", False),
    ("MLflow", "mirror", False),  # where the result is kept besides its folder
    ("Dataset", "dataset", False),
    ("Model", "model", False),
    ("Strategy", "strategy", False),
    ("Workers", "workers", False),
    ("Tags", "tags", True),
    ("Notes", "notes", True),
]
COL = {attr: i for i, (_h, attr, _e) in enumerate(COLUMNS)}
FIGURES = ("best_figure", "final_figure")
HEADER_TIPS = {
    "best_figure": "The run's figure (the metric of train.select_by) of the model it hands on (checkpoints/best.pt),"
    " measured on those weights: what Evaluate, Export, Predict and Serve use",
    "final_figure": "The run's figure (the metric of train.select_by) at its last evaluation",
    "epochs_done": "The epochs every worker completed, of those asked (a sweep: its slowest worker's, "
    '"slowest"); a search: its trials done',
    "mirror": "Where the run is mirrored to MLflow (its mlflow.json): a link to its page on a tracking server (click"
    " to open), its run id in a local store, or pending when not all of it was sent",
}


def _display(row: RunRow, attr: str, named: bool = False) -> str:
    """A cell's text; ``named``: a figure says which it is (the column holds runs of several)."""
    value = getattr(row, attr)
    if attr == "started":
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(value)) if value else ""
    if attr == "epochs_done":
        return row.count.short()
    if attr in FIGURES:
        return figure_text(row.metric, value, named)
    if attr == "samples_per_s":
        return "" if math.isnan(value) else f"{value:,.0f}"
    if attr == "wall_s":
        return "" if math.isnan(value) else format_duration(value)
    if attr == "tags":
        return ", ".join(value)
    if attr == "mirror":
        return str(value.text)
    return str(value)


def _sort_key(row: RunRow, attr: str) -> Any:
    value = getattr(row, attr)
    if attr == "mirror":  # the tip and link too: a scan announces a cell whose link or state changed
        return (value.text.lower(), value.link, value.tip)
    if attr in FIGURES:  # runs of one figure together, each group by value
        return (row.metric, -math.inf if math.isnan(value) else value)
    if isinstance(value, float):
        return -math.inf if math.isnan(value) else value
    if isinstance(value, list):
        return ", ".join(value).lower()
    if isinstance(value, str):
        return value.lower()
    return value


MIRROR_ROLES = (Qt.ItemDataRole.ToolTipRole, Qt.ItemDataRole.ForegroundRole, Qt.ItemDataRole.FontRole)


def _mirror_data(row: RunRow, role: int) -> Any:
    """The MLflow cell's tooltip, colour and font: a link looks like one, pending is muted."""
    cell = row.mirror
    if role == Qt.ItemDataRole.ToolTipRole:
        return cell.tip
    if role == Qt.ItemDataRole.ForegroundRole and (cell.link or cell.pending):
        palette = QGuiApplication.palette()
        return palette.color(QPalette.ColorRole.Link if cell.link else QPalette.ColorRole.PlaceholderText)
    if role == Qt.ItemDataRole.FontRole and (cell.link or cell.pending):
        font = QFont()
        font.setUnderline(bool(cell.link))
        font.setItalic(cell.pending)
        return font
    return None


class RunsTableModel(QAbstractTableModel):
    edited = Signal(object)  # the RunRow whose notes/tags/name changed
    edit_failed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: list[RunRow] = []
        self.editing: set[Path] = set()  # runs whose row has an open editor: scans leave them alone
        self.metrics: list[str] = []  # the figures the rows show, in order of first appearance

    @property
    def named(self) -> bool:
        """Runs of several figures: each cell names its own."""
        return len(self.metrics) > 1

    def _take_metrics(self) -> None:
        metrics = list(dict.fromkeys(r.metric for r in self.rows))
        if metrics == self.metrics:
            return
        self.metrics = metrics
        first, last = COL["best_figure"], COL["final_figure"]
        self.headerDataChanged.emit(Qt.Orientation.Horizontal, first, last)
        if self.rows:
            self.dataChanged.emit(self.index(0, first), self.index(len(self.rows) - 1, last))

    def set_rows(self, rows: list[RunRow]) -> None:
        """Take a new scan: rows update in place, new runs are inserted and gone ones removed.

        Only the cells whose text changed are announced, and a row whose cell is being edited
        (``editing``) is left as it is until the editor closes, so a scan never resets an open editor.
        """
        fresh = {r.path: r for r in rows}
        for i in reversed(range(len(self.rows))):
            if self.rows[i].path not in fresh and self.rows[i].path not in self.editing:
                self.beginRemoveRows(QModelIndex(), i, i)
                del self.rows[i]
                self.endRemoveRows()
        known = {r.path: i for i, r in enumerate(self.rows)}
        for path, row in fresh.items():
            at = known.get(path)
            if at is None or path in self.editing:
                continue
            old, self.rows[at] = self.rows[at], row
            changed = [
                c
                for c, (_h, attr, _e) in enumerate(COLUMNS)
                if _display(old, attr, self.named) != _display(row, attr, self.named)
                or _sort_key(old, attr) != _sort_key(row, attr)
            ]
            if changed:
                self.dataChanged.emit(self.index(at, min(changed)), self.index(at, max(changed)))
        new = [r for r in rows if r.path not in known]
        if new:
            self.beginInsertRows(QModelIndex(), len(self.rows), len(self.rows) + len(new) - 1)
            self.rows.extend(new)
            self.endInsertRows()
        self._take_metrics()

    def clear(self) -> None:
        self.beginResetModel()
        self.rows = []
        self.editing.clear()
        self.metrics = []
        self.endResetModel()

    def row_for(self, path: Path) -> int:
        return next((i for i, r in enumerate(self.rows) if r.path == path), -1)

    def rowCount(self, parent: Index = TOP) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = TOP) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            header, attr = COLUMNS[section][0], COLUMNS[section][1]
            if attr in FIGURES:  # "Best RMSE"; runs of several figures: "Best figure", each cell named
                one = len(self.metrics) == 1
                return f"{header} {SHORT_NAMES.get(self.metrics[0], self.metrics[0]) if one else 'figure'}"
            return header
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.ToolTipRole:
            return HEADER_TIPS.get(COLUMNS[section][1])
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        base = super().flags(index)
        if index.isValid() and COLUMNS[index.column()][2]:
            return base | Qt.ItemFlag.ItemIsEditable
        return base

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row = self.rows[index.row()]
        attr = COLUMNS[index.column()][1]
        if role == Qt.ItemDataRole.DisplayRole:
            return _display(row, attr, self.named)
        if role == Qt.ItemDataRole.EditRole:
            return ", ".join(row.tags) if attr == "tags" else str(getattr(row, attr))
        if role == SORT_ROLE:
            return _sort_key(row, attr)
        if role == LINK_ROLE:
            return (row.mirror.link or None) if attr == "mirror" else None
        if attr == "mirror" and role in MIRROR_ROLES and row.mirror.text:
            return _mirror_data(row, role)
        if role == Qt.ItemDataRole.ToolTipRole:
            lines = (
                [str(row.path)]
                + ([f"fork of {row.parent}"] if row.parent else [])
                + ([f"imported from the TensorBoard logs in {row.imported_from}"] if row.imported_from else [])
                + row.races
                + ([row.notes] if row.notes else [])
            )
            return "\n".join(lines)
        if (
            role == Qt.ItemDataRole.TextAlignmentRole
            and isinstance(getattr(row, attr), (int, float))
            and attr not in ("started",)
        ):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.FontRole and attr == "status" and row.status == "running":
            font = QFont()
            font.setBold(True)
            return font
        return None

    def setData(self, index: Index, value: Any, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if role != Qt.ItemDataRole.EditRole or not index.isValid():
            return False
        row = self.rows[index.row()]
        attr = COLUMNS[index.column()][1]
        text = str(value)
        try:
            if attr == "tags":
                saved = write_notes(row.path, tags=parse_tags(text))
                row.tags = list(saved["tags"])
            elif attr == "notes":
                write_notes(row.path, notes=text)
                row.notes = text
            elif attr == "name":
                name = text.strip() or row.path.name
                write_notes(row.path, name=name)
                row.name = name
            else:
                return False
        except OSError as exc:
            self.edit_failed.emit(f"could not save the notes of {row.path.name}: {exc.strerror or exc}")
            return False
        self.dataChanged.emit(index, index)
        self.edited.emit(row)
        return True


class RunsDelegate(QStyledItemDelegate):
    """Tells the model which row has an open editor, so a scan leaves that row alone."""

    def __init__(self, model: RunsTableModel, proxy: QSortFilterProxyModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = model
        self._proxy = proxy
        self._open: dict[QWidget, Path] = {}

    def createEditor(self, parent: QWidget, option: Any, index: Index) -> QWidget:
        editor = super().createEditor(parent, option, index)
        row = self._proxy.mapToSource(index).row()
        if 0 <= row < len(self._model.rows):
            path = self._model.rows[row].path
            self._open[editor] = path
            self._model.editing.add(path)
        return editor

    def destroyEditor(self, editor: QWidget, index: Index) -> None:
        path = self._open.pop(editor, None)
        if path is not None and path not in self._open.values():
            self._model.editing.discard(path)
        super().destroyEditor(editor, index)


class RunsTable(QTableView):
    """The table: a double-click opens (the view connects ``doubleClicked``), F2 edits, a link cell (``LINK_ROLE``)
    shows the hand cursor while the mouse is tracked (the view opens it on ``clicked``).

    F2 on a cell that cannot be edited renames the run: its row's name cell is edited instead.
    """

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        over_link = bool(self.indexAt(event.position().toPoint()).data(LINK_ROLE))
        if over_link:
            self.viewport().setCursor(Qt.CursorShape.PointingHandCursor)
        else:
            self.viewport().unsetCursor()
        super().mouseMoveEvent(event)

    def edit(self, index: Any, trigger: Any = None, event: Any = None) -> bool:  # type: ignore[override]  # Qt overloads edit: the slot and the virtual
        if trigger is None:  # edit(index): the slot's form (void in Qt)
            super().edit(index)
            return True
        if (
            trigger == QAbstractItemView.EditTrigger.EditKeyPressed
            and index.isValid()
            and not COLUMNS[index.column()][2]
        ):
            index = index.siblingAtColumn(COL["name"])
            self.setCurrentIndex(index)
        return super().edit(index, trigger, event)


class RunsFilter(QSortFilterProxyModel):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)
        self.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.setFilterKeyColumn(-1)  # any column

    def lessThan(self, left: Index, right: Index) -> bool:
        """By the raw values: a figure's key is (metric, value), which Qt's own comparison cannot order."""
        a, b = left.data(SORT_ROLE), right.data(SORT_ROLE)
        try:
            return bool(a < b)
        except TypeError:
            return str(a) < str(b)
