"""The class-score tables the Evaluate and Predict views share: a confusion matrix heat map and a
per-class precision/recall/F1/support table, filled from ``core.training.scores``'s figures.

``ConfusionTable(objectName=...)``: ``show_matrix(classes, confusion)`` colours each cell by its
share of the true class (small classes stay visible) with the theme's palette, also right after a
theme change. ``PerClassTable(objectName=...)``: ``show_classes(per_class)``; it sorts by any
column, classes in the model's class order (2 before 10), numbers by value.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QAbstractItemView, QApplication, QHeaderView, QTableWidget, QTableWidgetItem, QWidget

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
PER_CLASS_COLUMNS = ["class", "precision", "recall", "F1", "support"]


def heat_color(fraction: float, base: QColor, hot: QColor) -> QColor:
    """Blend from ``base`` (0) to ``hot`` (1)."""
    f = min(1.0, max(0.0, fraction))
    return QColor(
        round(base.red() + (hot.red() - base.red()) * f),
        round(base.green() + (hot.green() - base.green()) * f),
        round(base.blue() + (hot.blue() - base.blue()) * f),
    )


class _SortItem(QTableWidgetItem):
    def __lt__(self, other: QTableWidgetItem) -> bool:
        a, b = self.data(SORT_ROLE), other.data(SORT_ROLE)
        if a is None or b is None:
            return super().__lt__(other)
        return bool(a < b)


class ConfusionTable(QTableWidget):
    """Rows: true class, columns: predicted class."""

    def __init__(self, parent: QWidget | None = None, objectName: str = "") -> None:
        super().__init__(parent)
        self.setObjectName(objectName)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setToolTip("rows: true class, columns: predicted class")

    def show_matrix(self, classes: list[str], cm: list[list[int]]) -> None:
        self.clear()
        self.setRowCount(len(classes))
        self.setColumnCount(len(classes))
        self.setHorizontalHeaderLabels([f"→ {c}" for c in classes])
        self.setVerticalHeaderLabels(classes)
        palette = QApplication.palette()  # the theme's, also right after a theme change
        base = palette.base().color()
        hot = palette.highlight().color()
        light_text, dark_text = QColor("#ffffff"), palette.text().color()
        for i, row in enumerate(cm):
            total = sum(row) or 1
            for j, count in enumerate(row):
                fraction = count / total  # colour by share of the true class: small classes stay visible
                item = QTableWidgetItem(str(count))
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                item.setBackground(QBrush(heat_color(fraction, base, hot)))
                item.setForeground(QBrush(light_text if fraction > 0.5 else dark_text))
                item.setToolTip(f"true {classes[i]}, predicted {classes[j]}: {count} ({fraction:.0%} of {classes[i]})")
                self.setItem(i, j, item)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)


class PerClassTable(QTableWidget):
    """One row per class: precision, recall, F1 and support."""

    def __init__(self, parent: QWidget | None = None, objectName: str = "") -> None:
        super().__init__(0, len(PER_CLASS_COLUMNS), parent)
        self.setObjectName(objectName)
        self.setHorizontalHeaderLabels(PER_CLASS_COLUMNS)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.verticalHeader().setVisible(False)
        self.setSortingEnabled(True)

    def show_classes(self, per_class: list[dict[str, Any]]) -> None:
        self.setSortingEnabled(False)  # filling a sorted table reorders rows under our feet
        self.setRowCount(len(per_class))
        for i, c in enumerate(per_class):
            cells = [c["class"], c["precision"], c["recall"], c["f1"], c["support"]]
            for j, value in enumerate(cells):
                item = _SortItem()
                if isinstance(value, float):
                    item.setData(Qt.ItemDataRole.DisplayRole, round(value, 4))
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                else:
                    item.setData(Qt.ItemDataRole.DisplayRole, value)
                # classes sort in the model's class order (2 before 10), numbers by value
                item.setData(SORT_ROLE, i if j == 0 else value)
                self.setItem(i, j, item)
        self.setSortingEnabled(True)
        self.sortByColumn(0, Qt.SortOrder.AscendingOrder)  # the arrow shows what the rows are in
        self.resizeColumnsToContents()
