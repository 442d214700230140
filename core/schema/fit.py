"""Fitting a schema on a table's training rows: fill values, missing indicators, levels and statistics."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.errors import DataError
from core.schema.cells import DEFAULT_MISSING, category_text, distinct_texts, missing_mask, numbers_of
from core.schema.coded import Coded
from core.schema.dates import date_parts, parse_dates
from core.schema.kinds import Inferred, max_levels
from core.schema.spec import ColumnSpec, Schema
from core.schema.table import RawTable
from core.schema.text import fit_slots

PARALLEL_ROWS = 20_000  # a table of this many rows fits its number columns on several threads
FENCE_IQRS = 5.0  # a number this many interquartile ranges beyond its quartile is an outlier: taken as the fence


def _select(values: np.ndarray, ranks: list[int], lo: int = 0) -> dict[int, float]:
    """The values of the given ranks (0-based, ascending, in ``lo`` .. ``lo + len(values)``) as a sort would
    place them, by partitions of ``values`` in place, each over the part between two ranks already placed."""
    if not ranks:
        return {}
    if len(ranks) == 1 and ranks[0] - lo in (0, len(values) - 1):  # the part's smallest or largest
        return {ranks[0]: float(values.min() if ranks[0] == lo else values.max())}
    r = ranks[len(ranks) // 2]
    values.partition(r - lo)
    below = [k for k in ranks if k < r]
    above = [k for k in ranks if k > r]
    return {
        r: float(values[r - lo]),
        **_select(values[: r - lo], below, lo),
        **_select(values[r - lo + 1 :], above, r + 1),
    }


def _quantiles(
    present: np.ndarray, qs: tuple[float, ...], extra: tuple[int, ...] = ()
) -> tuple[list[float], dict[int, float]]:
    """The ``qs`` quantiles of ``present`` (linear interpolation, as ``np.quantile``), which is reordered, and
    the values of the ``extra`` ranks."""
    n = len(present)
    pos = np.asarray(qs) * (n - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    at = _select(present, sorted({*lo.tolist(), *hi.tolist(), *extra}))
    v_lo, v_hi = np.array([at[k] for k in lo.tolist()]), np.array([at[k] for k in hi.tolist()])
    return [float(v) for v in v_lo + (v_hi - v_lo) * (pos - lo)], at


def _fill_and_fences(present: np.ndarray, fences: bool) -> tuple[float, tuple[float, float] | None]:
    """A column's median (its fill value, as ``np.median`` gives it) and, for a number column, its fences;
    ``present`` is reordered (partitions, each over the part between two ranks already placed)."""
    n = len(present)
    if not n:
        return 0.0, None
    fences = fences and n >= 20
    mid = ((n - 1) // 2, n // 2)
    lo, hi = (float(present.min()), float(present.max())) if fences else (0.0, 0.0)
    quartiles, at = _quantiles(present, (0.25, 0.75) if fences else (), mid)
    median = float(np.mean(np.array([at[mid[0]], at[mid[1]]], dtype=present.dtype)))  # as np.median rounds it
    if not fences:
        return median, None
    q25, q75 = quartiles
    q01 = q99 = 0.0
    if not q75 > q25:  # no spread between the quartiles: the 1-99 % range measures it
        q01, q99 = _quantiles(present, (0.01, 0.99))[0]
    return median, _fences(lo, q01, q25, q75, q99, hi)


def outlier_fences(present: np.ndarray) -> tuple[float, float] | None:
    """Where a number column's values are clipped, or None when no training value is an outlier.

    The fences are ``FENCE_IQRS`` interquartile ranges beyond the quartiles (7.4 standard deviations of a
    normal column; Tukey's "far out" is 3), on the side that has outliers; the other side is the training
    range. A column with no spread between its quartiles measures its spread between the 1st and 99th
    percentiles instead (a zero-inflated count).
    """
    return _fill_and_fences(np.array(present), True)[1]


def _fences(lo: float, q01: float, q25: float, q75: float, q99: float, hi: float) -> tuple[float, float] | None:
    spread = q75 - q25 if q75 > q25 else (q99 - q01) / 3.45  # the 1-99 % range of a normal column is 3.45 IQRs
    if not spread > 0:
        return None
    low, high = q25 - FENCE_IQRS * spread, q75 + FENCE_IQRS * spread
    if lo >= low and hi <= high:
        return None
    return (max(lo, low), min(hi, high))


@dataclass(frozen=True)
class _Numbers:
    """A number or bool column fitted on the training rows (its cells are not kept: the example row's
    values are read from the table)."""

    miss: np.ndarray | None  # which training cells are missing; None when none is (a column of a bool per
    # training row, held until every column is fitted: 77 MB for 32 columns of 2.4 million rows)
    spec: ColumnSpec


def _fit_numbers(table: RawTable, name: str, inf: Inferred, train_rows: np.ndarray, standardize: bool) -> _Numbers:
    column = table.columns[name]
    if isinstance(column, np.ndarray) and column.dtype == np.float32:  # read as the model gets them
        x = column[train_rows]
    else:
        x = numbers_of(table, name, column, inf.kind)[train_rows].astype(np.float32)
    miss = np.isnan(x)
    present = x[~miss] if miss.any() else x
    fill, clip = _fill_and_fences(present, inf.kind == "number")
    filled = np.where(miss, np.float32(fill), x) if miss.any() else x
    outliers = 0
    if clip is not None:
        outliers = int(((present < np.float32(clip[0])) | (present > np.float32(clip[1]))).sum())
        filled = np.clip(filled, np.float32(clip[0]), np.float32(clip[1]))
    mean, std = (
        (float(filled.mean(dtype=np.float64)), float(filled.std(dtype=np.float64))) if standardize else (0.0, 1.0)
    )
    if std < 1e-6:
        std = 1.0
    return _Numbers(
        miss if miss.any() else None,
        ColumnSpec(
            name,
            inf.kind,
            inf.reason,
            fill=fill,
            indicator=bool(miss.any()),
            mean=mean,
            std=std,
            missing=int(miss.sum()),
            clip=clip,
            outliers=outliers,
        ),
    )


def _absent(value: object) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and math.isnan(value))


def _example_value(kind: str, value: Any) -> object:
    """A cell (str, number or bool) as a JSON value of its kind: a number, true/false, or a category's text."""
    if kind in ("category", "datetime", "text"):
        return category_text(value)
    x = float(value)
    if kind == "bool":
        return x > 0.5
    return int(x) if x.is_integer() and abs(x) < 2**53 else x


def fit_schema(
    table: RawTable,
    target: str,
    kinds: Mapping[str, Inferred],
    task: str,
    classes: Sequence[str],
    y_train: np.ndarray | None,
    train_rows: np.ndarray,
    standardize: bool = True,
    missing_values: Sequence[str] = DEFAULT_MISSING,
    text_encoder: str = "",
) -> Schema:
    """Fit fill values, indicators, levels and statistics on ``train_rows`` of ``table``; ``text_encoder``
    (``model.text_encoder``): the sentence encoder that embeds every text column, or "" for n-grams."""
    threads = min(8, os.cpu_count() or 1) if table.n_rows >= PARALLEL_ROWS else 1
    with ThreadPoolExecutor(max_workers=threads) as pool:  # column by column on every core: numpy lets go of the GIL
        numbers = {
            name: pool.submit(_fit_numbers, table, name, inf, train_rows, standardize)
            for name, inf in kinds.items()
            if inf.kind in ("number", "bool") and inf.missing < len(table.columns[name])
        }
        try:
            specs, complete, cells = _fit_columns(table, kinds, train_rows, numbers, missing_values, text_encoder)
        finally:
            for future in numbers.values():
                future.cancel()
    return _finish(specs, complete, cells, table, target, task, classes, y_train, missing_values)


def _fit_columns(
    table: RawTable,
    kinds: Mapping[str, Inferred],
    train_rows: np.ndarray,
    numbers: Mapping[str, Future[_Numbers]],
    missing_values: Sequence[str],
    text_encoder: str = "",
) -> tuple[list[ColumnSpec], np.ndarray, dict[str, np.ndarray]]:
    """Each column's spec in order (the number columns' from ``numbers``), which training rows are complete
    and each used column's training cells."""
    where, path = table.where, table.path
    n_train = len(train_rows)
    specs: list[ColumnSpec] = []
    complete = np.ones(n_train, dtype=bool)  # training rows with every used column present
    cells: dict[str, np.ndarray] = {}  # each used column's training cells (a number column's rows), for the example
    for name, inf in kinds.items():
        values = table.columns[name]
        if inf.kind == "ignore":
            specs.append(ColumnSpec(name, "ignore", inf.reason, missing=inf.missing))
            continue
        if inf.missing == len(values):
            raise DataError(
                f"{where}: {path} column {name!r} is all missing (every cell empty or one of "
                f"{', '.join(repr(m) for m in missing_values)}); drop it or set "
                f'data.columns = {{{name} = "ignore"}}'
            )
        if inf.kind in ("datetime", "text"):
            train = values[train_rows]
            if inf.kind == "datetime":
                spec, miss = _fit_dates(name, inf, train)
            else:
                spec, miss = _fit_text(name, inf, train, text_encoder)
            specs.append(spec)
            complete &= ~miss
            cells[name] = train
            continue
        if inf.kind == "category":
            train = values[train_rows]
            levels = sorted(distinct_texts(train))
            train_missing = (
                missing_mask(train)
                if isinstance(train, Coded)
                else np.fromiter((_absent(v) for v in train), dtype=bool, count=n_train)
            )
            if len(levels) > max_levels(n_train) and len(levels) > max_levels(len(values)) // 2:
                raise DataError(
                    f"{where}: {path} category column {name!r} has {len(levels)} levels in "
                    f"{n_train} training rows, more than {max_levels(n_train)} can be learned; "
                    f'set data.columns = {{{name} = "ignore"}}'
                )
            specs.append(ColumnSpec(name, "category", inf.reason, levels=levels, missing=int(train_missing.sum())))
            complete &= ~train_missing
            cells[name] = train
            continue
        fitted = numbers[name].result()  # its error, if any, in column order
        if fitted.miss is not None:
            complete &= ~fitted.miss
        cells[name] = train_rows  # the example's value is read from the column, at its row
        specs.append(fitted.spec)
    return specs, complete, cells


def _fit_dates(name: str, inf: Inferred, train: Any) -> tuple[ColumnSpec, np.ndarray]:
    """A date column: its earliest training date and each part's statistics (a missing date takes the means)."""
    seconds, _ = parse_dates(train, inf.order)
    miss = np.isnan(seconds)
    present = seconds[~miss]
    origin = float(present.min()) if len(present) else 0.0
    parts = date_parts(present, origin) if len(present) else np.zeros((1, 10))
    stats = [(float(m), float(sd) if sd > 1e-6 else 1.0) for m, sd in zip(parts.mean(axis=0), parts.std(axis=0))]
    spec = ColumnSpec(
        name,
        "datetime",
        inf.reason,
        indicator=bool(miss.any()),
        missing=int(miss.sum()),
        order=inf.order,
        origin=origin,
        parts=stats,
    )
    return spec, miss


def _fit_text(name: str, inf: Inferred, train: Any, encoder: str = "") -> tuple[ColumnSpec, np.ndarray]:
    """A free-text column: how many n-gram slots a row keeps (a missing text is no n-grams), or the sentence
    encoder that embeds it."""
    miss = (
        missing_mask(train)
        if isinstance(train, Coded)
        else np.fromiter((_absent(v) for v in train), dtype=bool, count=len(train))
    )
    if encoder:
        from core.schema.sentences import describe

        fingerprint, dim = describe(encoder)
        spec = ColumnSpec(name, "text", inf.reason, missing=int(miss.sum()), encoder=encoder, fingerprint=fingerprint)
        spec.dim = dim
        return spec, miss
    return ColumnSpec(name, "text", inf.reason, missing=int(miss.sum()), slots=fit_slots(train)), miss


def _finish(
    specs: list[ColumnSpec],
    complete: np.ndarray,
    cells: Mapping[str, np.ndarray],
    table: RawTable,
    target: str,
    task: str,
    classes: Sequence[str],
    y_train: np.ndarray | None,
    missing_values: Sequence[str],
) -> Schema:
    """The schema of the fitted columns, with its example row and the target's statistics."""
    where, path = table.where, table.path
    n_train = len(complete)
    if not any(s.kind != "ignore" for s in specs):
        ignored = "; ".join(f"{s.name}: {s.reason}" for s in specs if s.kind == "ignore")
        raise DataError(
            f"{where}: {path} has no usable feature column besides {target!r}"
            + (f" (ignored: {ignored})" if ignored else "")
        )
    schema = Schema(specs, target, task, list(classes), missing_values=list(missing_values))
    if n_train:  # a real training row, the first with every cell present: what an API's example shows
        k = int(np.argmax(complete)) if complete.any() else 0

        def cell(s: ColumnSpec) -> Any:
            if s.kind in ("category", "datetime", "text"):
                return cells[s.name][k]
            row = int(cells[s.name][k])
            column = table.columns[s.name]
            value = float(numbers_of(table, s.name, column[row : row + 1], s.kind)[0])
            if isinstance(column, np.ndarray) and column.dtype == np.float32 and math.isfinite(value):
                value = float(str(np.float32(value)))  # the shortest text of the float32 read: as the file has it
            return value

        schema.example = {
            s.name: (None if _absent(value := cell(s)) else _example_value(s.kind, value))
            for s in specs
            if s.kind != "ignore"
        }
    if task == "regression" and y_train is not None:
        schema.target_mean = float(np.mean(y_train))
        std = float(np.std(y_train))
        schema.target_std = std if std > 1e-12 else 1.0
    return schema
