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


def fit_schema(table: RawTable, target: str, kinds: Mapping[str, Inferred], task: str, classes: Sequence[str],
               y_train: np.ndarray | None, train_rows: np.ndarray, standardize: bool = True,
               missing_values: Sequence[str] = DEFAULT_MISSING) -> Schema:
    """Fit fill values, indicators, levels and statistics on ``train_rows`` of ``table``."""
    where, path = table.where, table.path
    specs: list[ColumnSpec] = []
    n_train = len(train_rows)
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
            continue
        x = numbers_of(table, name, values, inf.kind)[train_rows].astype(np.float32)  # as the model gets them
        miss = np.isnan(x)
        present = x[~miss] if miss.any() else x
        fill = float(np.median(present)) if len(present) else 0.0
        filled = np.where(miss, np.float32(fill), x) if miss.any() else x
        mean, std = (float(filled.mean(dtype=np.float64)), float(filled.std(dtype=np.float64))) \
            if standardize else (0.0, 1.0)
        if std < 1e-6:
            std = 1.0
        specs.append(ColumnSpec(name, inf.kind, inf.reason, fill=fill, indicator=bool(miss.any()),
                                mean=mean, std=std, missing=int(miss.sum())))
    if not any(s.kind != "ignore" for s in specs):
        ignored = "; ".join(f"{s.name}: {s.reason}" for s in specs if s.kind == "ignore")
        raise DataError(f"{where}: {path} has no usable feature column besides {target!r}"
                        + (f" (ignored: {ignored})" if ignored else ""))
    schema = Schema(specs, target, task, list(classes), missing_values=list(missing_values))
    if task == "regression" and y_train is not None:
        schema.target_mean = float(np.mean(y_train))
        std = float(np.std(y_train))
        schema.target_std = std if std > 1e-12 else 1.0
    return schema
