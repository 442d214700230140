"""The Runs view: every run of the runs directory in a sortable, filterable table (``table_runs``).

A model/view table: ``RunsTableModel`` holds ``RunRow``s, a
``QSortFilterProxyModel`` sorts (by the raw values, not the text) and filters
(any column). A double-click anywhere on a row opens its run; name, tags and
notes are edited in place (F2, or Rename… in the context menu) and saved to the
run's ``notes.json``. The folder is scanned on a background thread, on demand and
every few seconds while the view is visible, so a live run's row follows it.
Import TensorBoard logs… (``button_import_tensorboard``) makes another tool's logs (a Lightning
``lightning_logs`` folder) read-only runs of the folder, off the GUI thread, and selects them.

The MLflow column links each mirrored run to its page (a click opens it in the browser); Mirror to MLflow sends
the selected past runs to the window's tracking URI (``mlflow_uri``, the Settings dialog's) on a background
thread (``core.services.tracking.mirror_run``), then scans again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QItemSelectionModel,
    QModelIndex,
    Qt,
    QTimer,
    QUrl,
    Signal,
)
from PySide6.QtGui import QAction, QDesktopServices
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QMessageBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.shell.tasks import BackgroundCalls
from app.viewmodels.run_index import RunIndex, RunRow, trash_run
from app.views.runs.table import (
    COL,
    COLUMNS,
    LINK_ROLE,
    MAX_COLUMN_WIDTH,
    REFRESH_MS,
    RunsDelegate,
    RunsFilter,
    RunsTable,
    RunsTableModel,
)
from core.errors import INPUT_ERRORS
from core.services.runs.imported import ImportedRun
from core.services.runs.imported import import_tensorboard as import_logs
from core.services.tracking import MirrorError, mirror_run

MIRROR_CALL = "mirror-runs"


def mirror_runs(runs: list[Path], uri: str) -> list[tuple[Path, str]]:
    """Send each run to ``uri`` (off the GUI thread): the runs and why each that failed did ("" for none)."""
    out = []
    for run in runs:
        try:
            mirror_run(run, uri)
        except MirrorError as exc:
            out.append((run, str(exc)))
        else:
            out.append((run, ""))
    return out


class RunsView(QWidget):
    """The runs table with a filter box and the actions that work on the selected runs."""

    open_requested = Signal(object)  # Path of the run to open
    error = Signal(str)
    selection_changed = Signal()
    scanned = Signal()  # the table took a new scan of the folder
    edited = Signal(object)  # the RunRow whose name, tags or notes the user changed
    deleted = Signal(list)  # the Paths of the runs moved to the trash
    imported = Signal(list)  # the Paths of the runs that TensorBoard logs were imported as (or had been)
    import_failed = Signal(str)  # why an import of TensorBoard logs imported nothing (one line)
    notice = Signal(str)  # what an import or a mirror did, for the status bar and the log

    def __init__(
        self,
        actions: list[QAction] | None = None,
        parent: QWidget | None = None,
        menu_actions: list[QAction] | None = None,
    ) -> None:
        """``actions``: the window's actions on the selected runs, as buttons and in the context menu;
        ``menu_actions``: in the context menu only (a button more would squeeze the filter at 900 px)."""
        super().__init__(parent)
        self.setObjectName("runs_view")
        self.index: RunIndex | None = None
        self.active: Callable[[], set[Path]] = lambda: set()
        self.mlflow_uri: Callable[[], str] = lambda: ""  # where Mirror to MLflow sends runs (the window's setting)
        self._calls = BackgroundCalls(self)
        self._pending_refresh = False
        self._select_next: list[Path] = []  # runs to select once the next scan lists them (imported ones)
        self.model = RunsTableModel(self)
        self.model.edit_failed.connect(self.error)
        self.model.edited.connect(self.edited)
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
        self.table.clicked.connect(self._on_clicked)
        self.table.setMouseTracking(True)  # the hand cursor over an MLflow link
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
        self.action_mirror = QAction("Mirror to MLflow", self, objectName="action_runs_mirror")
        self.action_mirror.setToolTip(
            "Send the selected runs to the MLflow tracking URI of File → Settings… (what each has not sent yet)"
        )
        self.action_mirror.triggered.connect(self._on_mirror)
        self.action_refresh = QAction("Refresh", self, objectName="action_runs_refresh")
        self.action_refresh.triggered.connect(self.refresh)
        self.action_import_tensorboard = QAction(
            "Import TensorBoard logs…", self, objectName="action_import_tensorboard"
        )
        self.action_import_tensorboard.setToolTip(
            "Import another tool's TensorBoard logs (a Lightning lightning_logs folder, or one version_N of it) as "
            "read-only runs, to compare them with TrainDesk's"
        )
        self.action_import_tensorboard.setIconText("Import…")  # the button's: the whole name would crowd 900 px
        self.action_import_tensorboard.triggered.connect(self.ask_import_tensorboard)
        self.extra_actions = list(actions or [])
        self.menu_actions = list(menu_actions or [])

        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.edit_filter, 1)
        for action in [
            self.action_open,
            *self.extra_actions,
            self.action_rename,
            self.action_delete,
            self.action_refresh,
        ]:  # Mirror to MLflow is in the table's menu: a button more would squeeze the filter at 900 px
            button = QToolButton()
            button.setDefaultAction(action)
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
            bar.addWidget(button)
        self.button_import_tensorboard = QToolButton(objectName="button_import_tensorboard")
        self.button_import_tensorboard.setDefaultAction(self.action_import_tensorboard)
        self.button_import_tensorboard.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        bar.addWidget(self.button_import_tensorboard)
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
        index, active, prefer = self.index, self.active(), self.mlflow_uri()
        self._calls.call(
            lambda: index.scan(active, prefer),
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
        chosen = [p for p in selected if self.model.row_for(p) >= 0]
        if self._select_next and all(self.model.row_for(p) >= 0 for p in self._select_next):
            chosen, self._select_next = self._select_next, []  # imported runs, once a scan lists them all
        self.select_runs(chosen, clear=True)
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
        self.action_mirror.setEnabled(
            n >= 1 and not any(self._is_live(p) for p in self.selected_runs()) and not self._calls.running(MIRROR_CALL)
        )

    def _is_live(self, path: Path) -> bool:
        r = self.model.row_for(path)
        return r >= 0 and self.model.rows[r].status == "running"

    # -- actions -----------------------------------------------------------------------------
    def _on_double_clicked(self, index: QModelIndex) -> None:
        row = self.proxy.mapToSource(index).row()
        if 0 <= row < len(self.model.rows):
            self.open_requested.emit(self.model.rows[row].path)

    def _on_clicked(self, index: QModelIndex) -> None:
        link = index.data(LINK_ROLE)
        if link:
            self.open_link(str(link))

    def open_link(self, url: str) -> None:
        """Open a run's MLflow page in the browser."""
        if not QDesktopServices.openUrl(QUrl(url)):
            self.error.emit(f"could not open {url}: no browser answered")

    def _on_mirror(self) -> None:
        runs = [p for p in self.selected_runs() if not self._is_live(p)]
        uri = self.mlflow_uri()
        if not runs or self._calls.running(MIRROR_CALL):
            return
        if not uri:
            self.error.emit("Mirror to MLflow: set an MLflow tracking URI in File → Settings… first")
            return
        self.notice.emit(f"mirroring {len(runs)} run(s) to {uri}…")
        self._calls.call(
            lambda: mirror_runs(runs, uri),
            lambda done: self._on_mirrored(uri, done),
            lambda exc: self._on_mirror_failed(uri, exc),
            name=MIRROR_CALL,
        )
        self._update_actions()

    def _on_mirrored(self, uri: str, done: list[tuple[Path, str]]) -> None:
        failed = [(run, why) for run, why in done if why]
        sent = len(done) - len(failed)
        if sent:
            self.notice.emit(f"mirrored {sent} run(s) to {uri}")
        if len(failed) == 1:
            self.error.emit(f"could not mirror {failed[0][0].name}: {failed[0][1]}")
        elif failed:
            self.error.emit(f"could not mirror {len(failed)} of {len(done)} runs; {failed[0][0].name}: {failed[0][1]}")
        self._update_actions()
        self.refresh()

    def _on_mirror_failed(self, uri: str, exc: BaseException) -> None:
        self.error.emit(f"could not mirror to {uri}: {type(exc).__name__}: {exc}")
        self._update_actions()
        self.refresh()

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
        gone = []
        for path in runs:
            try:
                trash_run(path)
                gone.append(path)
            except OSError as exc:
                self.error.emit(f"could not move {path.name} to the trash: {exc}")
        if gone:
            self.deleted.emit(gone)
        self.refresh()

    # -- importing another tool's logs --------------------------------------------------------
    def ask_import_tensorboard(self) -> None:
        """Choose a folder of TensorBoard logs and import it (tests call ``import_tensorboard`` with one)."""
        start = self.index.runs_dir.resolve().parent if self.index is not None else Path.cwd()
        folder = QFileDialog.getExistingDirectory(self, "Import TensorBoard logs", str(start))
        if folder:
            self.import_tensorboard(folder)

    def import_tensorboard(self, folder: Path | str) -> None:
        """Import the logs under ``folder`` into the runs folder (a background thread); the runs they are get
        selected, the status bar says what was done, ``import_failed`` why nothing was."""
        if self.index is None or self._calls.running("import-tensorboard"):
            return
        runs_dir = self.index.runs_dir
        self._calls.call(
            lambda: import_logs(folder, runs_dir),
            self._on_imported,
            lambda exc: self.import_failed.emit(
                " ".join(str(exc).split()) if isinstance(exc, INPUT_ERRORS) else f"could not import {folder}: {exc}"
            ),
            name="import-tensorboard",
        )

    def _on_imported(self, found: list[ImportedRun]) -> None:
        runs = [f.run_dir for f in found if f.run_dir is not None]
        new = [f for f in found if f.run_dir is not None and not f.already]
        parts = [f"imported {len(new)} run(s) from TensorBoard logs"] if new else []
        parts += [
            f"{f.source.name} was imported already, as {f.run_dir.name}" for f in found if f.already and f.run_dir
        ]
        parts += [f"skipped {f.source.name}: {f.skipped}" for f in found if f.run_dir is None]
        self.notice.emit("; ".join(parts))
        self._select_next = runs
        self.refresh()
        self.imported.emit(runs)

    def _on_context_menu(self, pos: Any) -> None:
        menu = QMenu(self)
        for action in [
            self.action_open,
            *self.extra_actions,
            *self.menu_actions,
            self.action_rename,
            self.action_delete,
            self.action_mirror,
        ]:
            menu.addAction(action)
        menu.popup(self.table.viewport().mapToGlobal(pos))
