"""The config panel's Data group: the dataset picker, its preview, a table's columns and target.

``show_info`` renders what core.data's ``describe_source`` found (sample
images or rows, the columns of a table with a kind picker each, the task the
target implies); a kind picked writes ``data.columns`` (``column_overrides``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QGroupBox, QHBoxLayout, QHeaderView, QLabel, QMenu, QSizePolicy, QStackedWidget,
    QTableWidget, QTableWidgetItem, QToolButton, QWidget,
)

from app.config_fields import Bindings, float_spin, form_of, int_spin, line_edit
from core.config import FIELDS, Config
from core.data import BUILTIN_DATASETS

THUMB = 32  # preview thumbnail size in pixels
TABLES = ("csv:", "parquet:")


class DataGroup(QGroupBox):
    """[data]: where the samples come from and how they are split, read and shown."""

    browse_requested = Signal(str)  # "csv" | "npz" | "images"
    columns_changed = Signal()      # a column's kind was picked (data.columns changed)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Data", parent)
        self.editable = True  # the panel's mode allows edits (a run's settings are not edited here)
        self.loading = False  # the panel is showing a config: changes are not the user's
        self.column_overrides: dict[str, str] = {}  # data.columns as the panel will write it
        self.columns_of: tuple[str, str] | None = None  # (source, target) the column list shows
        self.images: tuple[Any, ...] = ()  # the chosen data set's sample images, as described
        self.form = form = form_of(self)
        form.addRow("Dataset", self._build_picker())
        self.label_dataset_summary = QLabel(objectName="label_dataset_summary")
        self.label_dataset_summary.setWordWrap(True)
        form.addRow(self.label_dataset_summary)
        form.addRow(self._build_preview())
        form.addRow(self._build_columns())
        self.edit_target = line_edit("data.target", "edit_target")
        self.label_target_task = QLabel(objectName="label_target_task")
        self.label_target_task.setToolTip("The task the target implies (train.task = \"auto\")")
        target_row = QHBoxLayout()
        target_row.setSpacing(6)
        target_row.addWidget(self.edit_target, 1)
        target_row.addWidget(self.label_target_task)
        self.target_row = QWidget()
        self.target_row.setLayout(target_row)
        target_row.setContentsMargins(0, 0, 0, 0)
        form.addRow("Target column", self.target_row)
        self.spin_image_size = int_spin("data.image_size", "spin_image_size")
        self.spin_image_size.setSpecialValueText("original")
        form.addRow("Image size", self.spin_image_size)
        self.spin_val_fraction = float_spin("data.val_fraction", 2, 0.05, "spin_val_fraction")
        form.addRow("Validation share", self.spin_val_fraction)
        self.spin_loader_workers = int_spin("data.loader_workers", "spin_loader_workers")
        form.addRow("Loader processes", self.spin_loader_workers)
        self.check_standardize = QCheckBox(FIELDS["data.standardize"].help, objectName="check_standardize")
        form.addRow("", self.check_standardize)
        self.bindings = Bindings({"data.target": self.edit_target, "data.image_size": self.spin_image_size,
                                  "data.val_fraction": self.spin_val_fraction,
                                  "data.loader_workers": self.spin_loader_workers,
                                  "data.standardize": self.check_standardize})

    def _build_picker(self) -> QHBoxLayout:
        self.combo_dataset = QComboBox(objectName="combo_dataset")
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
        menu.aboutToShow.connect(lambda: self.action_remove_source.setEnabled(
            not str(self.combo_dataset.currentData() or "").startswith("builtin:")))
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
        self.thumbs_layout = QHBoxLayout(self.preview_images)
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
        self.table_columns.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table_columns.verticalHeader().hide()
        self.table_columns.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table_columns.horizontalHeader().setStretchLastSection(True)
        self.table_columns.setFixedHeight(140)
        self.table_columns.setToolTip("Each column's kind as inferred; pick another to set it in data.columns")
        self.table_columns.hide()
        return self.table_columns

    # -- Config <-> widgets ------------------------------------------------------
    def show_config(self, cfg: Config) -> None:
        self.select_source(cfg.data.source)
        self.column_overrides = dict(cfg.data.columns)
        self.bindings.show(cfg)

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
        self.form.setRowVisible(self.target_row, table)
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
        if not self.loading:
            self.column_overrides = {}  # another table's column names would not apply

    def describe_key(self, task: str) -> tuple[Any, ...]:
        """What the description depends on: (source, target, image size, task, column kinds)."""
        source = str(self.combo_dataset.currentData() or "")
        target = self.edit_target.text().strip() or "label"
        columns: tuple[tuple[str, str], ...] = ()
        if source.startswith(TABLES):
            columns = tuple(sorted((k, v) for k, v in self.column_overrides.items() if k != target))
        return (source, target, self.spin_image_size.value(), task, columns)

    # -- what the description found -------------------------------------------------
    def show_info(self, info: Any, key: tuple[Any, ...]) -> None:
        text, listed = info.summary, f"; columns: {info.columns_summary}"
        if info.columns_summary and text.endswith(listed):
            text = text[:-len(listed)]  # the column list below shows each column
        self.label_dataset_summary.setText(text)
        self.clear_preview()
        self.show_columns(info, key)
        self.images = tuple(info.preview_images)
        if info.preview_images:
            for array, label in info.preview_images[:8]:
                thumb = QLabel()
                thumb.setPixmap(_pixmap(array, THUMB))
                thumb.setToolTip(str(label))
                thumb.setFixedSize(THUMB, THUMB)
                self.thumbs_layout.addWidget(thumb)
            self.thumbs_layout.addStretch(1)
            self.preview.setCurrentWidget(self.preview_images)
            self.preview.setFixedHeight(THUMB + 2)
        elif info.preview_rows:
            self._show_rows(info)
        self.preview.setVisible(bool(info.preview_images or info.preview_rows))

    def _show_rows(self, info: Any) -> None:
        names = list(info.feature_names) or [f"x{i}" for i in range(len(info.preview_rows[0]) - 1)]
        shown = min(len(names), 6)
        headers = names[:shown] + (["…"] if len(names) > shown else []) + ["class"]
        self.table_preview.setColumnCount(len(headers))
        self.table_preview.setRowCount(len(info.preview_rows))
        self.table_preview.setHorizontalHeaderLabels(headers)
        for r, row in enumerate(info.preview_rows):
            cells = [f"{v:.3g}" if isinstance(v, (int, float)) else str(v) for v in row[:shown]] \
                + (["…"] if len(names) > shown else []) + [str(row[-1])]  # a table's text cells as they are
            for c, text in enumerate(cells):
                self.table_preview.setItem(r, c, QTableWidgetItem(text))
        self.preview.setCurrentWidget(self.table_preview)
        self.preview.setFixedHeight(self.table_preview.height())

    def show_columns(self, info: Any, key: tuple[Any, ...]) -> None:
        """One row per table column from the schema describe_source fitted: a kind combo, missing cells,
        levels (or why it is ignored); and the task the target implies beside the target chooser."""
        columns = list(((info.schema or {}).get("columns") or []) if info is not None else [])
        self.columns_of = key[:2] if columns else None
        self.table_columns.setRowCount(0)
        self.table_columns.setRowCount(len(columns))
        for r, col in enumerate(columns):
            name, kind = str(col["name"]), str(col["kind"])
            self.table_columns.setItem(r, 0, QTableWidgetItem(name))
            combo = QComboBox(objectName=f"combo_column_kind_{r}")
            combo.addItems(list(FIELDS["data.columns"].choices))
            combo.setCurrentText(kind)
            combo.setProperty("column", name)
            combo.setToolTip("set in data.columns" if name in self.column_overrides else "inferred")
            combo.setEnabled(self.editable)  # a run's settings, shown or running, are not edited here
            combo.currentTextChanged.connect(lambda k, n=name: self._on_column_kind(n, k))
            self.table_columns.setCellWidget(r, 1, combo)
            self.table_columns.setItem(r, 2, QTableWidgetItem(str(int(col.get("missing", 0)))))
            if kind == "category":
                detail = str(len(col.get("levels", [])))
            else:
                detail = str(col.get("reason", "")) if kind == "ignore" else ""
            self.table_columns.setItem(r, 3, QTableWidgetItem(detail))
        self.form.setRowVisible(self.table_columns, bool(columns))
        if info is None or info.schema is None:
            self.label_target_task.setText("")
        elif info.task == "regression":
            why = next((m for _lvl, m in info.notes if m.startswith("task: ")), "")
            reason = why.partition("(")[2].rstrip(")") if "(" in why else ""
            self.label_target_task.setText("regression" + (f": {reason}" if reason else ""))
        else:
            self.label_target_task.setText(f"classification: {info.num_classes} classes")

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
            if item.widget() is not None:
                item.widget().deleteLater()
        self.table_preview.clear()
        self.table_preview.setRowCount(0)
        self.preview.hide()


def _pixmap(array: np.ndarray, size: int) -> QPixmap:
    a = np.ascontiguousarray(array, dtype=np.uint8)
    if a.ndim == 2:
        image = QImage(a.data, a.shape[1], a.shape[0], a.strides[0], QImage.Format.Format_Grayscale8)
    else:
        image = QImage(a.data, a.shape[1], a.shape[0], a.strides[0], QImage.Format.Format_RGB888)
    # Small images (digits are 8x8) stay crisp scaled up without smoothing.
    return QPixmap.fromImage(image.copy()).scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio,
                                                  Qt.TransformationMode.FastTransformation)
