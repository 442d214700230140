"""Light and dark themes: a Fusion palette, a style sheet and matching plot colours."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

RESOURCES = Path(__file__).resolve().parents[2] / "resources"
THEMES = ("light", "dark")


@dataclass(frozen=True)
class PlotColors:
    """The plots' colours in a theme (pyqtgraph draws its own background and text)."""

    background: str = "#ffffff"
    foreground: str = "#333333"
    legend_background: str = "#ffffffd0"


@dataclass(frozen=True)
class Theme:
    name: str
    window: str
    base: str
    alt_base: str
    text: str
    muted: str
    button: str
    highlight: str
    border: str
    icon: str  # colour the bundled SVG icons are drawn in
    error: str
    warning: str
    plot: PlotColors


LIGHT = Theme(
    name="light",
    window="#f4f5f7",
    base="#ffffff",
    alt_base="#f0f2f5",
    text="#1f2328",
    muted="#646c76",
    button="#ffffff",
    highlight="#2f6fde",
    border="#c9ced6",
    icon="#3a4350",
    error="#c62828",
    warning="#b26a00",
    plot=PlotColors(background="#ffffff", foreground="#3a4350", legend_background="#ffffffd8"),
)
DARK = Theme(
    name="dark",
    window="#1e2127",
    base="#262a31",
    alt_base="#2c3038",
    text="#e6e8eb",
    muted="#9aa3ad",
    button="#30353d",
    highlight="#4c8dff",
    border="#3d434d",
    icon="#d5d9df",
    error="#ff6b6b",
    warning="#ffb454",
    plot=PlotColors(background="#1b1e23", foreground="#c9ced6", legend_background="#1b1e23d8"),
)


def get_theme(name: str) -> Theme:
    return DARK if name == "dark" else LIGHT


def _palette(t: Theme) -> QPalette:
    p = QPalette()
    role = QPalette.ColorRole
    for r, c in (
        (role.Window, t.window),
        (role.WindowText, t.text),
        (role.Base, t.base),
        (role.AlternateBase, t.alt_base),
        (role.Text, t.text),
        (role.Button, t.button),
        (role.ButtonText, t.text),
        (role.ToolTipBase, t.base),
        (role.ToolTipText, t.text),
        (role.Highlight, t.highlight),
        (role.HighlightedText, "#ffffff"),
        (role.PlaceholderText, t.muted),
        (role.Link, t.highlight),
        (role.Mid, t.border),
        (role.Dark, t.border),
        (role.Light, t.base),
        (role.Midlight, t.alt_base),
    ):
        p.setColor(r, QColor(c))
    disabled = QPalette.ColorGroup.Disabled
    for r in (role.WindowText, role.Text, role.ButtonText):
        p.setColor(disabled, r, QColor(t.muted))
    return p


def style_sheet(t: Theme) -> str:
    """The bundled style sheet with this theme's colours filled in ({name} placeholders)."""
    path = RESOURCES / "style" / "app.qss"
    try:
        template = path.read_text(encoding="utf-8")
    except OSError:
        return ""  # running from an install without resources: the palette alone still works
    values = {k: v for k, v in vars(t).items() if isinstance(v, str)}
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


def apply_theme(app: QApplication, name: str) -> Theme:
    t = get_theme(name)
    app.setStyle("Fusion")  # the same look on every platform, and it honours the palette
    app.setPalette(_palette(t))
    app.setStyleSheet(style_sheet(t))
    # Plots made from now on (a dialog's, a view built later) start in the theme's colours.
    pg.setConfigOptions(background=t.plot.background, foreground=t.plot.foreground)
    return t


def style_plot_widget(widget: pg.PlotWidget | pg.GraphicsLayoutWidget, colors: PlotColors) -> None:
    """Give an existing plot widget the theme's colours: background, axes, title and legend."""
    widget.setBackground(colors.background)
    for item in widget.scene().items():
        if isinstance(item, pg.PlotItem):
            for name in ("left", "bottom"):
                axis = item.getAxis(name)
                axis.setPen(colors.foreground)
                axis.setTextPen(colors.foreground)
            if item.titleLabel.text:
                item.titleLabel.setText(item.titleLabel.text, color=colors.foreground)
        elif isinstance(item, pg.LegendItem):
            item.setLabelTextColor(colors.foreground)
            item.setBrush(pg.mkBrush(colors.legend_background))
            for _sample, label in item.items:
                label.setText(label.text, color=colors.foreground)
