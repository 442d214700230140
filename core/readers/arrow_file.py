"""Reading the columns of a Parquet or JSON lines file into the numbers and text a CSV read gives.

``read_parquet`` and ``read_json_lines`` take what ``core.readers.read_csv`` takes (the columns to
read, chosen from the header by ``select``) and give the same :class:`CsvData`: the numeric columns
as float64 rounded once to float32, the text columns stripped and factorised. A numeric column that
holds text, a missing value or one beyond float32 is an error naming the column and the row (counted
from 1, as a spreadsheet shows the rows of data).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from core.errors import DataError
from core.readers.blocks import check_stop
from core.readers.csv_columns import FLOAT32_MAX, CsvData, NotNumeric, Select, TextColumn


def read_parquet(path: Path, where: str, select: Select) -> CsvData:
    """The columns ``select(header)`` names of a Parquet file; raise :class:`DataError`."""

    def read(p: Path) -> Any:
        import pyarrow.parquet as pq

        return pq.read_table(p)

    return _read(path, where, select, read, "Parquet file")


def read_json_lines(path: Path, where: str, select: Select) -> CsvData:
    """The columns ``select(header)`` names of a JSON lines file (one object per line); raise :class:`DataError`."""

    def read(p: Path) -> Any:
        import pyarrow.json as pajson

        return pajson.read_json(p)

    return _read(path, where, select, read, "JSON lines file")


def read_arrow_table(path: Path, where: str, read: Any, what: str) -> Any:
    """``read(path)`` (a pyarrow table), its failures as one-line :class:`DataError`."""
    import pyarrow as pa

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{where}: file not found: {path}")
    try:
        table = read(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        why = " ".join(str(exc).split())[:120]
        raise DataError(f"{where}: {path} is not a readable {what} ({why})") from None
    if table.num_rows == 0:
        raise DataError(f"{where}: {path} has no data rows")
    return table


def _read(path: Path, where: str, select: Select, read: Any, what: str) -> CsvData:
    return table_columns(read_arrow_table(path, where, read, what), path, where, select)


def table_columns(table: Any, path: Path, where: str, select: Select) -> CsvData:
    """The columns ``select`` picks from a pyarrow table (a whole file's, or a block of its rows): the
    numbers checked as the CSV reader checks them, the text stripped."""
    header = [str(n).strip() for n in table.column_names]
    if len(set(header)) != len(header):
        dup = next(h for h in header if header.count(h) > 1)
        raise DataError(f"{where}: {path} names column {dup!r} twice")
    cols = select(header)
    xt = np.empty((len(cols.numeric), table.num_rows), dtype=np.float32)
    for j, i in enumerate(cols.numeric):
        check_stop()
        xt[j] = _numbers(table.column(i), path, where, header[i])
    text = {i: _text(table.column(i)) for i in cols.text}
    for i, name in cols.required.items():
        if i in text and "" in text[i].values:
            row = int(np.flatnonzero(text[i].codes == text[i].values.index(""))[0]) + 1
            raise DataError(f"{where}: {path} row {row} has no value in {name}")
    return CsvData(header, np.ascontiguousarray(xt.T), text)


def _numbers(column: Any, path: Path, where: str, name: str) -> np.ndarray:
    """A column as float64 values, checked as the CSV reader checks them (rounded to float32 by the caller)."""
    import pyarrow as pa

    def bad(row: int, what: str) -> DataError:
        value = column[row].as_py()
        shown = "" if value is None else str(value).strip()[:40]
        return DataError(f"{where}: {path} column {name!r} {what} (row {row + 1}: {shown!r})")

    t = column.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) or pa.types.is_boolean(t):
        values = np.asarray(column.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
    else:  # text: numbers written as text are read as numbers, as in a CSV
        cells = ["" if v is None else str(v).strip() for v in column.to_pylist()]
        values = np.empty(len(cells), dtype=np.float64)
        for row, cell in enumerate(cells):
            try:
                values[row] = float(cell)
            except ValueError:
                if not cell:
                    raise bad(row, "has no value") from None
                raise NotNumeric(str(bad(row, "is not numeric")), name) from None
    if column.null_count:
        nulls = np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        raise bad(int(np.flatnonzero(nulls)[0]), "has no value")
    finite = np.isfinite(values)
    if not finite.all():
        raise bad(int(np.flatnonzero(~finite)[0]), "has a non-finite value")
    large = np.abs(values) > FLOAT32_MAX
    if large.any():
        raise bad(int(np.flatnonzero(large)[0]), "has a value too large for float32")
    return values


def _text(column: Any) -> TextColumn:
    """A column as stripped text (a missing value is empty), factorised in first-seen order."""
    cells = ["" if v is None else str(v).strip() for v in column.to_pylist()]
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(c, len(index)) for c in cells), dtype=np.int64, count=len(cells))
    return TextColumn(codes, list(index))
