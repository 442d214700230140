"""The Serve tab's try-it form: fields built from a server's ``/openapi.json``, the body they make, the answer.

A table model's description carries ``x-traindesk`` (its task, target and raw
columns, each with its kind, levels and an example): the form then has a
combo per category column (its levels and "(missing)", editable so an unseen
value can be typed), a true/false/(missing) combo per bool column, a
number field per number column, a text box per free-text column and a date
field per date column (each empty: missing), pre-filled with the example, and sends ``{"rows": [{column: value or null}]}``. Other models keep
a field per named input (``rows``) or one field of comma-separated values
(``inputs``); an image model (its description offers ``images``) takes image files, chosen
(``button_serve_pick_images``) or dropped on the form, sent as ``{"images": [base64, ...]}``.
:func:`curl_line` is the shell line that sends the same body;
:func:`answer_text` says what came back (the class and its probabilities, or
the value).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSize, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.shell.elided_label import ElidedLabel
from app.views.image_answer import IMAGE_FILTER, FileDrops, image_base64, image_files, image_pixmap
from core.services.inputs import FALSE_WORDS, TRUE_WORDS

MISSING = "(missing)"
FIELD_CHARS = 8  # a field's width at least, in characters; fields grow with the form
LABEL_SHARE = 0.45  # a column's name takes at most this share of the form's width (then elides)
SHOWN_CLASSES = 10  # probabilities listed in the answer at most
ICON_PX = 32  # a chosen image's icon in the form's list


@dataclass(frozen=True)
class FormField:
    """One field of the form: a raw column (``number``, ``category``, ``bool``, ``text``, ``datetime``), a named
    input (``value``),
    a sample's comma-separated values (``values``) or image files (``images``, ``example``: what they must be)."""

    name: str
    kind: str
    levels: tuple[str, ...] = ()
    example: Any = None


def form_fields(spec: dict[str, Any]) -> tuple[list[FormField], dict[str, Any] | None]:
    """The fields a server's OpenAPI description asks for, and its ``x-traindesk`` (None without one)."""
    table = spec.get("x-traindesk")
    if isinstance(table, dict) and table.get("columns"):
        rows = (table.get("example") or {}).get("rows") or [{}]
        example_row = rows[0] if rows and isinstance(rows[0], dict) else {}
        fields = []
        for col in table["columns"]:
            name, kind = str(col["name"]), str(col.get("kind", "number"))
            example = col["example"] if "example" in col else example_row.get(name)
            fields.append(
                FormField(
                    name,
                    kind if kind in ("number", "category", "bool", "text", "datetime") else "number",
                    tuple(str(v) for v in col.get("levels") or ()),
                    example,
                )
            )
        return fields, table
    choices = spec["components"]["schemas"]["PredictRequest"]["oneOf"]
    images = next((c for c in choices if "images" in c["properties"]), None)
    if images is not None:
        return [FormField("images", "images", example=str(images["properties"]["images"].get("description", "")))], None
    rows_choice = next((c for c in choices if "rows" in c["properties"]), None)
    if rows_choice is not None:
        names = rows_choice["properties"]["rows"]["items"]["properties"]
        return [FormField(str(n), "value", example=0) for n in names], None
    inputs = next(c for c in choices if "inputs" in c["properties"])
    return [FormField(str(inputs["properties"]["inputs"].get("description", "values")), "values")], None


def _bool_text(value: Any) -> str:
    if value is None:
        return MISSING
    word = str(value).strip().lower()
    return "true" if word in TRUE_WORDS or word == "1" else "false" if word in FALSE_WORDS or word == "0" else MISSING


def _number_text(value: Any) -> str:
    if value is None or value == "":
        return ""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _number(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text  # sent as it is: the server names what is wrong with it


class TryItForm(QWidget):
    """The fields of one model's request; ``changed`` whenever the body they make changes."""

    changed = Signal()
    picked = Signal()  # image files were chosen or dropped (an image model's form)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("form_serve")
        self.form = QFormLayout(self)
        self.form.setContentsMargins(2, 2, 2, 2)
        self.form.setVerticalSpacing(3)
        self.form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)  # long names elide: one line a field
        self.specs: list[FormField] = []
        self.fields: list[tuple[str, QWidget]] = []  # (column or input name, its widget); "" for a values list
        self.table: dict[str, Any] | None = None  # x-traindesk, for a table model
        self.images: list[Path] = []  # an image model's chosen files, sent in this order
        self.list_images: QListWidget | None = None
        self.drops = FileDrops(self)
        self.drops.active = False
        self.drops.watch(self)
        self.drops.dropped.connect(self.add_images)

    @property
    def takes_images(self) -> bool:
        return bool(self.specs) and self.specs[0].kind == "images"

    def clear(self) -> None:
        while self.form.rowCount():
            self.form.removeRow(0)
        self.specs, self.fields, self.table = [], [], None
        self.images, self.list_images = [], None
        self.drops.active = False

    def build(self, spec: dict[str, Any]) -> None:
        """The fields of the model this OpenAPI description is of."""
        self.clear()
        self.specs, self.table = form_fields(spec)
        if self.takes_images:
            self._build_images(self.specs[0])
            self.changed.emit()
            return
        for f in self.specs:
            widget = self._widget(f)
            widget.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
            label = ElidedLabel(f.name if f.kind != "values" else "values (comma-separated)")
            label.setMaximumWidth(self._label_width())
            label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)  # centred on its field
            self.form.addRow(label, widget)
            self.fields.append((f.name if f.kind != "values" else "", widget))
        self.changed.emit()

    def _build_images(self, f: FormField) -> None:
        box = QWidget(objectName="images_serve")
        pick = QPushButton("Choose images…", objectName="button_serve_pick_images")
        pick.setToolTip(f"Image files to send: {f.example}; or drop them here")
        pick.clicked.connect(self._on_pick_images)
        hint = ElidedLabel(f"or drop them here ({f.example})", objectName="label_serve_images_hint")
        self.list_images = QListWidget(objectName="list_serve_images")
        self.list_images.setAccessibleName("images to send")
        self.list_images.setIconSize(QSize(ICON_PX, ICON_PX))
        self.list_images.setFlow(QListWidget.Flow.LeftToRight)
        self.list_images.setWrapping(False)
        self.list_images.setFixedHeight(ICON_PX + 16)  # one row of icons, names beside them
        row = QHBoxLayout()  # one row: the tab's height goes to the answer, not to a hint over its button
        row.addWidget(pick)
        row.addWidget(hint, 1)
        layout = QVBoxLayout(box)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.list_images)
        self.form.addRow(box)
        self.fields.append(("images", box))
        self.drops.active = True

    def images_height(self) -> int:
        """An image form's height: its button and its row of icons (read from their hints, which hold before
        the new rows are first shown)."""
        box = self.fields[0][1] if self.takes_images else None
        margins = self.form.contentsMargins()
        return (box.sizeHint().height() if box is not None else 0) + margins.top() + margins.bottom()

    def _on_pick_images(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, "Images to send", "", IMAGE_FILTER)
        if files:
            self.set_images([Path(p) for p in files])

    def add_images(self, paths: list[Path]) -> None:
        """Images dropped (files, or a folder's images): they are what is sent next."""
        if self.takes_images:
            self.set_images(image_files(paths))

    def set_images(self, files: list[Path]) -> None:
        """The image files to send; ``picked`` follows when there are some."""
        if not self.takes_images or self.list_images is None:
            return
        self.images = list(files)
        self.list_images.clear()
        for p in self.images:
            pixmap = image_pixmap(p, ICON_PX)
            item = QListWidgetItem(QIcon(pixmap) if pixmap is not None else QIcon(), p.name)
            item.setToolTip(str(p))
            self.list_images.addItem(item)
        if self.images:
            self.list_images.setCurrentRow(0)
        self.changed.emit()
        if self.images:
            self.picked.emit()

    def _label_width(self) -> int:
        """LABEL_SHARE of the form, or more where the fields keep FIELD_CHARS characters beside it: a column's
        name ("flipper_length_mm") whole rather than elided while there is room."""
        field = self.fontMetrics().averageCharWidth() * FIELD_CHARS + 40  # a combo's arrow and frame
        rest = self.width() - field - self.form.horizontalSpacing() - 4
        return max(60, int(self.width() * LABEL_SHARE), rest)

    def resizeEvent(self, event: Any) -> None:
        super().resizeEvent(event)
        for r in range(self.form.rowCount()):
            item = self.form.itemAt(r, QFormLayout.ItemRole.LabelRole)
            label = item.widget() if item is not None else None
            if label is not None:
                label.setMaximumWidth(self._label_width())

    def _widget(self, f: FormField) -> QWidget:
        if f.kind in ("category", "bool"):
            combo = QComboBox(objectName=f"combo_serve_field_{f.name}")
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(FIELD_CHARS)
            if f.kind == "bool":
                combo.addItems(["true", "false", MISSING])
                combo.setCurrentText(_bool_text(f.example))
                combo.setToolTip(f"{f.name}: true, false or missing")
                combo.currentTextChanged.connect(self.changed)
                return combo
            combo.setEditable(True)  # a value training did not see may be typed: the server counts it as unseen
            combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
            combo.addItems([*f.levels, MISSING])
            combo.setCurrentText(MISSING if f.example is None else str(f.example))
            combo.setToolTip(f"{f.name}: one of {len(f.levels)} levels, another value (unseen) or {MISSING}")
            combo.currentTextChanged.connect(self.changed)
            return combo
        if f.kind == "text":
            box = QPlainTextEdit("" if f.example is None else str(f.example), objectName=f"text_serve_field_{f.name}")
            box.setPlaceholderText(MISSING)
            box.setToolTip(f"{f.name}: free text; empty is a missing cell")
            box.setFixedHeight(box.fontMetrics().lineSpacing() * 3 + 12)  # three lines, then it scrolls
            box.textChanged.connect(self.changed)
            return box
        if f.kind == "values":
            edit = QLineEdit(objectName="edit_serve_field_inputs", placeholderText=f.name)
        elif f.kind == "datetime":
            edit = QLineEdit("" if f.example is None else str(f.example), objectName=f"edit_serve_field_{f.name}")
            edit.setPlaceholderText(MISSING)
            edit.setToolTip(f"{f.name}: a date, written as the training table writes them; empty is a missing cell")
        else:
            text = _number_text(f.example) if f.kind == "number" else "0"
            edit = QLineEdit(text, objectName=f"edit_serve_field_{f.name}")
            if f.kind == "number":
                edit.setPlaceholderText(MISSING)
                edit.setToolTip(f"{f.name}: a number; empty is a missing cell")
        edit.setMinimumWidth(edit.fontMetrics().averageCharWidth() * FIELD_CHARS)
        edit.textChanged.connect(self.changed)
        return edit

    def title(self) -> str:
        """What the form predicts, in a line ("" for a model without x-traindesk)."""
        if self.table is None:
            return ""
        task, target = self.table.get("task", ""), self.table.get("target", "")
        return f"{target} ({task}) from {len(self.specs)} columns; empty or {MISSING}: a missing cell"

    def body(self) -> dict[str, Any]:
        """The request the fields make."""
        if not self.fields:
            return {"inputs": [[]]}
        if self.takes_images:
            return {"images": [image_base64(p) for p in self.images]}
        if self.fields[0][0] == "":
            edit = self.fields[0][1]
            assert isinstance(edit, QLineEdit)
            return {"inputs": [[_number(v.strip()) for v in edit.text().split(",") if v.strip()]]}
        row: dict[str, Any] = {}
        for f, (name, widget) in zip(self.specs, self.fields):
            if isinstance(widget, QComboBox):
                text = widget.currentText().strip()
                if text in ("", MISSING):
                    row[name] = None
                else:
                    row[name] = (text == "true") if f.kind == "bool" else text
            elif isinstance(widget, QPlainTextEdit):
                text = widget.toPlainText().strip()
                row[name] = text or None
            else:
                assert isinstance(widget, QLineEdit)
                text = widget.text().strip()
                if f.kind == "datetime":
                    row[name] = text or None
                else:
                    row[name] = None if text == "" and f.kind == "number" else _number(text)
        return {"rows": [row]}


def curl_line(url: str, body: dict[str, Any]) -> str:
    """The shell line that sends ``body`` to ``url``'s /predict (quoted for a POSIX shell)."""
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return f"curl -s {url or 'http://HOST:PORT'}/predict -H 'Content-Type: application/json' -d {shlex.quote(data)}"


def image_curl_line(url: str, files: list[Path]) -> str:
    """The shell line that sends ``files`` as ``{"images": [...]}``, each read by ``base64`` when it runs
    (a PNG or JPEG; the line stays short whatever the images' sizes)."""
    parts = ",".join(f'"\'"$(base64 -w0 {shlex.quote(str(p))})"\'"' for p in files)
    return (
        f"curl -s {url or 'http://HOST:PORT'}/predict -H 'Content-Type: application/json' -d '{{\"images\":[{parts}]}}'"
    )


def answer_text(status: int, data: bytes) -> str:
    """What a /predict answer says: the class and its probabilities, or the value; else the error."""
    try:
        obj = json.loads(data)
    except ValueError:
        return f"HTTP {status}\n{data.decode(errors='replace')}"
    lines = [f"HTTP {status}"]
    predictions = obj.get("predictions") if isinstance(obj, dict) else None
    if status == 200 and isinstance(predictions, list):
        for p in predictions:
            if "value" in p:
                lines.append(f"value: {float(p['value']):.6g}")
                continue
            lines.append(f"class: {p.get('class')}")
            ranked = sorted((p.get("probabilities") or {}).items(), key=lambda kv: -float(kv[1]))
            lines += [f"  {name}  {float(prob):.3f}" for name, prob in ranked[:SHOWN_CLASSES]]
            if len(ranked) > SHOWN_CLASSES:
                lines.append(f"  … {len(ranked) - SHOWN_CLASSES} more")
        if obj.get("model_version"):
            lines.append(f"model version {obj['model_version']}")
        return "\n".join(lines)
    error = obj.get("error") if isinstance(obj, dict) else None
    lines.append(str(error) if error else json.dumps(obj, indent=1))
    return "\n".join(lines)
