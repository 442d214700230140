"""What a cell is: the words that mean missing, true and false; cells as numbers, with errors that name
the column and the row; a category's text."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.errors import DataError
from core.schema.coded import Coded, Column

if TYPE_CHECKING:
    from core.schema.table import RawTable

DEFAULT_MISSING = ("", "NA", "NaN", "null", "?")
TRUE_WORDS = frozenset({"true", "yes", "t", "y"})
FALSE_WORDS = frozenset({"false", "no", "f", "n"})


class CellError(DataError):
    """A cell of the wrong kind: its column, its row (0-based, in the values encoded) and what it holds."""

    def __init__(self, message: str, column: str, row: int, value: Any, expected: str) -> None:
        super().__init__(message)
        self.column, self.row, self.value, self.expected = column, row, value, expected


def missing_mask(values: Column) -> np.ndarray:
    if isinstance(values, Coded):
        return values.missing()
    if values.dtype == object:
        return np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    return np.isnan(values)


def parse_numbers(values: Column) -> tuple[np.ndarray, int]:
    """Text cells as float64 (NaN where missing) and how many non-missing cells are not numbers."""
    if isinstance(values, Coded):  # each distinct text parsed once
        parsed, bad_level = _parse_texts(values.levels)
        return values.map_levels(parsed, np.nan), int(values.map_levels(bad_level, False).sum())
    if values.dtype != object:
        return values, 0
    parsed, bad = _parse_texts(values)
    return parsed, int(bad.sum())


def _parse_texts(texts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cells as float64 (NaN for None and for text that is not a number) and which are not numbers."""
    out = np.full(len(texts), np.nan)
    bad = np.zeros(len(texts), dtype=bool)
    for k, v in enumerate(texts):
        if v is None:
            continue
        try:
            out[k] = float(v)
        except ValueError:
            bad[k] = True
    return out, bad


def distinct_texts(values: Any) -> set[str]:
    """The distinct category texts of a column's present cells."""
    if isinstance(values, Coded):
        return set(values.distinct())
    return {
        category_text(v)
        for v in values
        if v is not None and not (isinstance(v, (float, np.floating)) and math.isnan(v))
    }


def first_bad_number(values: Column) -> int | None:
    for k, v in enumerate(values):
        if v is None:
            continue
        try:
            x = float(v)
        except ValueError:
            return k
        if not math.isfinite(x) or abs(x) > float(np.finfo(np.float32).max):
            return k
    return None


def category_text(v: Any) -> str:
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    if isinstance(v, np.floating):  # a float32 column's cell: its shortest text, as the file wrote it
        return str(int(v)) if float(v).is_integer() else str(v)
    return str(v)


def numbers_of(
    table: RawTable | None, name: str, values: Column, kind: str, where: str = "", path: str = "", row0: int = 0
) -> np.ndarray:
    """A number or bool column as float64 with NaN for missing; a value of the wrong kind names column and row."""
    where = table.where if table is not None else where
    path = table.path if table is not None else path
    if kind == "bool":
        if values.dtype != object:
            return np.asarray(values, dtype=np.float64)
        if isinstance(values, Coded):  # each distinct word looked at once; a bad one is found in the cells
            words = [str(v).lower() for v in values.levels]
            as_bool = np.array(
                [1.0 if w in TRUE_WORDS or w == "1" else 0.0 if w in FALSE_WORDS or w == "0" else -1.0 for w in words]
            )
            out = values.map_levels(as_bool, np.nan)
            if not (out < 0).any():
                return out
            values = np.asarray(values)
        out = np.full(len(values), np.nan)
        for k, v in enumerate(values):
            if v is None:
                continue
            w = str(v).lower()
            if w in TRUE_WORDS or w == "1":
                out[k] = 1.0
            elif w in FALSE_WORDS or w == "0":
                out[k] = 0.0
            else:
                raise CellError(
                    f"{where}: {path} column {name!r} row {row0 + k + 1} holds {str(v)[:40]!r}, not true/false",
                    name,
                    k,
                    v,
                    "true/false",
                )
        return out
    if values.dtype != object:
        return np.asarray(values, dtype=np.float64)
    numbers, bad = parse_numbers(values)
    present = ~missing_mask(values)
    nonfinite = present & ~np.isfinite(numbers)
    big = np.abs(np.nan_to_num(numbers, posinf=0.0, neginf=0.0)) > float(np.finfo(np.float32).max)
    if bad or nonfinite.any() or big.any():
        if table is not None and table.kind == "csv" and present.all():
            from core.readers import Columns, read_csv  # the line-precise reader's message names the line

            i = table.names.index(name)
            read_csv(Path(path), where, lambda header: Columns(numeric=[i]))
        first = first_bad_number(values)
        assert first is not None
        cell = str(values[first]).strip()[:40]
        try:
            x = float(cell)
            what = "has a non-finite value" if not math.isfinite(x) else "has a value too large for float32"
        except ValueError:
            what = "is not numeric"
        hint = f'; set data.columns = {{{name} = "category"}} to treat it as text' if what == "is not numeric" else ""
        raise CellError(
            f"{where}: {path} column {name!r} {what} (row {row0 + first + 1}: {cell!r}){hint}",
            name,
            first,
            values[first],
            "a number" if what == "is not numeric" else "a finite float32 number",
        )
    return numbers
