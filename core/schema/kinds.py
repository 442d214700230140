"""What each feature column is (``number``, ``category``, ``bool`` or ``ignore``, with a reason), from its values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from core.errors import DataError
from core.schema.cells import FALSE_WORDS, TRUE_WORDS, distinct_texts, missing_mask, parse_numbers
from core.schema.coded import Coded, Column
from core.schema.table import RawTable

KINDS = ("number", "category", "bool", "ignore")
MIN_ROWS_FOR_TEXT_RULES = 20  # below this, a column is never ignored as an id or as free text


def max_levels(n_rows: int) -> int:
    """The most levels a category column of ``n_rows`` rows may have: half the rows, and never under 20."""
    return max(MIN_ROWS_FOR_TEXT_RULES, n_rows // 2)


@dataclass(frozen=True)
class Inferred:
    kind: str
    reason: str = ""  # why: "ignored: ...", or "set in data.columns"
    missing: int = 0
    levels: int = 0  # distinct values (categories)


ID_NAMES = frozenset({"id", "index", "row", "rowid", "row_id", "key", "uuid"})


def _id_name(name: str) -> bool:
    low = name.strip().lower()
    return low in ID_NAMES or low.endswith(("_id", " id")) or (low.endswith("id") and name[-2:] == "Id")


def _is_id_numbers(x: np.ndarray, n: int, name: str) -> bool:
    """An integer column named like an id with a distinct value in every row (numbers with other names stay)."""
    if not _id_name(name) or n < MIN_ROWS_FOR_TEXT_RULES or np.isnan(x).any() or not np.all(np.mod(x, 1) == 0):
        return False
    s = np.sort(x)
    return len(np.unique(s)) == n


def infer_kind(name: str, values: Column, override: str | None = None) -> Inferred:
    """The kind of one feature column from its values (override: ``data.columns``)."""
    n = len(values)
    miss = missing_mask(values)
    n_missing = int(np.count_nonzero(miss))
    if override == "ignore":
        return Inferred("ignore", "set in data.columns", n_missing)
    if override is not None:
        levels = len(distinct_texts(values[~miss])) if override == "category" else 0
        return Inferred(override, "set in data.columns", n_missing, levels)
    if n_missing == n:
        return Inferred("number", "", n_missing)  # all missing: fit_schema refuses it, naming the column
    if not isinstance(values, Coded) and values.dtype != object:  # a Coded column is text
        if _id_name(name) and _is_id_numbers(values[~miss] if n_missing else values, n, name):
            return Inferred("ignore", "an id: a distinct integer in every row", n_missing)
        return Inferred("number", "", n_missing)
    present = values[~miss] if n_missing else values
    numbers, bad = parse_numbers(present)
    if bad == 0 or bad * 2 <= len(present):  # mostly numbers: a stray word is an error, not a category
        if bad == 0 and _is_id_numbers(numbers, n, name):
            return Inferred("ignore", "an id: a distinct integer in every row", n_missing)
        return Inferred("number", "", n_missing)
    texts = distinct_texts(present)
    words = {v.lower() for v in texts}
    if words <= (TRUE_WORDS | FALSE_WORDS) and len(words) <= 2:
        return Inferred("bool", "", n_missing)
    distinct = len(texts)
    if n >= MIN_ROWS_FOR_TEXT_RULES and distinct == n:
        return Inferred("ignore", "an id: a distinct value in every row", n_missing, distinct)
    if n >= MIN_ROWS_FOR_TEXT_RULES and distinct > max_levels(n):
        return Inferred("ignore", f"free text: {distinct} distinct values in {n} rows", n_missing, distinct)
    return Inferred("category", "", n_missing, distinct)


def infer_kinds(table: RawTable, target: str, overrides: Mapping[str, str] | None = None) -> dict[str, Inferred]:
    """Every feature column's kind (the target excluded); an override naming no column is an error."""
    overrides = dict(overrides or {})
    unknown = [c for c in overrides if c not in table.columns]
    if unknown:
        raise DataError(
            f"{table.where}: data.columns names {unknown[0]!r}, which {table.path} does not have; "
            "columns: " + ", ".join(table.names[:20])
        )
    if target in overrides:
        raise DataError(
            f"{table.where}: data.columns sets the kind of the target column {target!r}; "
            "the target's kind is train.task"
        )
    return {
        name: infer_kind(name, values, overrides.get(name)) for name, values in table.columns.items() if name != target
    }


def describe_kinds(kinds: Mapping[str, Inferred]) -> Iterable[str]:
    """Lines for the log: each ignored column and why."""
    for name, inf in kinds.items():
        if inf.kind == "ignore":
            yield f"column {name!r} ignored: {inf.reason}"
