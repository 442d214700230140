"""A table's columns as read from a CSV or Parquet file (:class:`RawTable`), before any kind is inferred."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from core.errors import DataError
from core.schema.cells import DEFAULT_MISSING


@dataclass
class RawTable:
    """A table's columns as read: object arrays of ``str``/``None`` or float64 arrays with NaN for missing."""

    where: str                       # "data: csv:PATH" or "predict": the start of every error
    path: str
    columns: dict[str, np.ndarray]   # in file order
    n_rows: int
    kind: str = ""                   # "csv" or "parquet": where it came from

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def take(self, rows: np.ndarray) -> "RawTable":
        return RawTable(self.where, self.path, {k: v[rows] for k, v in self.columns.items()}, int(len(rows)), self.kind)


def _as_text(values: np.ndarray, missing: frozenset[str]) -> np.ndarray:
    out = np.asarray(values, dtype=object)
    if missing:
        is_missing = np.fromiter((v is None or v in missing for v in out), dtype=bool, count=len(out))
        out = out.copy()
        out[is_missing] = None
    return out


def read_table(path: Path, scheme: str, where: str, missing: Sequence[str] = DEFAULT_MISSING) -> RawTable:
    """Read every column of a CSV (``scheme`` "csv") or Parquet file; raise :class:`DataError`."""
    path = Path(path).expanduser()
    miss = frozenset(missing)
    if scheme == "parquet":
        return _read_parquet(path, where, miss)
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
        levels = np.asarray([None if v in miss else v for v in text.values] + [None], dtype=object)
        columns[name] = levels[text.codes] if n else np.empty(0, dtype=object)
    return RawTable(where, str(path), columns, n, "csv")


def _read_csv_fast(path: Path, where: str, missing: frozenset[str]) -> RawTable | None:
    """pyarrow's reader with type inference; None when the file needs the line-precise text reader (to
    accept it, or to say what is wrong): malformed, no rows, names twice, or a number that is not finite."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    from core.readers import blocks, check_stop, has_quotes

    if not path.is_file():
        return None
    parse = pacsv.ParseOptions(newlines_in_values=has_quotes(path))
    convert = pacsv.ConvertOptions(null_values=sorted(missing), strings_can_be_null=True,
                                   quoted_strings_can_be_null=True)
    try:  # by blocks, asking between them whether to stop (a Ctrl-C or Stop while a large file loads)
        reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=blocks.READ_BLOCK_BYTES),
                                parse_options=parse, convert_options=convert)
        batches = []
        for batch in reader:
            check_stop()
            batches.append(batch)
        table = pa.Table.from_batches(batches, schema=reader.schema)
    except (pa.ArrowException, OSError, ValueError):
        check_stop()
        try:  # a later block's values the first block's types did not foresee: the whole file, typed at once
            table = pacsv.read_csv(path, parse_options=parse, convert_options=convert)
        except (pa.ArrowException, OSError, ValueError):
            return None
    names = [str(n).strip() for n in table.column_names]
    if table.num_rows == 0 or len(set(names)) != len(names):
        return None
    f32 = float(np.finfo(np.float32).max)
    columns: dict[str, np.ndarray] = {}
    for name, col in zip(names, table.columns):
        t = col.type
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            values = np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
            present = values[~np.isnan(values)] if col.null_count else values
            if np.isnan(present).any() or not (np.abs(present) <= f32).all():
                return None  # "nan", "inf" or beyond float32 written in a cell: the text reader names it
            if col.null_count:
                values = np.where(pc.is_null(col).to_numpy(zero_copy_only=False), np.nan, values)
            columns[name] = values
        elif pa.types.is_boolean(t):
            columns[name] = np.asarray([None if v is None else ("true" if v else "false") for v in col.to_pylist()],
                                       dtype=object)
        elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t):
            trimmed = pc.utf8_trim_whitespace(col.cast(pa.string()))
            if missing:
                trimmed = pc.if_else(pc.is_in(trimmed, value_set=pa.array(sorted(missing))), None, trimmed)
            columns[name] = np.asarray(trimmed.to_numpy(zero_copy_only=False), dtype=object)
        else:  # dates, times: their text, as the file has it
            return None
    return RawTable(where, str(path), columns, int(table.num_rows), "csv")


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


def _read_parquet(path: Path, where: str, missing: frozenset[str]) -> RawTable:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise DataError(f"{where}: file not found: {path}")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        why = " ".join(str(exc).split())[:120]
        raise DataError(f"{where}: {path} is not a readable Parquet file ({why})") from None
    if table.num_rows == 0:
        raise DataError(f"{where}: {path} has no data rows")
    columns: dict[str, np.ndarray] = {}
    for name in table.column_names:
        col = table.column(name)
        t = col.type
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
            columns[str(name)] = np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
        elif pa.types.is_boolean(t):
            columns[str(name)] = np.asarray([None if v is None else ("true" if v else "false")
                                             for v in col.to_pylist()], dtype=object)
        else:
            values = [None if v is None else str(v).strip() for v in col.to_pylist()]
            columns[str(name)] = _as_text(np.asarray(values, dtype=object), missing)
    return RawTable(where, str(path), columns, int(table.num_rows), "parquet")
