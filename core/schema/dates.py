"""Dates and timestamps: which form a column's cells are written in, and the numbers a model learns from.

Forms: ISO 8601 (``2024-03-05``, ``2024-03-05 14:30``, ``2024-03-05T14:30:00.5+02:00``, ``2024/03/05``),
and day-first or month-first with slashes, dots or dashes (``05/03/2024``, ``3.5.2024 14:30``). Which of
the last two a column is comes from a value that only one of them reads (a day over 12); a column where
none decides, or that mixes forms, is refused with one line naming a value of each. A cell that is not a
date of the column's form is a missing cell (counted).

A date becomes ``DATE_PARTS``: the year, month, day of week, hour and minute on a circle (sine and cosine,
so December is next to January and 23:00 to midnight), and the days since the earliest training date. The
clock time is taken as written; an offset (``+02:00``, ``Z``) does not move it. Torch-free.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import numpy as np

from core.errors import DataError

ORDERS = ("iso", "dmy", "mdy")
DATE_PARTS = (
    "year",
    "month_sin",
    "month_cos",
    "weekday_sin",
    "weekday_cos",
    "hour_sin",
    "hour_cos",
    "minute_sin",
    "minute_cos",
    "days",
)
_TIME = r"(?:[T ](\d{1,2}):(\d{2})(?::(\d{2})(?:[.,]\d+)?)?)?\s*(?:Z|[+-]\d{2}:?\d{2}|UTC)?"
_ISO = re.compile(r"^(\d{4})[-/](\d{1,2})[-/](\d{1,2})" + _TIME + "$")
_DAY_MONTH = re.compile(r"^(\d{1,2})[/.-](\d{1,2})[/.-](\d{4})" + _TIME + "$")
_EPOCH = datetime(1970, 1, 1)
DATE_SHARE = 0.9  # this share of a column's distinct texts being dates makes it a date column


def form_of(text: str) -> str | None:
    """ "iso", "slash" (day-first or month-first) or None: the form ``text`` is written in."""
    t = text.strip()
    if _ISO.match(t):
        return "iso"
    if _DAY_MONTH.match(t):
        return "slash"
    return None


def looks_like_dates(texts: list[str]) -> bool:
    """Whether distinct texts are mostly dates (of one form or several)."""
    if not texts:
        return False
    sample = texts[:: max(1, len(texts) // 2000)]
    return sum(form_of(t) is not None for t in sample) >= DATE_SHARE * len(sample)


def choose_order(name: str, texts: list[str], where: str) -> str:
    """The order a date column is written in, from its distinct texts; mixed forms and an undecided
    day/month order are one-line errors."""
    iso = next((t for t in texts if form_of(t) == "iso"), None)
    slash = [t for t in texts if form_of(t) == "slash"]
    if iso is not None and slash:
        raise DataError(
            f"{where}: date column {name!r} mixes forms: {iso!r} (year first) and {slash[0]!r} (day and month "
            f'first); write every date one way, or set data.columns = {{{name} = "ignore"}}'
        )
    if not slash:
        return "iso"
    firsts = [m.groups()[:2] for t in slash if (m := _DAY_MONTH.match(t.strip()))]
    day_first = next((t for t, (a, _) in zip(slash, firsts) if int(a) > 12), None)
    month_first = next((t for t, (_, b) in zip(slash, firsts) if int(b) > 12), None)
    if day_first and month_first:
        raise DataError(
            f"{where}: date column {name!r} mixes day-first {day_first!r} and month-first {month_first!r} dates; "
            f'write every date one way, or set data.columns = {{{name} = "ignore"}}'
        )
    if day_first or month_first:
        return "dmy" if day_first else "mdy"
    raise DataError(
        f"{where}: date column {name!r} could be day-first or month-first (e.g. {slash[0]!r}); "
        f'set data.columns = {{{name} = "datetime:dmy"}} or {{{name} = "datetime:mdy"}}'
    )


def _seconds(text: str, order: str) -> float:
    t = text.strip()
    m = (_ISO if order == "iso" else _DAY_MONTH).match(t)
    if m is None:
        return float("nan")
    a, b, c, hh, mm, ss = m.groups()
    year, month, day = (
        (int(a), int(b), int(c))
        if order == "iso"
        else ((int(c), int(b), int(a)) if order == "dmy" else (int(c), int(a), int(b)))
    )
    try:
        when = datetime(year, month, day, int(hh or 0), int(mm or 0), int(ss or 0))
    except ValueError:  # 2024-02-30, 25:00
        return float("nan")
    return (when - _EPOCH).total_seconds()


def parse_dates(values: Any, order: str) -> tuple[np.ndarray, int]:
    """Cells as seconds since 1970 on the clock as written (float64, NaN where missing or not a date of
    ``order``) and how many present cells are not such dates."""
    from core.schema.coded import Coded

    if isinstance(values, Coded):  # each distinct text parsed once
        seconds = np.array([_seconds(str(v), order) for v in values.levels], dtype=np.float64)
        out = values.map_levels(seconds, np.nan)
        bad = int(np.count_nonzero(np.isnan(out) & ~values.missing()))
        return out, bad
    arr = np.asarray(values, dtype=object)
    out = np.full(len(arr), np.nan)
    bad = 0
    cache: dict[str, float] = {}
    for k, v in enumerate(arr.tolist()):
        if v is None or (isinstance(v, float) and v != v):
            continue
        text = str(v)
        s = cache.get(text)
        if s is None:
            s = cache[text] = _seconds(text, order)
        out[k] = s
        bad += s != s
    return out, bad


def date_parts(seconds: np.ndarray, origin: float) -> np.ndarray:
    """``DATE_PARTS`` of each date (float64 (rows, len(DATE_PARTS)), NaN rows where the date is NaN)."""
    s = np.asarray(seconds, dtype=np.float64)
    ok = ~np.isnan(s)
    whole = np.where(ok, np.floor(s), 0).astype(np.int64)
    stamps = whole.astype("datetime64[s]")
    months = stamps.astype("datetime64[M]").astype(np.int64)
    days = np.floor_divide(whole, 86400)
    in_day = whole - days * 86400
    turns = {
        "month": (months % 12) / 12.0,
        "weekday": ((days + 3) % 7) / 7.0,  # 1970-01-01 was a Thursday: Monday is 0
        "hour": (in_day // 3600) / 24.0,
        "minute": ((in_day // 60) % 60) / 60.0,
    }
    cols = [months // 12 + 1970.0]
    for name in ("month", "weekday", "hour", "minute"):
        angle = 2 * np.pi * turns[name]
        cols += [np.sin(angle), np.cos(angle)]
    cols.append((s - origin) / 86400.0)
    out = np.stack([np.asarray(c, dtype=np.float64) for c in cols], axis=1)
    out[~ok] = np.nan
    return out
