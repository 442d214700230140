"""The target column: where it is present, whether it holds classes or a number, its class codes, and which of a
table's columns it most likely is (:func:`propose_target`, which the window asks at its start: no torch here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from core.errors import DataError
from core.schema.cells import category_text, first_bad_number, missing_mask, parse_numbers
from core.schema.coded import Coded, Column
from core.schema.table import RawTable

REGRESSION_MIN_LEVELS = 20  # task "auto": an integer target with more distinct values than this is a number
IMBALANCE_RATIO = 5.0  # the data summary warns when the largest class is this many times the smallest
# Names a table's target usually has, most telling first ("y" only where it is not a coordinate beside x and z).
OBVIOUS_TARGETS = (
    "target",
    "label",
    "labels",
    "class",
    "species",
    "price",
    "outcome",
    "survived",
    "income",
    "quality",
    "diagnosis",
    "churn",
    "y",
)


def target_values(table: RawTable, target: str) -> tuple[Column, np.ndarray]:
    """The target column and the mask of rows where it is present."""
    if target not in table.columns:
        names = table.names
        raise DataError(
            f"{table.where}: target column {target!r} not found in {table.path}; columns: "
            + ", ".join(names[:20])
            + (" ..." if len(names) > 20 else "")
            + " (set data.target)"
        )
    values = table.columns[target]
    return values, ~missing_mask(values)


def choose_task(values: Column, task: str) -> tuple[str, str]:
    """("classification" | "regression", why) for a target's present values and ``train.task``."""
    numbers, bad = parse_numbers(values)
    numeric = bad == 0 and len(values) > 0 and bool(np.isfinite(numbers).all())
    if task == "regression":
        return "regression", "set by train.task"
    if task == "classification":
        return "classification", "set by train.task"
    if not numeric:
        return "classification", "the target holds text"
    if not np.all(np.mod(numbers, 1) == 0):
        return "regression", "the target holds fractional numbers"
    distinct = len(np.unique(numbers))
    if distinct > REGRESSION_MIN_LEVELS:
        return "regression", f"the target holds {distinct} distinct integers"
    return "classification", f"the target holds {distinct} distinct integers"


def class_names(values: Column) -> list[str]:
    """Class names sorted (numerically when they are all numbers)."""
    uniq = sorted(values.distinct() if isinstance(values, Coded) else {category_text(v) for v in values})
    try:
        uniq = sorted(uniq, key=float)
    except ValueError:
        pass
    return uniq


def class_codes(values: Column) -> tuple[list[str], np.ndarray]:
    """Class names (as :func:`class_names` sorts them) and each row's class index, without a loop per row."""
    if values.dtype != object:
        uniq, inverse = np.unique(values, return_inverse=True)  # numbers: sorted numerically already
        return [category_text(float(u)) for u in uniq], inverse.reshape(-1).astype(np.int64)
    if isinstance(values, Coded) and not values.missing().any():  # each distinct text named once
        names = class_names(values)
        index_of = {v: i for i, v in enumerate(names)}
        lut = np.array([index_of.get(category_text(v), -1) for v in values.levels], dtype=np.int64)
        return names, values.map_levels(lut, -1)
    texts = np.asarray([category_text(v) for v in values], dtype=str) if len(values) else np.empty(0, str)
    uniq, inverse = np.unique(texts, return_inverse=True)
    names = [str(u) for u in uniq]
    order = sorted(range(len(names)), key=lambda i: names[i])
    try:
        order = sorted(order, key=lambda i: float(names[i]))
    except ValueError:
        pass
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names))
    return [names[i] for i in order], rank[inverse.reshape(-1)]


def regression_target(table: RawTable, target: str, values: Column) -> np.ndarray:
    numbers, bad = parse_numbers(values)
    if bad or not np.isfinite(numbers).all():
        k = first_bad_number(values) if values.dtype == object else int(np.flatnonzero(~np.isfinite(numbers))[0])
        cell = values[k] if k is not None else "?"
        raise DataError(
            f"{table.where}: {table.path} target column {target!r} is not a number in row "
            f"{(k or 0) + 1} ({str(cell)[:40]!r}); regression needs numbers (or set train.task)"
        )
    return numbers


def propose_target(columns: Sequence[Mapping[str, Any]]) -> str:
    """The column a table's target most likely is: an obvious name (case aside), else the last column that is
    not ignored, else the last column; "" for no columns. ``columns``: dicts with ``name`` and ``kind``."""
    names = [str(c["name"]) for c in columns]
    lower = {n.lower(): n for n in reversed(names)}
    for obvious in OBVIOUS_TARGETS:
        if obvious in lower and not (obvious == "y" and "z" in lower):
            return lower[obvious]
    usable = [str(c["name"]) for c in columns if c.get("kind") != "ignore"]
    return (usable or names or [""])[-1]
