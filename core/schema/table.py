"""A table's columns as read from a CSV, Parquet or JSON lines file (:class:`RawTable`), before any kind is inferred."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import DataError
from core.readers.csv_columns import FLOAT32_MAX
from core.schema.cells import DEFAULT_MISSING
from core.schema.coded import Coded, Column, from_arrow


@dataclass
class RawTable:
    """A table's columns as read: object arrays of ``str``/``None`` or float64 arrays with NaN for missing."""

    where: str  # "data: csv:PATH" or "predict": the start of every error
    path: str
    columns: dict[str, Column]  # in file order
    n_rows: int
    kind: str = ""  # "csv", "parquet" or "jsonl": where it came from

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def take(self, rows: np.ndarray) -> RawTable:
        return RawTable(self.where, self.path, {k: v[rows] for k, v in self.columns.items()}, int(len(rows)), self.kind)


def _as_text(values: np.ndarray, missing: frozenset[str]) -> np.ndarray:
    out = np.asarray(values, dtype=object)
    if missing:
        is_missing = np.fromiter((v is None or v in missing for v in out), dtype=bool, count=len(out))
        out = out.copy()
        out[is_missing] = None
    return out


def read_table(path: Path, scheme: str, where: str, missing: Sequence[str] = DEFAULT_MISSING) -> RawTable:
    """Read every column of a CSV (``scheme`` "csv"), Parquet ("parquet") or JSON lines ("jsonl") file;
    raise :class:`DataError`."""
    path = Path(path).expanduser()
    miss = frozenset(missing)
    if scheme in ("parquet", "jsonl"):
        return _read_arrow(path, scheme, where, miss)
    fast = _read_csv_fast(path, where, miss)
    if fast is not None:
        return fast
    from core.readers import Columns, read_csv

    csv = read_csv(path, where, lambda header: Columns(numeric=[], text=list(range(len(header)))))
    if len(set(csv.header)) != len(csv.header):
        dup = next(h for h in csv.header if csv.header.count(h) > 1)
        raise DataError(f"{where}: {path} names column {dup!r} twice")
    columns = {}
    n = 0
    for i, name in enumerate(csv.header):
        text = csv.text[i]
        n = len(text.codes)
        numbers = _numeric_levels(text.values, miss)
        if numbers is not None:  # every present value a finite number: parsed once per distinct value, in C
            columns[name] = numbers[text.codes] if n else np.empty(0)
            continue
        columns[name] = Coded(text.codes, text.values).normalised(miss)
    return RawTable(where, str(path), columns, n, "csv")


def _read_csv_fast(path: Path, where: str, missing: frozenset[str]) -> RawTable | None:
    """pyarrow's reader with type inference; None when the file needs the line-precise text reader (to
    accept it, or to say what is wrong): malformed, no rows, names twice, or a number that is not finite."""
    from core.readers.csv_typed import read_typed_csv

    if not path.is_file():
        return None
    table = read_typed_csv(path, sorted(missing))
    if table is None:
        return None
    names = [str(n).strip() for n in table.column_names]
    if table.num_rows == 0 or len(set(names)) != len(names):
        return None
    threads = min(8, os.cpu_count() or 1) if table.num_rows >= 20_000 else 1
    with ThreadPoolExecutor(max_workers=threads) as pool:  # column by column on every core
        converted = list(pool.map(lambda col: _column(col, missing), table.columns))
    if any(c is None for c in converted):
        return None
    columns = dict(zip(names, converted))
    return RawTable(where, str(path), columns, int(table.num_rows), "csv")


def _column(col: Any, missing: frozenset[str]) -> Any:
    """A typed pyarrow column as float64 (NaN for missing) or :class:`Coded` text; None when the text reader
    must read the file: "nan", "inf" or a value beyond float32 written in a cell (it names them), a date."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        values = np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)  # null: NaN
        if col.null_count == len(values):
            return values
        if col.null_count:  # the NaN are the nulls, and the rest lie within float32
            written_nan = int(np.count_nonzero(np.isnan(values))) != col.null_count
            lo, hi = float(np.fmin.reduce(values)), float(np.fmax.reduce(values))
        else:
            written_nan, lo, hi = False, float(values.min()), float(values.max())  # NaN would propagate
        return None if written_nan or not (-FLOAT32_MAX <= lo and hi <= FLOAT32_MAX) else values
    if pa.types.is_boolean(t):
        return _bools(col)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t):
        trimmed = pc.utf8_trim_whitespace(col.cast(pa.string()))
        if missing:
            trimmed = pc.if_else(pc.is_in(trimmed, value_set=pa.array(sorted(missing))), None, trimmed)
        return from_arrow(trimmed)
    return None  # dates, times: their text, as the file has it


def _bools(col: Any) -> Coded:
    """A pyarrow boolean column as the words ``false`` and ``true`` (nulls missing)."""
    import pyarrow.compute as pc

    values = pc.fill_null(pc.cast(col, "int8"), -1).to_numpy(zero_copy_only=False)
    return Coded(values, ["false", "true"])


def _numeric_levels(values: list[str], missing: frozenset[str]) -> np.ndarray | None:
    """A column's distinct texts as float64 (NaN for the missing ones) when every other one is a finite
    float32 number; None otherwise (the column stays text: inference and errors look at its cells)."""
    present = [v for v in values if v not in missing]
    try:
        parsed = np.asarray(present, dtype=np.float64)
    except ValueError:
        return None
    if not np.all(np.abs(parsed) <= float(np.finfo(np.float32).max)):  # NaN, infinite or beyond float32
        return None
    out = np.full(len(values), np.nan)
    keep = np.fromiter((v not in missing for v in values), dtype=bool, count=len(values))
    out[keep] = parsed
    return out


def _read_arrow(path: Path, scheme: str, where: str, missing: frozenset[str]) -> RawTable:
    """A Parquet ("parquet") or JSON lines ("jsonl") file's columns, by the types the file gives them."""
    from core.readers.arrow_file import read_arrow_table

    def read(p: Path) -> Any:
        if scheme == "jsonl":
            import pyarrow.json as pajson

            return pajson.read_json(p)
        import pyarrow.parquet as pq

        return pq.read_table(p)

    table = read_arrow_table(path, where, read, "JSON lines file" if scheme == "jsonl" else "Parquet file")
    columns = {str(name): _arrow_column(table.column(name), missing) for name in table.column_names}
    return RawTable(where, str(path), columns, int(table.num_rows), scheme)


def _arrow_column(col: Any, missing: frozenset[str]) -> Column:
    """A Parquet or JSON lines column, by the type the file gives it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
    if pa.types.is_boolean(t):
        return _bools(col)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return from_arrow(pc.utf8_trim_whitespace(col.cast(pa.string()))).normalised(missing)
    values = [None if v is None else str(v).strip() for v in col.to_pylist()]
    return _as_text(np.asarray(values, dtype=object), missing)


def arrow_block_columns(block: Any, scheme: str, where: str, missing: Sequence[str] = DEFAULT_MISSING) -> RawTable:
    """Columns of one block of a file (a pyarrow table of some of its rows) as :func:`read_table` gives the
    whole file's: ``scheme`` "csv" (read with ``core.readers.csv_typed.typed_convert_options``), "parquet" or
    "jsonl"."""
    miss = frozenset(missing)
    columns: dict[str, Column] = {}
    for name, col in zip(block.column_names, block.columns):
        if scheme == "csv":
            converted = _column(col, miss)
            if converted is None:
                raise DataError(
                    f"{where}: column {str(name).strip()!r} holds a value this reader takes only from the whole "
                    "file (nan, inf, a number beyond float32, a date): predict it on this machine"
                )
            columns[str(name).strip()] = converted
        else:
            columns[str(name)] = _arrow_column(col, miss)
    return RawTable(where, "", columns, int(block.num_rows), scheme)
