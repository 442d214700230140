"""Reading a whole CSV: pyarrow's multi-threaded reader when it accepts the file, else the line-precise one.

When pyarrow refuses a file, or the values break a rule (blank, non-finite,
too large for float32), the file is read again by the line-precise reader,
whose one-line error names the line and the column (it also accepts what
only Python's float() reads, such as ``1_000``). Where both accept a file
they give the same float32 values (parsed as float64, then rounded once).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import DataError
from core.readers import blocks
from core.readers.blocks import check_stop
from core.readers.csv_columns import (
    FLOAT32_MAX,
    Columns,
    CsvData,
    NotNumeric,
    Select,
    TextColumn,
    convert_options,
    first_record,
    has_quotes,
    table_data,
)
from core.readers.csv_pieces import csv_split


def read_csv(path: Path, where: str, select: Select) -> CsvData:
    """Read the columns ``select(header)`` names; raise :class:`DataError` (or what ``select`` raises)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{where}: file not found: {path}")
    fast = _read_fast(path, select)
    return fast if fast is not None else _read_exact(path, where, select)


def _read_fast(path: Path, select: Select) -> CsvData | None:
    """pyarrow's reader; None when the file needs the exact reader (to accept it, or to say what is wrong)."""
    raw_header = first_record(path)
    if raw_header is None or len(set(raw_header)) != len(raw_header):
        return None
    header = [h.strip() for h in raw_header]
    try:
        cols = select(header)
    except Exception:  # the exact reader raises it, after the checks that come first
        return None
    import pyarrow as pa
    import pyarrow.csv as pacsv

    table = _read_blocks(path, raw_header, cols)
    if table is None:
        try:
            table = pacsv.read_csv(
                path,
                # a line break inside a value needs quotes; without any, blocks split at every newline (faster)
                parse_options=pacsv.ParseOptions(newlines_in_values=has_quotes(path)),
                convert_options=convert_options(raw_header, cols),
            )
        except (pa.ArrowException, OSError, ValueError):
            return None
    return table_data(table, raw_header, cols)


def _read_blocks(path: Path, raw_header: list[str], cols: Columns) -> Any:
    """A CSV with one line per record, parsed in pieces of about ``READ_BLOCK_BYTES`` (each by pyarrow's
    threads), asking between pieces whether to stop; None when it must be read whole (quotes, a blank line)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    split = csv_split(path, lambda header: cols)
    if split is None:
        return None
    with path.open("rb") as fh:
        fh.seek(split.data_start)
        line = max(1, len(fh.readline(1 << 20)))
    tables = []
    read = pacsv.ReadOptions(column_names=raw_header)
    convert = convert_options(raw_header, cols)
    with path.open("rb") as fh:
        for piece in split.pieces(max(1, blocks.READ_BLOCK_BYTES // line)):
            check_stop()
            fh.seek(piece.start)
            try:
                table = pacsv.read_csv(
                    pa.BufferReader(fh.read(piece.stop - piece.start)), read_options=read, convert_options=convert
                )
            except (pa.ArrowException, ValueError):
                return None
            if table.num_rows != piece.count:  # a blank line, skipped by pyarrow: the exact reader's lines
                return None
            tables.append(table)
    check_stop()
    if split.whole or not tables:
        return None
    return pa.concat_tables(tables)


def _read_exact(path: Path, where: str, select: Select) -> CsvData:
    """The csv module, record by record: slow, and its errors name the line and the column."""
    numbered: list[tuple[int, list[str]]] = []  # (line number where the record ends, fields)
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            for row in reader:
                numbered.append((reader.line_num, row))
    except UnicodeDecodeError:
        with path.open("rb") as fh:
            utf16 = fh.read(2) in (b"\xff\xfe", b"\xfe\xff")
        hint = " (it looks like UTF-16; save it as UTF-8)" if utf16 else ""
        raise DataError(f"{where}: {path} is not UTF-8 text{hint}") from None
    except csv.Error as exc:
        raise DataError(f"{where}: {path}: malformed CSV: {exc}") from None
    except OSError as exc:
        raise DataError(f"{where}: cannot read {path}: {exc.strerror}") from None
    numbered = [(n, r) for n, r in numbered if any(cell.strip() for cell in r)]
    if not numbered:
        raise DataError(f"{where}: {path} is empty")
    header = [h.strip() for h in numbered[0][1]]
    lines = [n for n, _ in numbered[1:]]
    body = [r for _, r in numbered[1:]]
    if not body:
        raise DataError(f"{where}: {path} has a header but no data rows")
    cols = select(header)
    for lineno, row in zip(lines, body):
        if len(row) != len(header):
            hint = " (an unclosed quote?)" if any("\n" in cell for cell in row) else ""
            raise DataError(f"{where}: {path} line {lineno} has {len(row)} fields, the header has {len(header)}{hint}")
    text: dict[int, TextColumn] = {}
    for i in cols.text:
        cells = [row[i].strip() for row in body]
        if i in cols.required:
            blank = next((k for k, cell in enumerate(cells) if not cell), None)
            if blank is not None:
                raise DataError(f"{where}: {path} line {lines[blank]} has no value in {cols.required[i]}")
        index: dict[str, int] = {}
        codes = np.fromiter((index.setdefault(cell, len(index)) for cell in cells), dtype=np.int64, count=len(cells))
        text[i] = TextColumn(codes, list(index))
    x = np.empty((len(body), len(cols.numeric)), dtype=np.float32)
    for j, col in enumerate(cols.numeric):
        x[:, j] = _numeric_column(path, where, header[col], [row[col] for row in body], lines)
    return CsvData(header, x, text)


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _numeric_column(path: Path, where: str, name: str, cells: list[str], lines: list[int]) -> np.ndarray:
    def bad(k: int, what: str) -> DataError:
        return DataError(f"{where}: {path} column {name!r} {what} (line {lines[k]}: {cells[k].strip()[:40]!r})")

    stop = len(cells)  # the first cell that is not a number, if any: errors come in line order
    try:
        values = np.fromiter(map(float, cells), dtype=np.float64, count=stop)
    except ValueError:
        stop = next((k for k, cell in enumerate(cells) if not _is_number(cell)), stop)
        values = np.fromiter(map(float, cells[:stop]), dtype=np.float64, count=stop)
    finite = np.isfinite(values)
    if not finite.all():
        raise bad(int(np.flatnonzero(~finite)[0]), "has a non-finite value")
    large = np.abs(values) > FLOAT32_MAX
    if large.any():
        raise bad(int(np.flatnonzero(large)[0]), "has a value too large for float32")
    if stop < len(cells):
        raise NotNumeric(str(bad(stop, "is not numeric")), name)
    return values.astype(np.float32)
