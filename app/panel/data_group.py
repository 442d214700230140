"""The config panel's Data group: the dataset picker, its preview, a table's columns and target.

``show_info`` renders what core.data's ``describe_source`` found (sample
images or rows, the columns of a table with a kind picker each, the task the
target implies); a kind picked writes ``data.columns`` (``column_overrides``).
A table's columns are listed before its target is known: the target is
picked from their names (an editable combo), and when the configured one is
not a column, the one core.data's ``propose_target`` names is proposed, and
said: a line under the target names the missing one and the table's columns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QSizePolicy,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QWidget,
)

from app.panel.fields import Bindings, form_of
from app.views.image_answer import to_pixmap
from core.config import FIELDS, Config
from core.services.data import BUILTIN_DATASETS, column_detail, propose_target

THUMB = 32  # preview thumbnail size in pixels
THUMBS_PER_ROW = 8  # what the panel's width holds
THUMB_ROWS = 3
TABLES = ("csv:", "parquet:")
COLUMN_ROWS = 10  # rows of the column list in view; more scroll inside it
NAME_WIDTH = 150  # the column list's name column at most (longer names elide; the tooltip has them whole)
LEVELS_IN_TIP = 200  # level names a tooltip lists at most
NAMES_IN_NOTE = 20  # column names the missing target's line lists at most (as the engine's error does)


def narrow_combo(combo: QComboBox, chars: int) -> QComboBox:
    """A combo whose width does not follow its items' text (a long file or column name would widen the panel)."""
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(chars)
    return combo


class DataGroup(QGroupBox):
    """[data]: where the samples come from and how they are split, read and shown."""

    browse_requested = Signal(str)  # "csv" | "npz" | "images"
    columns_changed = Signal()  # a column's kind was picked (data.columns changed)
    notice = Signal(str)  # what the group changed on its own (a target proposed), for the status bar

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Data", parent)
        self.editable = True  # the panel's mode allows edits (a run's settings are not edited here)
        self.loading = False  # the panel is showing a config: changes are not the user's
        self.target_named_for: str | None = None  # the source the target shown was named for (config, user)
        self.column_overrides: dict[str, str] = {}  # data.columns as the panel will write it
        self.text_encoder: tuple[str, bool] = ("", False)  # model.text_encoder, and whether it is fine-tuned
        self.proposed_target: tuple[str, str] | None = None  # (source, target) proposed for a missing one
        self.columns_of: str | None = None  # the source whose columns the list shows
        self.images: tuple[Any, ...] = ()  # the chosen data set's sample images, as described
        self.form = form = form_of(self)
        form.addRow("Dataset", self._build_picker())
        self.label_dataset_summary = QLabel(objectName="label_dataset_summary")
        self.label_dataset_summary.setWordWrap(True)
        form.addRow(self.label_dataset_summary)
        form.addRow(self._build_preview())
        form.addRow(self._build_columns())
        # the target: one of the table's columns, or typed (a config may name one before the file is read)
        self.combo_target = narrow_combo(QComboBox(objectName="combo_target"), 8)
        self.combo_target.setEditable(True)
        self.combo_target.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.combo_target.setToolTip(FIELDS["data.target"].help)
        self.combo_target.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.combo_target.currentTextChanged.connect(self._on_target_changed)
        self.bindings = b = Bindings()
        b.row(form, "data.target", "Target column", self.combo_target)
        self.label_target_task = QLabel(objectName="label_target_task")
        self.label_target_task.setWordWrap(True)
        self.label_target_task.setToolTip('The task the target implies (train.task = "auto")')
        form.addRow("", self.label_target_task)
        self.label_target_note = QLabel(objectName="label_target_note")
        self.label_target_note.setWordWrap(True)
        form.addRow("", self.label_target_note)
        self.spin_image_size = b.row(form, "data.image_size", "Image size", name="spin_image_size")
        self.spin_image_size.setSpecialValueText("original")
        self.spin_val_fraction = b.row(
            form, "data.val_fraction", "Validation share", name="spin_val_fraction", decimals=2, step=0.05
        )
        self.spin_loader_workers = b.row(form, "data.loader_workers", "Loader processes", name="spin_loader_workers")
        self.check_standardize = b.row(form, "data.standardize", "", name="check_standardize")

    def _build_picker(self) -> QHBoxLayout:
        self.combo_dataset = narrow_combo(QComboBox(objectName="combo_dataset"), 8)
        self.combo_dataset.setToolTip("A built-in dataset, or a CSV/NPZ file or image folder (…)")
        for name in BUILTIN_DATASETS:
            self.combo_dataset.addItem(name, f"builtin:{name}")
        self.combo_dataset.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        browse = QToolButton(objectName="button_browse_data")
        browse.setText("…")
        self.button_browse_data = browse
        browse.setToolTip("Use a CSV file, an NPZ file or a folder of images (one sub-folder per class)")
        browse.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(browse)
        menu.addAction("CSV file…", lambda: self.browse_requested.emit("csv"))
        menu.addAction("NPZ file…", lambda: self.browse_requested.emit("npz"))
        menu.addAction("Image folder…", lambda: self.browse_requested.emit("images"))
        menu.addSeparator()
        self.action_remove_source = menu.addAction("Remove this source from the list", self.remove_current_source)
        self.action_remove_source.setObjectName("action_remove_source")
        menu.aboutToShow.connect(
            lambda: self.action_remove_source.setEnabled(
                not str(self.combo_dataset.currentData() or "").startswith("builtin:")
            )
        )
        browse.setMenu(menu)
        row = QHBoxLayout()
        row.setSpacing(4)
        row.addWidget(self.combo_dataset, 1)
        row.addWidget(browse)
        self.combo_dataset.currentIndexChanged.connect(self._on_source_changed)
        return row

    def _build_preview(self) -> QStackedWidget:
        self.preview = QStackedWidget(objectName="preview")
        self.preview_images = QWidget(objectName="preview_images")
        self.thumbs_layout = QGridLayout(self.preview_images)  # rows of thumbnails: every class of ten
        self.thumbs_layout.setContentsMargins(0, 0, 0, 0)
        self.thumbs_layout.setSpacing(3)
        self.table_preview = QTableWidget(objectName="table_preview")
        self.table_preview.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table_preview.verticalHeader().hide()
        self.table_preview.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table_preview.setFixedHeight(118)
        self.preview.addWidget(self.preview_images)
        self.preview.addWidget(self.table_preview)
        return self.preview

    def _build_columns(self) -> QTableWidget:
        # A table's columns as the engine's schema sees them; the kind combo writes data.columns.
        self.table_columns = QTableWidget(0, 4, objectName="table_columns")
        self.table_columns.setHorizontalHeaderLabels(["Column", "Kind", "Missing", "Levels / why"])
        self.table_columns.horizontalHeaderItem(2).setToolTip("Missing cells (empty or a data.missing word)")
        self.table_columns.horizontalHeaderItem(3).setToolTip("A category's levels, or why a column is ignored")
        self.table_columns.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table_columns.verticalHeader().hide()
        self.table_columns.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        self.table_columns.verticalHeader().setDefaultSectionSize(QComboBox().sizeHint().height() + 2)
        header = self.table_columns.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        header.setMinimumSectionSize(40)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)  # elides at its end
        self.table_columns.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table_columns.setWordWrap(False)
        self._fit_column_rows(0)
        self.table_columns.setToolTip("Each column's kind as inferred; pick another to set it in data.columns")
        self.table_columns.hide()
        return self.table_columns

    # -- Config <-> widgets ------------------------------------------------------
    def show_config(self, cfg: Config) -> None:
        self.select_source(cfg.data.source)
        self.column_overrides = dict(cfg.data.columns)
        self.text_encoder = (cfg.model.text_encoder, cfg.model.finetune == "full")  # how text columns are read
        self.bindings.show(cfg)
        self.proposed_target = None
        # a config that names its target names it for its table; data.target's default names none
        named = cfg.data.target != FIELDS["data.target"].default
        self.target_named_for = cfg.data.source if named else None

    def take(self, raw: dict[str, dict[str, Any]]) -> None:
        d = raw["data"]
        d["source"] = self.combo_dataset.currentData()
        self.bindings.take(raw)
        d["columns"] = {k: v for k, v in self.column_overrides.items() if k != d["target"]}

    def summary(self) -> str:
        """The chosen data set's description as shown."""
        return self.label_dataset_summary.text()

    def update_visibility(self) -> None:
        source = str(self.combo_dataset.currentData() or "")
        table = source.startswith(TABLES)
        self.form.setRowVisible(self.combo_target, table)
        self.form.setRowVisible(self.label_target_task, table and bool(self.label_target_task.text()))
        self.form.setRowVisible(self.label_target_note, table and self._target_was_proposed())
        self.form.setRowVisible(self.table_columns, table and self.table_columns.rowCount() > 0)
        self.form.setRowVisible(self.spin_image_size, source.startswith("images:"))
        self.form.setRowVisible(self.spin_loader_workers, source.startswith("images:"))

    # -- the source picker ---------------------------------------------------------
    def select_source(self, source: str) -> None:
        index = self.combo_dataset.findData(source)
        if index < 0:
            self.add_source(source, select=False)
            index = self.combo_dataset.findData(source)
        self.combo_dataset.setCurrentIndex(index)

    def add_source(self, source: str, select: bool = True) -> None:
        """Add a csv:/npz:/images: source to the dataset picker (once)."""
        if self.combo_dataset.findData(source) < 0:
            scheme, _, rest = source.partition(":")
            self.combo_dataset.addItem(f"{Path(rest).name or rest} ({scheme})", source)
            self.combo_dataset.setItemData(self.combo_dataset.count() - 1, source, Qt.ItemDataRole.ToolTipRole)
        if select:
            self.combo_dataset.setCurrentIndex(self.combo_dataset.findData(source))

    def remove_current_source(self) -> None:
        """Drop a file/folder source from the picker (e.g. one that failed); built-in ones stay."""
        index = self.combo_dataset.currentIndex()
        if index < 0 or str(self.combo_dataset.itemData(index)).startswith("builtin:"):
            return
        self.combo_dataset.setCurrentIndex(0)
        self.combo_dataset.removeItem(index)

    def _on_source_changed(self, *_args: Any) -> None:
        self.proposed_target = None
        if not self.loading:
            self.column_overrides = {}  # another table's column names would not apply
            self.target_named_for = None  # the target shown was named for the table before, if for any
        self.set_target_choices(())  # nor would its names as targets (the typed target stays)

    def _on_target_changed(self, text: str) -> None:
        """The user's own target (typed or picked) is named for the table shown; a proposal or a config is not."""
        source = str(self.combo_dataset.currentData() or "")
        if not self.loading and self.proposed_target != (source, text.strip()):
            self.target_named_for = source

    def set_target_choices(self, names: tuple[str, ...]) -> None:
        """The target combo's items: the table's columns; the target shown (typed or loaded) is kept."""
        combo = self.combo_target
        if tuple(combo.itemText(i) for i in range(combo.count())) == tuple(names):
            return
        text = combo.currentText()
        with QSignalBlocker(combo):
            combo.clear()
            combo.addItems(list(names))
            combo.setCurrentText(text)

    def target(self) -> str:
        """The target column as shown (data.target's default when empty)."""
        return self.combo_target.currentText().strip() or FIELDS["data.target"].default

    def describe_key(self, task: str) -> tuple[Any, ...]:
        """What the description depends on: (source, target, image size, task, column kinds)."""
        source = str(self.combo_dataset.currentData() or "")
        target = self.target()
        columns: tuple[tuple[str, str], ...] = ()
        if source.startswith(TABLES):
            columns = tuple(sorted((k, v) for k, v in self.column_overrides.items() if k != target))
        return (source, target, self.spin_image_size.value(), task, columns)

    # -- what the description found -------------------------------------------------
    def show_info(self, info: Any, key: tuple[Any, ...]) -> None:
        text, listed = info.summary, f"; columns: {info.columns_summary}"
        if info.columns_summary and text.endswith(listed):
            text = text[: -len(listed)]  # the column list below shows each column
        self.label_dataset_summary.setText(text)
        self.clear_preview()
        self.show_columns(info, key)
        self.images = tuple(info.preview_images)
        if info.preview_images:
            shown = info.preview_images[: THUMBS_PER_ROW * THUMB_ROWS]  # one of each class first (the engine's)
            for i, (array, label) in enumerate(shown):
                thumb = QLabel()
                thumb.setPixmap(to_pixmap(array, THUMB))
                thumb.setToolTip(str(label))
                thumb.setFixedSize(THUMB, THUMB)
                self.thumbs_layout.addWidget(thumb, i // THUMBS_PER_ROW, i % THUMBS_PER_ROW)
            self.thumbs_layout.setColumnStretch(THUMBS_PER_ROW, 1)
            self.preview.setCurrentWidget(self.preview_images)
            rows = -(-len(shown) // THUMBS_PER_ROW)
            self.preview.setFixedHeight(rows * (THUMB + self.thumbs_layout.verticalSpacing()) + 2)
        elif info.preview_rows:
            self._show_rows(info)
        self.preview.setVisible(bool(info.preview_images or info.preview_rows))

    def _show_rows(self, info: Any) -> None:
        names = list(info.feature_names) or [f"x{i}" for i in range(len(info.preview_rows[0]) - 1)]
        shown = min(len(names), 6)
        table = str(self.combo_dataset.currentData() or "").startswith(TABLES)
        headers = names[:shown] + (["…"] if len(names) > shown else []) + [self.target() if table else "class"]
        self.table_preview.setColumnCount(len(headers))
        self.table_preview.setRowCount(len(info.preview_rows))
        self.table_preview.setHorizontalHeaderLabels(headers)
        for r, row in enumerate(info.preview_rows):
            cells = (
                [f"{v:.3g}" if isinstance(v, (int, float)) else str(v) for v in row[:shown]]
                + (["…"] if len(names) > shown else [])
                + [str(row[-1])]
            )  # a table's text cells as they are
            for c, text in enumerate(cells):
                self.table_preview.setItem(r, c, QTableWidgetItem(text))
        self.preview.setCurrentWidget(self.table_preview)
        self.preview.setFixedHeight(self.table_preview.height())

    def show_columns(self, info: Any, key: tuple[Any, ...]) -> None:
        """One row per table column from what describe_source found: a kind combo, missing cells, the levels'
        names (or why it is ignored); the table's columns as the target's choices; the task the target implies
        beside it. A table described before its target is known gets a target proposed (when editable)."""
        columns = list(((info.schema or {}).get("columns") or []) if info is not None else [])
        self.columns_of = key[0] if columns else None
        self.table_columns.setRowCount(0)
        self.table_columns.setRowCount(len(columns))
        for r, col in enumerate(columns):
            self._show_column_row(r, col)
        self._fit_column_rows(len(columns))
        self.form.setRowVisible(self.table_columns, bool(columns))
        if info is not None and info.table_columns:
            self.set_target_choices(tuple(info.table_columns))
        self.label_target_task.setText(self._task_text(info))
        self.form.setRowVisible(self.label_target_task, bool(self.label_target_task.text()))
        if (
            info is not None
            and info.needs_target
            and self.editable
            and not self.loading
            and self.target() not in info.table_columns
        ):
            proposed = propose_target(columns)
            if proposed:
                self._propose_target(key[0], proposed, tuple(info.table_columns))
        self.form.setRowVisible(self.label_target_note, self._target_was_proposed())

    def _propose_target(self, source: str, proposed: str, names: tuple[str, ...]) -> None:
        """Show ``proposed`` as the target, and say why: the target shown is not one of the table's columns. A
        target named for this table (a config's, the user's) is said to be missing; the default or the table
        before's is not worth a warning."""
        missing, table = self.target(), Path(source.partition(":")[2]).name
        if self.target_named_for == source:
            listed = ", ".join(names[:NAMES_IN_NOTE]) + (", …" if len(names) > NAMES_IN_NOTE else "")
            self.label_target_note.setText(
                f"⚠ target column {missing!r} is not in {table} (its columns: {listed}); {proposed!r} is proposed: "
                "pick another above if it is not the column to predict"
            )
            said = f"Target set to {proposed!r}: {table} has no column {missing!r}"
        else:
            self.label_target_note.setText(
                f"{proposed!r} is proposed as the column to predict: pick another above if it is not"
            )
            said = f"Target set to {proposed!r}, proposed for {table}"
        self.proposed_target = (source, proposed)
        self.combo_target.setCurrentText(proposed)  # the panel describes the table again, for it
        self.notice.emit(said)

    def _target_was_proposed(self) -> bool:
        """The target shown is the one proposed for this table (the user has not picked another since)."""
        source = str(self.combo_dataset.currentData() or "")
        return self.proposed_target == (source, self.combo_target.currentText().strip())

    def _show_column_row(self, r: int, col: dict[str, Any]) -> None:
        name, kind = str(col["name"]), str(col["kind"])
        item = QTableWidgetItem(name)
        item.setToolTip(name)
        self.table_columns.setItem(r, 0, item)
        combo = QComboBox(objectName=f"combo_column_kind_{r}")
        orders = ("datetime:dmy", "datetime:mdy")  # offered where they mean something: a date column
        combo.addItems([k for k in FIELDS["data.columns"].choices if kind == "datetime" or k not in orders])
        combo.setCurrentText(
            kind if kind != "datetime" or name not in self.column_overrides else self.column_overrides[name]
        )
        combo.setProperty("column", name)
        combo.setToolTip("set in data.columns" if name in self.column_overrides else "inferred")
        combo.setEnabled(self.editable)  # a run's settings, shown or running, are not edited here
        combo.currentTextChanged.connect(lambda k, n=name: self._on_column_kind(n, k))
        self.table_columns.setCellWidget(r, 1, combo)
        self.table_columns.setItem(r, 2, QTableWidgetItem(str(int(col.get("missing", 0)))))
        levels = [str(v) for v in col.get("levels", [])] if kind == "category" else []
        if kind == "category":
            detail = f"{len(levels)}: {', '.join(levels)}"
            more = f", … ({len(levels) - LEVELS_IN_TIP} more)" if len(levels) > LEVELS_IN_TIP else ""
            tip = f"{len(levels)} levels: {', '.join(levels[:LEVELS_IN_TIP])}{more}"
        elif kind in ("datetime", "text"):
            tip = column_detail(col, *self.text_encoder)
            detail = tip.partition(":")[0]  # "free text", "dates, year first": the rest in its tooltip
        else:
            detail = tip = str(col.get("reason", "")) if kind == "ignore" else ""
        item = QTableWidgetItem(detail)
        item.setToolTip(tip)
        self.table_columns.setItem(r, 3, item)

    def _fit_column_rows(self, rows: int) -> None:
        """The list shows up to COLUMN_ROWS rows (more scroll inside it); its name column at most NAME_WIDTH."""
        t = self.table_columns
        if rows:
            t.resizeColumnToContents(0)
            t.setColumnWidth(0, min(t.columnWidth(0), NAME_WIDTH))
        shown = max(1, min(rows, COLUMN_ROWS))
        height = (
            t.horizontalHeader().sizeHint().height()
            + shown * t.verticalHeader().defaultSectionSize()
            + 2 * t.frameWidth()
        )
        t.setFixedHeight(height)

    def _task_text(self, info: Any) -> str:
        if info is None or info.schema is None:
            return ""
        if info.needs_target:  # the columns alone: the target is not one, or the summary says what failed
            return "" if self.target() in info.table_columns else "pick the target column: the column to predict"
        if info.task == "regression":
            why = next((m for _lvl, m in info.notes if m.startswith("task: ")), "")
            reason = why.partition("(")[2].rstrip(")") if "(" in why else ""
            return "regression" + (f": {reason}" if reason else "")
        return f"classification: {info.num_classes} classes"

    def column_kinds(self) -> dict[str, str]:
        """Each listed column's kind as its combo shows it."""
        out = {}
        for r in range(self.table_columns.rowCount()):
            combo = self.table_columns.cellWidget(r, 1)
            out[str(combo.property("column"))] = combo.currentText()
        return out

    def _on_column_kind(self, name: str, kind: str) -> None:
        if self.loading or not self.editable:
            return
        self.column_overrides[name] = kind
        self.columns_changed.emit()

    def clear_preview(self) -> None:
        self.images = ()
        while self.thumbs_layout.count():
            item = self.thumbs_layout.takeAt(0)
            thumb = item.widget() if item is not None else None
            if thumb is not None:
                thumb.deleteLater()
        self.table_preview.clear()
        self.table_preview.setRowCount(0)
        self.preview.hide()
