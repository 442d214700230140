"""The Runs view: every run of the runs directory in a sortable, filterable table (``table_runs``).

A model/view table: ``RunsTableModel`` holds ``RunRow``s, a
``QSortFilterProxyModel`` sorts (by the raw values, not the text) and filters
(any column). A double-click anywhere on a row opens its run; name, tags and
notes are edited in place (F2, or Rename… in the context menu) and saved to the
run's ``notes.json``. The folder is scanned on a background thread, on demand and
every few seconds while the view is visible, so a live run's row follows it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QItemSelectionModel,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QAction, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QMessageBox,
    QStyledItemDelegate,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.shell.tasks import BackgroundCalls
from app.viewmodels.run_index import RunIndex, RunRow, parse_tags, trash_run, write_notes
from app.viewmodels.run_progress import format_duration

Index = QModelIndex | QPersistentModelIndex
SORT_ROLE = Qt.ItemDataRole.UserRole + 1
REFRESH_MS = 3000
MAX_COLUMN_WIDTH = 220  # px; a longer name elides in the middle (its end says which fork or variant it is)

# (header, RunRow attribute, editable); what a run achieved comes before what it was, so it stays in view
COLUMNS: list[tuple[str, str, bool]] = [
    ("Name", "name", True),
    ("Started", "started", False),
    ("Status", "status", False),
    ("Epochs", "epochs_done", False),
    ("Best val acc", "best_val_accuracy", False),
    ("Final val acc", "final_val_accuracy", False),
    ("Samples/s", "samples_per_s", False),
    ("Wall time", "wall_s", False),
    ("Dataset", "dataset", False),
    ("Model", "model", False),
    ("Strategy", "strategy", False),
    ("Workers", "workers", False),
    ("Tags", "tags", True),
    ("Notes", "notes", True),
]
COL = {attr: i for i, (_h, attr, _e) in enumerate(COLUMNS)}
HEADER_TIPS = {
    "best_val_accuracy": "The validation accuracy of the model the run hands on (checkpoints/best.pt, chosen by "
    "train.select_by), measured on those weights: what Evaluate, Export, Predict and Serve use",
    "final_val_accuracy": "The validation accuracy at the run's last evaluation",
    "epochs_done": "The epochs every worker completed, of those asked (a sweep: its slowest worker's, "
    '"slowest"); a search: its trials done',
}


def _display(row: RunRow, attr: str) -> str:
    value = getattr(row, attr)
    if attr == "started":
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(value)) if value else ""
    if attr == "epochs_done":
        return row.count.short()
    if attr in ("best_val_accuracy", "final_val_accuracy"):
        return "" if math.isnan(value) else f"{value:.4f}"
    if attr == "samples_per_s":
        return "" if math.isnan(value) else f"{value:,.0f}"
    if attr == "wall_s":
        return "" if math.isnan(value) else format_duration(value)
    if attr == "tags":
        return ", ".join(value)
    return str(value)


def _sort_key(row: RunRow, attr: str) -> Any:
    value = getattr(row, attr)
    if isinstance(value, float):
        return -math.inf if math.isnan(value) else value
    if isinstance(value, list):
        return ", ".join(value).lower()
    if isinstance(value, str):
        return value.lower()
    return value


class RunsTableModel(QAbstractTableModel):
    edited = Signal(object)  # the RunRow whose notes/tags/name changed
    edit_failed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: list[RunRow] = []
        self.editing: set[Path] = set()  # runs whose row has an open editor: scans leave them alone

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
            i = known.get(path)
            if i is None or path in self.editing:
                continue
            old, self.rows[i] = self.rows[i], row
            changed = [
                c
                for c, (_h, attr, _e) in enumerate(COLUMNS)
                if _display(old, attr) != _display(row, attr) or _sort_key(old, attr) != _sort_key(row, attr)
            ]
            if changed:
                self.dataChanged.emit(self.index(i, min(changed)), self.index(i, max(changed)))
        new = [r for r in rows if r.path not in known]
        if new:
            self.beginInsertRows(QModelIndex(), len(self.rows), len(self.rows) + len(new) - 1)
            self.rows.extend(new)
            self.endInsertRows()

    def clear(self) -> None:
        self.beginResetModel()
        self.rows = []
        self.editing.clear()
        self.endResetModel()

    def row_for(self, path: Path) -> int:
        return next((i for i, r in enumerate(self.rows) if r.path == path), -1)

    def rowCount(self, parent: Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section][0]
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
            return _display(row, attr)
        if role == Qt.ItemDataRole.EditRole:
            return ", ".join(row.tags) if attr == "tags" else str(getattr(row, attr))
        if role == SORT_ROLE:
            return _sort_key(row, attr)
        if role == Qt.ItemDataRole.ToolTipRole:
            lines = (
                [str(row.path)] + ([f"fork of {row.parent}"] if row.parent else []) + ([row.notes] if row.notes else [])
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
        row = self._proxy.mapToSource(QModelIndex(index)).row()
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
    """The table: a double-click opens (the view connects ``doubleClicked``), F2 edits.

    F2 on a cell that cannot be edited renames the run: its row's name cell is edited instead.
    """

    def edit(self, index: Any, trigger: Any = None, event: Any = None) -> bool:  # type: ignore[override]
        if trigger is None:  # edit(index): the slot's form
            return super().edit(index)
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


class RunsView(QWidget):
    """The runs table with a filter box and the actions that work on the selected runs."""

    open_requested = Signal(object)  # Path of the run to open
    error = Signal(str)
    selection_changed = Signal()
    scanned = Signal()  # the table took a new scan of the folder

    def __init__(self, actions: list[QAction] | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("runs_view")
        self.index: RunIndex | None = None
        self.active: Callable[[], set[Path]] = lambda: set()
        self._calls = BackgroundCalls(self)
        self._pending_refresh = False
        self.model = RunsTableModel(self)
        self.model.edit_failed.connect(self.error)
        self.proxy = RunsFilter(self)
        self.proxy.setSourceModel(self.model)

        self.edit_filter = QLineEdit(objectName="edit_runs_filter")
        self.edit_filter.setPlaceholderText("Filter runs (name, dataset, tag, status…)")
        self.edit_filter.setClearButtonEnabled(True)
        self.edit_filter.textChanged.connect(self.proxy.setFilterFixedString)
        self.label_count = QLabel(objectName="label_runs_count")

        self.table = RunsTable(objectName="table_runs")
        self.table.setModel(self.proxy)
        self.delegate = RunsDelegate(self.model, self.proxy, self.table)
        self.table.setItemDelegate(self.delegate)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(COL["started"], Qt.SortOrder.DescendingOrder)  # newest first
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        # A double-click opens the run wherever it lands; names, tags and notes are edited with F2 or Rename….
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        self.table.setAlternatingRowColors(True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.setWordWrap(False)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        self.table.doubleClicked.connect(self._on_double_clicked)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self.selection_changed.emit())
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._on_context_menu)

        self.action_open = QAction("Open", self, objectName="action_runs_open")
        self.action_open.setToolTip("Show the selected run: its curves, settings and evaluation")
        self.action_open.triggered.connect(self._on_open)
        self.action_rename = QAction("Rename…", self, objectName="action_runs_rename")
        self.action_rename.setToolTip("Rename the selected run (F2 in the table edits its name, tags or notes)")
        self.action_rename.triggered.connect(self._on_rename)
        self.action_delete = QAction("Delete…", self, objectName="action_runs_delete")
        self.action_delete.setToolTip("Move the selected runs to the trash folder of the runs directory")
        self.action_delete.triggered.connect(self._on_delete)
        self.action_refresh = QAction("Refresh", self, objectName="action_runs_refresh")
        self.action_refresh.triggered.connect(self.refresh)
        self.extra_actions = list(actions or [])

        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.edit_filter, 1)
        for action in [
            self.action_open,
            *self.extra_actions,
            self.action_rename,
            self.action_delete,
            self.action_refresh,
        ]:
            button = QToolButton()
            button.setDefaultAction(action)
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
            bar.addWidget(button)
        bar.addWidget(self.label_count)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(self.table, 1)

        self._timer = QTimer(self, interval=REFRESH_MS)
        self._timer.timeout.connect(self._on_timer)
        self.selection_changed.connect(self._update_actions)
        self._update_actions()

    # -- the folder ------------------------------------------------------------------------
    def set_runs_dir(self, runs_dir: Path | str) -> None:
        if self.index is None or self.index.runs_dir != Path(runs_dir):
            self.index = RunIndex(runs_dir)
            self.model.clear()
        self.refresh()

    def refresh(self) -> None:
        """Scan the runs directory again (background thread); the table follows."""
        if self.index is None:
            return
        if self._calls.running("scan-runs"):
            self._pending_refresh = True
            return
        index, active = self.index, self.active()
        self._calls.call(
            lambda: index.scan(active),
            lambda rows: self._on_scanned(index, rows),
            lambda exc: self.error.emit(f"could not read the runs folder: {exc}"),
            name="scan-runs",
        )

    def _on_scanned(self, index: RunIndex, rows: list[RunRow]) -> None:
        if index is not self.index:
            return  # the folder changed meanwhile
        selected = set(self.selected_runs())
        first = not self.model.rows and rows
        self.model.set_rows(rows)
        if first:
            self.fit_columns()
        self.select_runs([p for p in selected if self.model.row_for(p) >= 0], clear=True)
        self.label_count.setText(f"{len(rows)} run(s)")
        self.scanned.emit()
        if self._pending_refresh:
            self._pending_refresh = False
            self.refresh()

    def fit_columns(self) -> None:
        """Columns as wide as their contents, but none wider than MAX_COLUMN_WIDTH (long names elide)."""
        self.table.resizeColumnsToContents()
        header = self.table.horizontalHeader()
        for c in range(len(COLUMNS) - 1):
            if header.sectionSize(c) > MAX_COLUMN_WIDTH:
                header.resizeSection(c, MAX_COLUMN_WIDTH)

    def _on_timer(self) -> None:
        if self.isVisible():
            self.refresh()

    def showEvent(self, event: Any) -> None:
        super().showEvent(event)
        self.refresh()
        self._timer.start()

    def hideEvent(self, event: Any) -> None:
        self._timer.stop()
        super().hideEvent(event)

    @property
    def busy(self) -> bool:
        return self._calls.busy

    def wait(self, timeout_s: float = 10.0) -> bool:
        self._timer.stop()
        self._calls.forget_all()
        return self._calls.wait_all(timeout_s)

    # -- selection ---------------------------------------------------------------------------
    def selected_runs(self) -> list[Path]:
        rows = sorted({self.proxy.mapToSource(i).row() for i in self.table.selectionModel().selectedRows()})
        return [self.model.rows[r].path for r in rows if 0 <= r < len(self.model.rows)]

    def select_runs(self, paths: list[Path], clear: bool = True) -> None:
        sm = self.table.selectionModel()
        if clear:
            sm.clearSelection()
        flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
        for p in paths:
            r = self.model.row_for(Path(p))
            if r >= 0:
                sm.select(self.proxy.mapFromSource(self.model.index(r, 0)), flags)

    def _update_actions(self) -> None:
        n = len(self.selected_runs())
        self.action_open.setEnabled(n == 1)
        self.action_rename.setEnabled(n == 1)
        self.action_delete.setEnabled(n >= 1 and not any(self._is_live(p) for p in self.selected_runs()))

    def _is_live(self, path: Path) -> bool:
        r = self.model.row_for(path)
        return r >= 0 and self.model.rows[r].status == "running"

    # -- actions -----------------------------------------------------------------------------
    def _on_double_clicked(self, index: QModelIndex) -> None:
        row = self.proxy.mapToSource(index).row()
        if 0 <= row < len(self.model.rows):
            self.open_requested.emit(self.model.rows[row].path)

    def _on_open(self) -> None:
        runs = self.selected_runs()
        if len(runs) == 1:
            self.open_requested.emit(runs[0])

    def _on_rename(self) -> None:
        runs = self.selected_runs()
        if len(runs) != 1:
            return
        r = self.model.row_for(runs[0])
        name = self.proxy.mapFromSource(self.model.index(r, COL["name"]))
        self.table.setCurrentIndex(name)  # the row stays selected, the name cell is the one edited
        self.table.edit(name)

    def confirm_delete(self, runs: list[Path]) -> bool:
        """Ask before moving runs to the trash (tests monkeypatch this)."""
        names = "\n".join(p.name for p in runs[:10]) + ("\n…" if len(runs) > 10 else "")
        answer = QMessageBox.question(
            self,
            "Delete runs?",
            f"Move {len(runs)} run(s) to {runs[0].parent / '.trash'}?\n\n{names}",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No,
        )
        return answer == QMessageBox.StandardButton.Yes

    def _on_delete(self) -> None:
        runs = [p for p in self.selected_runs() if not self._is_live(p)]
        if not runs or not self.confirm_delete(runs):
            return
        for path in runs:
            try:
                trash_run(path)
            except OSError as exc:
                self.error.emit(f"could not move {path.name} to the trash: {exc}")
        self.refresh()

    def _on_context_menu(self, pos: Any) -> None:
        menu = QMenu(self)
        for action in [self.action_open, *self.extra_actions, self.action_rename, self.action_delete]:
            menu.addAction(action)
        menu.popup(self.table.viewport().mapToGlobal(pos))
