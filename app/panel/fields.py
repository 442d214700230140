"""Config keys as widgets: each built from its field in core.config's table, and shown and read back.

A :class:`Bindings` maps "section.key" to the widget that shows it; it sets the
widgets from a Config and writes their values into a config dict, by the
widget's kind and the field's type. Values a widget cannot show exactly (a
spin box rounds) are kept from the loaded config unless the user changes them,
so Open then Save writes the same TOML.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QLineEdit,
    QSpinBox,
    QWidget,
)

from core.config import FIELDS, Config


def float_text(value: float) -> str:
    return repr(float(value))


def parse_number(text: str) -> Any:
    """A float from the text, or the text itself so the config error quotes what was typed."""
    try:
        value = float(text.strip())
    except ValueError:
        return text.strip()
    return value if math.isfinite(value) else text.strip()


def parse_list(text: str, kind: Callable[[str], Any]) -> Any:
    parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    try:
        return [kind(p) for p in parts]
    except ValueError:
        return text.strip()


def list_text(values: tuple[Any, ...]) -> str:
    return ", ".join(float_text(v) if isinstance(v, float) else str(v) for v in values)


def int_spin(key: str, name: str, tip: str | None = None) -> QSpinBox:
    """A spin box for the integer config key ("section.key"), with the engine's range and help."""
    f = FIELDS[key]
    assert f.bounds is not None, key
    w = QSpinBox(objectName=name)
    w.setRange(int(f.bounds.lo), int(min(f.bounds.hi, 2**31 - 1)))
    w.setGroupSeparatorShown(True)
    w.setToolTip(f.help if tip is None else tip)
    w.setStepType(QAbstractSpinBox.StepType.AdaptiveDecimalStepType)
    return w


def float_spin(key: str, decimals: int, step: float, name: str, tip: str | None = None) -> QDoubleSpinBox:
    """A spin box for the number config key ("section.key"), with the engine's range and help."""
    f = FIELDS[key]
    assert f.bounds is not None, key  # the keys shown this way have a closed range
    w = QDoubleSpinBox(objectName=name)
    w.setRange(f.bounds.lo, f.bounds.hi)
    w.setDecimals(decimals)
    w.setSingleStep(step)
    w.setToolTip(f.help if tip is None else tip)
    return w


def choice_combo(key: str, name: str, labels: Sequence[str] = ()) -> QComboBox:
    """A combo box of the key's choices (each item's data the choice), labelled or as they are."""
    combo = QComboBox(objectName=name)
    choices = FIELDS[key].choices
    for choice, label in zip(choices, list(labels) + list(choices[len(labels) :])):
        combo.addItem(label, choice)
    if FIELDS[key].help:
        combo.setToolTip(FIELDS[key].help)
    return combo


def line_edit(key: str, name: str) -> QLineEdit:
    edit = QLineEdit(objectName=name)
    if FIELDS[key].help:
        edit.setToolTip(FIELDS[key].help)
    return edit


def key_widget(
    key: str,
    name: str,
    *,
    labels: Sequence[str] = (),
    decimals: int | None = None,
    step: float = 1.0,
    tip: str | None = None,
) -> QWidget:
    """The widget for the config key ("section.key") from its field: a combo of its choices, a check box
    (its help the text), a spin box over its range (a number's only when ``decimals`` is given), or a line edit.
    """
    f = FIELDS.get(key)
    if f is None:
        raise ValueError(f"{key}: no such config key")
    if f.type == "choice":
        return choice_combo(key, name, labels)
    if f.type == "bool":
        return QCheckBox(f.help, objectName=name)
    if f.type == "int" and f.bounds is not None:
        return int_spin(key, name, tip)
    if f.type == "float" and f.bounds is not None and decimals is not None:
        return float_spin(key, decimals, step, name, tip)
    return line_edit(key, name)


def form_of(box: QWidget) -> QFormLayout:
    """The group's form, laid out as every group of the panel is."""
    form = QFormLayout(box)
    form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    form.setHorizontalSpacing(10)
    form.setVerticalSpacing(4)
    form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return form


def value_of(cfg: Config, key: str) -> Any:
    section, _, name = key.partition(".")
    return getattr(getattr(cfg, section), name)


class Bindings:
    """ "section.key" -> the widget that shows it; show a Config, take the widgets' values back."""

    def __init__(self, widgets: dict[str, QWidget] | None = None) -> None:
        self.widgets: dict[str, QWidget] = {}
        self._shown: dict[str, float] = {}  # spin values as displayed for the loaded config
        for key, w in (widgets or {}).items():
            self.bind(key, w)

    def _free(self, key: str) -> None:
        if key not in FIELDS:
            raise ValueError(f"{key}: no such config key")
        if key in self.widgets:
            raise ValueError(f"{key}: bound twice")

    def bind(self, key: str, widget: QWidget) -> None:
        """Show ``key`` in ``widget`` (ValueError naming the key when it is unknown or bound already)."""
        self._free(key)
        self.widgets[key] = widget

    def row(self, form: QFormLayout, key: str, label: str, widget: QWidget | None = None, **opts: Any) -> Any:
        """Add the form row ``label`` for ``key`` and bind it: ``widget``, or :func:`key_widget`'s with ``opts``."""
        self._free(key)
        w = key_widget(key, **opts) if widget is None else widget
        form.addRow(label, w)
        self.widgets[key] = w
        return w

    def show(self, cfg: Config) -> None:
        for key, w in self.widgets.items():
            value = value_of(cfg, key)
            if isinstance(w, QComboBox) and w.isEditable():  # text, offered from its items
                w.setCurrentText(str(value))
            elif isinstance(w, QComboBox):
                w.setCurrentIndex(w.findData(value))
            elif isinstance(w, QDoubleSpinBox):
                w.setValue(value)
                self._shown[key] = w.value()
            elif isinstance(w, QSpinBox):
                w.setValue(value)
            elif isinstance(w, QCheckBox):
                w.setChecked(value)
            elif isinstance(w, QLineEdit):
                w.setText(
                    list_text(value)
                    if isinstance(value, tuple)
                    else float_text(value)
                    if isinstance(value, float)
                    else str(value)
                )

    def take(self, raw: dict[str, dict[str, Any]]) -> None:
        """Write each widget's value into ``raw`` (validated by the caller's from_dict)."""
        for key, w in self.widgets.items():
            section, _, name = key.partition(".")
            kind = FIELDS[key].type
            if isinstance(w, QComboBox) and w.isEditable():
                raw[section][name] = w.currentText().strip()
            elif isinstance(w, QComboBox):
                raw[section][name] = w.currentData()
            elif isinstance(w, QDoubleSpinBox):
                if w.value() != self._shown.get(key):  # a spin box rounds: keep the loaded value unless moved
                    raw[section][name] = w.value()
            elif isinstance(w, QSpinBox):
                raw[section][name] = w.value()
            elif isinstance(w, QCheckBox):
                raw[section][name] = w.isChecked()
            elif isinstance(w, QLineEdit):
                text = w.text()
                raw[section][name] = (
                    parse_list(text, int)
                    if kind == "ints"
                    else parse_list(text, float)
                    if kind == "floats"
                    else parse_number(text)
                    if kind == "float"
                    else text.strip()
                )
