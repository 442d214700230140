"""The window reads well: plots follow the theme, searches draw one curve per trial, small windows fit."""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QColor

from app.lr_finder_view import LRFinderDialog
from core.config import Config


def _lightness(widget: Any) -> int:
    return QColor(widget.backgroundBrush().color()).lightness()


def test_lr_finder_and_search_plots_follow_the_theme(make_window: Any, qtbot: Any) -> None:
    window = make_window()
    assert window._theme.name == "light"
    search_plot = window.search_view.plot_search_parallel
    assert _lightness(search_plot) > 200
    dialog = LRFinderDialog(Config(), window)  # made after the theme: starts in its colours
    qtbot.addWidget(dialog)
    window.lr_finder = dialog
    assert _lightness(dialog.plot_lr_finder) > 200
    axis = dialog.plot_lr_finder.getPlotItem().getAxis("bottom")
    assert QColor(axis.textPen().color()).lightness() < 120  # dark text on the light background
    window.action_dark.trigger()
    try:
        assert _lightness(search_plot) < 60 and _lightness(dialog.plot_lr_finder) < 60
        assert QColor(axis.textPen().color()).lightness() > 150
    finally:
        window.action_dark.trigger()
    assert _lightness(search_plot) > 200
