"""Plot text that fits: titles elided to their plot's width, tick labels short enough not to run together."""

from __future__ import annotations

import math
import os
from collections import Counter
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics

TITLE_SIZE = "10pt"


def set_fitting_title(item: pg.PlotItem, title: str) -> None:
    """Give ``item`` a title that is elided ("Validation acc…") whenever its plot is narrower than the text;
    the whole title is its tooltip (``full_title``)."""
    label = item.titleLabel
    if not getattr(item, "fits_title", False):  # a title set again (a new run's) keeps the one connection
        item.getViewBox().sigResized.connect(lambda _vb, it=item: fit_title(it))
        item.fits_title = True
        # The whole title's width, which pyqtgraph makes the label's minimum at each setText (a theme's
        # colours too), would widen the plot's layout past its widget and cut the plot: it is elided instead.
        claim = label.updateMin

        def update_min() -> None:
            claim()
            label.setMinimumWidth(0)

        setattr(label, "updateMin", update_min)  # noqa: B010 - an instance's method, replaced for this label only
    label.setToolTip(title)
    item.setTitle(title, size=TITLE_SIZE)
    fit_title(item)


def full_title(item: pg.PlotItem) -> str:
    """The whole title ``set_fitting_title`` gave ``item`` (its tooltip), however much of it is shown;
    "" for a plot without one."""
    return str(item.titleLabel.toolTip())


def fit_title(item: pg.PlotItem) -> None:
    title = full_title(item)
    if not title:
        return
    font = QFont(item.titleLabel.item.font())
    font.setPointSizeF(float(TITLE_SIZE.removesuffix("pt")))
    # The title is centred over the view box: it may reach over the axis a little, as far on the other side.
    box = item.getViewBox().geometry()
    side = min(20.0, box.left(), item.width() - box.right())
    room = int(box.width() + 2 * max(0.0, side))
    shown = QFontMetrics(font).elidedText(title, Qt.TextElideMode.ElideRight, max(room, 20))
    if shown != item.titleLabel.text:
        item.titleLabel.setText(shown, **{k: v for k, v in item.titleLabel.opts.items() if k in ("color", "size")})


def shown_title(item: pg.PlotItem) -> str:
    """The title as drawn now (tests)."""
    return str(item.titleLabel.text)


MIN_TICK_PX = 45  # a bottom axis's labelled ticks are at least this far apart
MIN_WHOLE_TICK_PX = 30  # ... or this far, for whole numbers under 1000 (epochs: labels of a digit or three)


class CompactAxis(pg.AxisItem):
    """A bottom axis whose labels do not run together: large values read 2k, 40k, 1.2M (and zero 0), and in a
    narrow plot the labelled ticks thin out to at least MIN_TICK_PX apart (pyqtgraph spaces them for wider
    plots). Its label is what the plot says, never with pyqtgraph's automatic "(x0.001)": the tick labels
    carry the scale, so the label's text does not change with the range (a label that shrinks could leave
    the end of its longer text behind). ``whole``: the values are counts (epochs), ticked at whole numbers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.enableAutoSIPrefix(False)
        self.whole = False

    def set_whole(self, whole: bool) -> None:
        if whole != self.whole:
            self.whole = whole
            self.picture = None  # the ticks are drawn again
            self.update()

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> Any:
        levels = super().tickSpacing(minVal, maxVal, size)
        span = abs(maxVal - minVal)
        if not levels or size <= 0 or span <= 0 or self.logMode:
            return levels
        apart = MIN_TICK_PX
        if self.whole:  # no tick between two epochs: ticks at whole steps, 1 at the finest
            levels = [(max(1.0, round(float(s))), 0.0) for s, _o in levels if float(s) >= 1.0] or [(1.0, 0.0)]
            if max(abs(minVal), abs(maxVal)) < 1000:
                apart = MIN_WHOLE_TICK_PX
        major = float(levels[0][0])
        if span / major * apart <= size:
            return levels
        while span / major * apart > size:  # the next step of 1, 2, 5 x 10^n
            scale = 10.0 ** math.floor(math.log10(major) + 1e-9)
            major = next(m * scale for m in (2.0, 5.0, 10.0) if m * scale > major * (1 + 1e-9))
        return [(major, 0.0)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        top = max((abs(v * scale) for v in values), default=0.0)
        if self.logMode:
            return super().tickStrings(values, scale, spacing)
        if top < 10_000:
            if self.whole:
                return [f"{v * scale:.0f}" for v in values]
            return [
                _zero_reads_zero(t, v, spacing) for t, v in zip(super().tickStrings(values, scale, spacing), values)
            ]
        unit, suffix = (1e6, "M") if top >= 1e6 else (1e3, "k")
        step = spacing * scale / unit
        digits = max(0, -int(math.floor(math.log10(step)))) if step > 0 else 0
        return [_zero_reads_zero(f"{v * scale / unit:.{digits}f}{suffix}", v, spacing) for v in values]


def _zero_reads_zero(text: str, value: float, spacing: float) -> str:
    """A tick at zero reads 0 (not 0k, -0 or 0.00)."""
    return "0" if abs(value) < 1e-6 * abs(spacing or 1.0) else text


def compact_axis(**kwargs: Any) -> CompactAxis:
    return CompactAxis(orientation="bottom", **kwargs)


def short_name(name: str, limit: int = 24) -> str:
    """A run's name for a legend: its start and end (the time stamp and what it is) when it is long."""
    if len(name) <= limit:
        return name
    head = (limit - 1) // 2
    return f"{name[:head]}…{name[-(limit - 1 - head) :]}"


def distinct_names(names: list[str], limit: int = 24) -> list[str]:
    """Legend names for runs, at most ``limit`` characters each and no two alike.

    A name is shortened as :func:`short_name` does, unless that makes it read
    like another's (two runs started in the same hour: ``20261202-04…-hogwild-mlp``);
    then what those names share at their start is left out up to the word where
    they differ (``…041530-hogwild-mlp``), and names still alike are numbered.
    """
    shown = [short_name(n, limit) for n in names]
    for text in set(shown):
        same = [i for i, t in enumerate(shown) if t == text]
        if len(same) < 2:
            continue
        group = [names[i] for i in same]
        shared = len(os.path.commonprefix(group))
        cut = max(group[0].rfind(sep, 0, shared) for sep in "-_ .") + 1  # the start of the word that differs
        for i in same:
            rest = names[i][cut:]
            text_i = ("…" if cut else "") + rest
            shown[i] = text_i if len(text_i) <= limit else text_i[: limit - 1] + "…"
    counts = Counter(shown)
    seen: Counter[str] = Counter()
    for i, text in enumerate(shown):
        if counts[text] > 1:
            seen[text] += 1
            suffix = f" ({seen[text]})"
            shown[i] = (text if len(text) + len(suffix) <= limit else text[: limit - len(suffix) - 1] + "…") + suffix
    return shown


def table_height(table: Any, rows: int) -> int:
    """The height that shows the header, ``rows`` rows and a horizontal scroll bar of a QTableView."""
    row = table.verticalHeader().defaultSectionSize()
    # a header without labels yet hints at less than it will take
    header = max(table.horizontalHeader().sizeHint().height(), table.fontMetrics().height() + 8)
    bar = table.horizontalScrollBar().sizeHint().height()
    return header + rows * row + bar + 2 * table.frameWidth() + 2


def keep_rows(table: Any, rows: int) -> None:
    """Rows as tall as their text needs (the style's default is a third taller), and never fewer than ``rows``
    of them in view however short the window: a short window keeps a table readable."""
    table.verticalHeader().setDefaultSectionSize(table.fontMetrics().height() + 8)
    table.setMinimumHeight(table_height(table, rows))
