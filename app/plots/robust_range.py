"""A y range that the plot's curves set together, not one diverged curve (no Qt: testable with arrays).

One trial of a search that diverges reaches a loss of 1e11; fitted to every
point, the axis squeezes every other curve into a flat line at the bottom.
Here each curve is judged by its highest value: a curve whose peak is far
above the others' (past a fence of the median peak plus FENCE scaled median
absolute deviations, in decades when the values are positive, and at least
MIN_DECADES above the median) does not set the top of the axis; it is drawn
off the top past it. The median and its deviation hold for a few curves (four
trials, one diverged), and a single curve, or curves that agree, keep the
range of all their points.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

FENCE = 5.0  # robust standard deviations (1.4826 x MAD) above the median peak
MIN_DECADES = 1.0  # the fence is at least this far above the median peak (peaks that agree have no spread)
MIN_CURVES = 3  # fewer curves than this cannot say which of them is far out


def robust_range(arrays: Iterable[np.ndarray], log_values: bool = False) -> tuple[float, float] | None:
    """(lowest value, highest peak within the fence) of the curves' finite values; None when no curve is
    far out, or too few curves to tell.

    ``log_values``: the values are already log10 (a log axis); otherwise positive data is judged in
    decades and anything else linearly.
    """
    finite = [a[np.isfinite(a)] for a in (np.asarray(x, dtype=np.float64).ravel() for x in arrays)]
    finite = [a for a in finite if a.size]
    if len(finite) < MIN_CURVES:
        return None
    peaks = np.array([a.max() for a in finite])
    low = float(min(a.min() for a in finite))
    decades = not log_values and low > 0
    v = np.log10(peaks) if decades else peaks
    median = float(np.median(v))
    reach = FENCE * 1.4826 * float(np.median(np.abs(v - median)))
    if decades or log_values:
        reach = max(reach, MIN_DECADES)
    elif reach <= 0:
        return None
    within = peaks[v <= median + reach]
    if len(within) == len(peaks):
        return None
    return low, float(within.max())
