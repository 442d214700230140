"""Growable numpy columns for live curves (no Qt here, so it is cheap to test).

Plots must never hold Python lists of points or grow without bound: a
:class:`Series` keeps preallocated columns that double when full and, past
``max_points``, halves itself by keeping every other row, so a week-long run
still fits in memory while the whole history stays visible.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Literal

import numpy as np

DEFAULT_MAX_POINTS = 2_000_000


class Series:
    """Rows of ``ncols`` float64 values in one preallocated array."""

    def __init__(self, ncols: int, capacity: int = 256, max_points: int = DEFAULT_MAX_POINTS) -> None:
        if max_points < 4:
            raise ValueError("max_points must be at least 4")
        self._data = np.empty((max(4, capacity), ncols), dtype=np.float64)
        self._n = 0
        self.max_points = max_points
        self.compactions = 0

    def __len__(self) -> int:
        return self._n

    @property
    def capacity(self) -> int:
        return self._data.shape[0]

    @property
    def ncols(self) -> int:
        return self._data.shape[1]

    def clear(self) -> None:
        self._n = 0

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` rows (a curve's last points about to be drawn again)."""
        self._n = max(0, min(self._n, n))

    def trailing(self, i: int) -> int:
        """How many rows at the end have a finite value in column ``i`` (a curve since its last break)."""
        col = self._data[: self._n, i]
        bad = np.flatnonzero(~np.isfinite(col))
        return self._n - (int(bad[-1]) + 1 if bad.size else 0)

    def column(self, i: int) -> np.ndarray:
        """A view of the filled part of column ``i`` (valid until the next append)."""
        return self._data[: self._n, i]

    def rows(self) -> np.ndarray:
        return self._data[: self._n]

    def last(self, i: int) -> float:
        return float(self._data[self._n - 1, i]) if self._n else math.nan

    def append(self, rows: np.ndarray | Sequence[Sequence[float]]) -> None:
        block = np.asarray(rows, dtype=np.float64).reshape(-1, self.ncols)
        k = block.shape[0]
        if k == 0:
            return
        while self._n + k > self.max_points and self._n >= 2:
            self._halve()
        if self._n + k > self.max_points:  # one block larger than the cap: keep its tail
            block = block[-(self.max_points - self._n) :]
            k = block.shape[0]
        if self._n + k > self.capacity:
            new_cap = self.capacity
            while new_cap < self._n + k:
                new_cap *= 2
            grown = np.empty((min(new_cap, self.max_points), self.ncols), dtype=np.float64)
            grown[: self._n] = self._data[: self._n]
            self._data = grown
        self._data[self._n : self._n + k] = block
        self._n += k

    def _halve(self) -> None:
        # Keep every other row, and always the newest one so curves end where the data ends.
        keep = self._data[: self._n : 2].copy()
        if (self._n - 1) % 2:
            keep = np.vstack([keep, self._data[self._n - 1 : self._n]])
        self._data[: keep.shape[0]] = keep
        self._n = keep.shape[0]
        self.compactions += 1


def flat_range(values: np.ndarray, rel: float = 1e-9) -> tuple[float, float] | None:
    """A y range around a series that does not vary (an axis auto-ranged on it would read -0.5..0.5).

    None when the finite values vary, or there are none: auto-ranging shows them well then.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
        return None
    lo, hi = float(v.min()), float(v.max())
    if hi - lo > rel * max(abs(lo), abs(hi)):
        return None
    if hi == 0.0:
        return -1.0, 1.0
    pad = 0.5 * abs(hi)
    return hi - pad, hi + pad


def ema(values: np.ndarray, alpha: float, prev: float | None = None) -> np.ndarray:
    """Exponential moving average ``y[i] = alpha*y[i-1] + (1-alpha)*x[i]``.

    ``prev`` is the last smoothed value before ``values`` (None: start at the
    first value, so the curve does not rise from zero). Vectorised in blocks
    (``y = a^(j+1)*prev + (1-a)*a^j*cumsum(x*a^-m)``), each short enough that
    ``a^-m`` stays below 1e12, so it is exact to rounding and needs no scipy.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0 or alpha <= 0.0:
        return x.copy()
    if prev is None or not math.isfinite(prev):
        prev = float(x[0])
    out = np.empty_like(x)
    block = max(1, min(x.size, int(12.0 / -math.log10(alpha)))) if alpha < 1.0 else x.size
    powers = alpha ** np.arange(block + 1, dtype=np.float64)  # a^0 .. a^block
    inverse = 1.0 / powers[:-1]  # a^-m
    for start in range(0, x.size, block):
        chunk = x[start : start + block]
        k = chunk.size
        acc = np.cumsum(chunk * inverse[:k])
        out[start : start + k] = powers[1 : k + 1] * prev + (1.0 - alpha) * powers[:k] * acc
        prev = float(out[start + k - 1])
    return out


def mean_on_grid(
    curves: Sequence[Series], x: int, cols: Sequence[int], after: float = -math.inf, density: int = 2
) -> np.ndarray | None:
    """The mean of ``curves`` on a common grid of their column ``x`` (steps), past ``after``; None if nothing new.

    The grid is every x any curve has a point at, within the range every curve
    has reached (at most ``density`` points per point of the densest curve
    there); each curve's ``cols`` are interpolated onto it and averaged (a nan
    is left out), so the mean lies between the curves wherever they are. Rows
    have the curves' columns; only ``x`` and ``cols`` are filled. Each curve's
    x must increase.
    """
    xs = [s.column(x) for s in curves]
    lo = max(float(v[0]) for v in xs)
    hi = min(float(v[-1]) for v in xs)
    start = max(lo, after)
    if hi < start or (hi == start == after):
        return None
    side: Literal["left", "right"] = "right" if start == after else "left"  # ``after`` is on the grid already
    pieces = [v[np.searchsorted(v, start, side) : np.searchsorted(v, hi, "right")] for v in xs]
    grid = np.unique(np.concatenate(pieces))
    cap = density * max(1, max(len(p) for p in pieces))
    if len(grid) > cap:
        grid = grid[np.unique(np.linspace(0, len(grid) - 1, cap).round().astype(int))]
    if not len(grid):
        return None
    rows = np.full((len(grid), curves[0].ncols), np.nan)
    rows[:, x] = grid
    for col in cols:
        values = []
        for s, v in zip(curves, xs):
            first = max(0, int(np.searchsorted(v, grid[0], "left")) - 1)  # only the curve's tail
            values.append(np.interp(grid, v[first:], s.column(col)[first:]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an x where every curve is nan
            rows[:, col] = np.nanmean(np.vstack(values), axis=0)
    return rows


SPIKE_GAP_DECADES = 3.0  # positive values this far above the rest of their curve, with nothing between, diverged
_SPIKE_BIN = 0.25  # decades per bin when looking for that gap


def spikes(values: np.ndarray) -> np.ndarray:
    """Which values of a positive curve diverged: those above the lowest gap of SPIKE_GAP_DECADES or more with no
    value in it, when fewer than half the curve's values are above it (a loss of 1e22 among losses of 2, a
    validation loss of 6e4 among 0.4s). A curve that falls smoothly over many decades has no such gap; a curve
    with a value at or below zero is judged to have none."""
    v = np.asarray(values, dtype=np.float64)
    out = np.zeros(v.shape, dtype=bool)
    finite = np.isfinite(v)
    n = int(finite.sum())
    if n < 2:
        return out
    low, high = float(v[finite].min()), float(v[finite].max())
    if low <= 0.0 or high / low < 10.0**SPIKE_GAP_DECADES:
        return out
    logs = np.log10(v[finite])
    bins = ((logs - logs.min()) / _SPIKE_BIN).astype(np.int64)
    counts = np.bincount(bins)
    below = np.cumsum(counts)
    need = int(math.ceil(SPIKE_GAP_DECADES / _SPIKE_BIN))
    empty = 0
    for b in range(1, counts.size):
        if counts[b] == 0:
            empty += 1
            continue
        if empty >= need and n - below[b - 1] <= n // 2:
            cut = logs.min() + b * _SPIKE_BIN  # the first occupied bin above the gap
            out[finite] = logs >= cut - 1e-12
            return out
        empty = 0
    return out


def without_spikes(values: np.ndarray) -> np.ndarray:
    """``values`` with each diverged value (``spikes``) replaced by the value before it: what a smoothed curve
    averages, so that one diverged loss does not lift it for hundreds of steps."""
    v = np.array(values, dtype=np.float64)
    bad = spikes(v)
    if not bad.any():
        return v
    good = np.flatnonzero(~bad)
    if not good.size:
        return v
    index = np.where(~bad, np.arange(v.size), 0)
    np.maximum.accumulate(index, out=index)
    filled = v[index]
    first = int(good[0])
    filled[:first] = v[first]  # before the first steady value: that value
    return filled
