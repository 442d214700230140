"""How the plots' axes behave: a log axis that stays readable, a live range that holds still.

Both are pyqtgraph items the plot widgets (app.plots.base) are built from; no run data here.
"""

from __future__ import annotations

import math
from typing import Any

import pyqtgraph as pg

from app.plots.robust_range import robust_range


class ValueAxis(pg.AxisItem):
    """A left axis whose log scale stays readable when the values span little.

    pyqtgraph labels log axes by powers of ten and, under a few decades, labels
    every minor tick (2..9 x 10^n) at the top level: eight labels on top of each
    other in a small plot, or a single label when the data spans less than one
    minor step (a validation loss from 0.10 to 0.12). Here: under one decade,
    ordinary linear ticks placed on the log axis; under a few, 1, 2 and 5 x 10^n
    first, the other minor ticks labelled only where they fit.
    """

    _linear_labels = False

    def logTickValues(self, minVal: float, maxVal: float, size: float, stdTicks: Any) -> Any:
        self._linear_labels = maxVal - minVal < 1.0
        if self._linear_labels:
            lo, hi = 10.0**minVal, 10.0**maxVal
            levels = []
            for spacing, offset in self.tickSpacing(lo, hi, size):
                first = math.ceil((lo - offset) / spacing) * spacing + offset
                values = [first + i * spacing for i in range(int((hi - first) / spacing) + 1)]
                levels.append((None, [math.log10(v) for v in values if v > 0]))
            return levels
        levels = super().logTickValues(minVal, maxVal, size, stdTicks)
        if levels and levels[0][0] is None:
            minor = levels[0][1]
            major = [v for v in minor if round(10 ** (v - math.floor(v))) in (1, 2, 5)]
            return [(None, major), (None, [v for v in minor if v not in major])]
        return levels

    def logTickStrings(self, values: Any, scale: float, spacing: Any) -> list[str]:
        if self._linear_labels:
            return [f"{10.0**v * scale:.3g}" for v in values]
        return super().logTickStrings(values, scale, spacing)


class LiveViewBox(pg.ViewBox):
    """A ViewBox whose auto-range, while a run is live, leaves headroom and then holds still.

    pyqtgraph's auto-range fits the data at every frame, so a growing curve
    moves both axes every frame, and each move regenerates the axes' ticks and
    clips every curve again: most of what a live frame costs. While ``live``,
    the bounds auto-range fits are held until the data leaves them (or fills
    less than half of them), then taken again with headroom: X_HEADROOM past
    the last x, Y_HEADROOM of the span on both sides of y. The axes move a few
    dozen times in a run instead of every frame. Zooming or panning by hand
    turns auto-range off as usual; a finished run is fitted tightly.
    """

    X_HEADROOM = 0.25
    Y_HEADROOM = 0.08

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.live = False
        self.robust_y = False  # a far-out curve (a diverged trial) does not set the y range (robust_range)
        self._held: list[list[float] | None] = [None, None]

    def set_live(self, live: bool) -> None:
        self.live = live
        self._held = [None, None]
        self.queueUpdateAutoRange()

    def childrenBounds(self, frac: Any = None, orthoRange: Any = (None, None), items: Any = None) -> Any:
        bounds = super().childrenBounds(frac=frac, orthoRange=orthoRange, items=items)
        if self.robust_y and bounds[1] is not None:
            curves = [i for i in self.addedItems if isinstance(i, pg.PlotDataItem) and i.isVisible()]
            fit = robust_range(
                (c.getData()[1] for c in curves if c.yData is not None and len(c.yData)),
                log_values=any(c.opts["logMode"][1] for c in curves),
            )
            if fit is not None:  # the pens' padding of the full range would be far too wide as well
                span = fit[1] - fit[0]
                bounds[1] = [fit[0] - 0.02 * span, fit[1] + 0.05 * span]
        if not self.live:
            return bounds
        # a little room below x too: the bounds include the pens' pixel padding, which grows with the range
        for ax, headroom in ((0, (0.02, self.X_HEADROOM)), (1, (self.Y_HEADROOM, self.Y_HEADROOM))):
            if bounds[ax] is None:
                self._held[ax] = None
                continue
            lo, hi = (float(v) for v in bounds[ax])
            held = self._held[ax]
            if held is None or lo < held[0] or hi > held[1] or hi - lo < 0.5 * (held[1] - held[0]):
                span = hi - lo or abs(hi) or 1.0
                held = self._held[ax] = [lo - headroom[0] * span, hi + headroom[1] * span]
            bounds[ax] = list(held)
        return bounds
