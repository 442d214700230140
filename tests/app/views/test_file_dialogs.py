"""The window's Open dialogs offer what the registries read: the predict view's inputs from the input
registry (core.readers.inputs), the model files of both views from the formats registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QPushButton

from app.views.predict import PredictView
from app.views.serve import ServeView
from core.readers import INPUT_FILTERS, INPUT_KINDS
from core.services.formats import RUNNABLE_SUFFIXES
from core.services.formats.description import SIDECAR


def _filter_of(qtbot: Any, monkeypatch: pytest.MonkeyPatch, view: Any, button: str) -> str:
    """The filter the dialog that ``button`` opens is given (the dialog answers as if cancelled)."""
    asked: list[str] = []

    def open_file(parent: Any, title: str, start: str, filters: str) -> tuple[str, str]:
        asked.append(filters)
        return "", ""

    monkeypatch.setattr(QFileDialog, "getOpenFileName", open_file)
    found = view.findChild(QPushButton, button)
    assert found is not None, button
    qtbot.mouseClick(found, Qt.MouseButton.LeftButton)
    assert len(asked) == 1
    return asked[0]


def test_predict_dialog_offers_every_input_kind(qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    view = PredictView()
    qtbot.addWidget(view)
    offered = _filter_of(qtbot, monkeypatch, view, "button_predict_input_file")
    assert offered == INPUT_FILTERS
    filters = offered.split(";;")
    for kind in INPUT_KINDS:
        if kind.suffixes:  # an image folder has its own button
            assert kind.file_filter in filters and all(f"*{s}" in filters[0] for s in kind.suffixes)
    assert "*.parquet" in filters[0] and "*.jsonl" in filters[0]
    assert view.edit_input.text() == ""  # cancelled: nothing chosen


@pytest.mark.parametrize(
    ("view_class", "button"),
    [(PredictView, "button_predict_model_browse"), (ServeView, "button_serve_browse_file")],
)
def test_model_dialogs_offer_every_runnable_format(
    qtbot: Any, monkeypatch: pytest.MonkeyPatch, view_class: Any, button: str, tmp_path: Path
) -> None:
    view = view_class()
    qtbot.addWidget(view)
    offered = _filter_of(qtbot, monkeypatch, view, button)
    patterns = offered[offered.index("(") + 1 : offered.rindex(")")].split()
    assert patterns == [f"*{s}" for s in RUNNABLE_SUFFIXES] + [SIDECAR]
