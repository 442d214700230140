"""Fitting a schema on a table's training rows: fill values, missing indicators, levels and statistics."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from core.errors import DataError
from core.schema.cells import DEFAULT_MISSING, category_text, numbers_of
from core.schema.kinds import Inferred, max_levels
from core.schema.spec import ColumnSpec, Schema
from core.schema.table import RawTable

FENCE_IQRS = 5.0   # a number this many interquartile ranges beyond its quartile is an outlier: taken as the fence


def outlier_fences(present: np.ndarray) -> tuple[float, float] | None:
    """Where a number column's values are clipped, or None when no training value is an outlier.

    The fences are ``FENCE_IQRS`` interquartile ranges beyond the quartiles (7.4 standard deviations of a
    normal column; Tukey's "far out" is 3), on the side that has outliers; the other side is the training
    range. A column with no spread between its quartiles measures its spread between the 1st and 99th
    percentiles instead (a zero-inflated count).
    """
    if len(present) < 20:
        return None
    q01, q25, q75, q99 = (float(v) for v in np.quantile(present, [0.01, 0.25, 0.75, 0.99]))
    spread = q75 - q25 if q75 > q25 else (q99 - q01) / 3.45  # the 1-99 % range of a normal column is 3.45 IQRs
    if not spread > 0:
        return None
    low, high = q25 - FENCE_IQRS * spread, q75 + FENCE_IQRS * spread
    lo, hi = float(present.min()), float(present.max())
    if lo >= low and hi <= high:
        return None
    return (max(lo, low), min(hi, high))


def _absent(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _example_value(kind: str, value: object) -> object:
    """A cell as a JSON value of its kind: a number, true/false, or a category's text."""
    if kind == "category":
        return category_text(value)
    x = float(value)  # type: ignore[arg-type]
    if kind == "bool":
        return x > 0.5
    return int(x) if x.is_integer() and abs(x) < 2 ** 53 else x


def fit_schema(table: RawTable, target: str, kinds: Mapping[str, Inferred], task: str, classes: Sequence[str],
               y_train: np.ndarray | None, train_rows: np.ndarray, standardize: bool = True,
               missing_values: Sequence[str] = DEFAULT_MISSING) -> Schema:
    """Fit fill values, indicators, levels and statistics on ``train_rows`` of ``table``."""
    where, path = table.where, table.path
    specs: list[ColumnSpec] = []
    n_train = len(train_rows)
    complete = np.ones(n_train, dtype=bool)   # training rows with every used column present
    cells: dict[str, np.ndarray] = {}         # each used column's training cells, for the example row
    for name, inf in kinds.items():
        values = table.columns[name]
        if inf.kind == "ignore":
            specs.append(ColumnSpec(name, "ignore", inf.reason, missing=inf.missing))
            continue
        if inf.missing == len(values):
            raise DataError(f"{where}: {path} column {name!r} is all missing (every cell empty or one of "
                            f"{', '.join(repr(m) for m in missing_values)}); drop it or set "
                            f'data.columns = {{{name} = "ignore"}}')
        train = values[train_rows]
        if inf.kind == "category":
            present = [category_text(v) for v in train if v is not None and not (isinstance(v, float) and math.isnan(v))]
            levels = sorted(set(present))
            if len(levels) > max_levels(n_train) and len(levels) > max_levels(len(values)) // 2:
                raise DataError(f"{where}: {path} category column {name!r} has {len(levels)} levels in "
                                f"{n_train} training rows, more than {max_levels(n_train)} can be learned; "
                                f'set data.columns = {{{name} = "ignore"}}')
            specs.append(ColumnSpec(name, "category", inf.reason, levels=levels, missing=int(n_train - len(present))))
            complete &= np.fromiter((v is not None and not (isinstance(v, float) and math.isnan(v)) for v in train),
                                    dtype=bool, count=n_train)
            cells[name] = train
            continue
        x64 = numbers_of(table, name, values, inf.kind)[train_rows]
        x = x64.astype(np.float32)  # as the model gets them
        miss = np.isnan(x)
        present = x[~miss] if miss.any() else x
        fill = float(np.median(present)) if len(present) else 0.0
        clip = outlier_fences(present) if inf.kind == "number" else None
        filled = np.where(miss, np.float32(fill), x) if miss.any() else x
        outliers = 0
        if clip is not None:
            outliers = int(((present < np.float32(clip[0])) | (present > np.float32(clip[1]))).sum())
            filled = np.clip(filled, np.float32(clip[0]), np.float32(clip[1]))
        complete &= ~miss
        cells[name] = x64
        mean, std = (float(filled.mean(dtype=np.float64)), float(filled.std(dtype=np.float64))) \
            if standardize else (0.0, 1.0)
        if std < 1e-6:
            std = 1.0
        specs.append(ColumnSpec(name, inf.kind, inf.reason, fill=fill, indicator=bool(miss.any()),
                                mean=mean, std=std, missing=int(miss.sum()), clip=clip, outliers=outliers))
    if not any(s.kind != "ignore" for s in specs):
        ignored = "; ".join(f"{s.name}: {s.reason}" for s in specs if s.kind == "ignore")
        raise DataError(f"{where}: {path} has no usable feature column besides {target!r}"
                        + (f" (ignored: {ignored})" if ignored else ""))
    schema = Schema(specs, target, task, list(classes), missing_values=list(missing_values))
    if n_train:  # a real training row, the first with every cell present: what an API's example shows
        k = int(np.argmax(complete)) if complete.any() else 0
        schema.example = {s.name: (None if _absent(cells[s.name][k]) else _example_value(s.kind, cells[s.name][k]))
                          for s in specs if s.kind != "ignore"}
    if task == "regression" and y_train is not None:
        schema.target_mean = float(np.mean(y_train))
        std = float(np.std(y_train))
        schema.target_std = std if std > 1e-12 else 1.0
    return schema
