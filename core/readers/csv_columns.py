"""What a CSV read takes and gives: the columns asked for, text columns as codes, the data read; and the
pyarrow conversion every fast path shares (numbers as float64 rounded once to float32, text never null)."""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import DataError
from core.readers.blocks import check_stop

FLOAT32_MAX = float(np.finfo(np.float32).max)


class NotNumeric(DataError):
    """A column read as numbers holds text: ``column`` names it (the caller may know a fix)."""

    def __init__(self, message: str, column: str) -> None:
        super().__init__(message)
        self.column = column


@dataclass(frozen=True)
class Columns:
    """Which columns to read, by index in the header: numbers, and text (stripped, factorised)."""

    numeric: Sequence[int]
    text: Sequence[int] = ()
    required: Mapping[int, str] = field(
        default_factory=dict
    )  # text columns that may not be blank -> their name in errors


@dataclass(frozen=True)
class TextColumn:
    """A text column as codes into its distinct values (first-seen order)."""

    codes: np.ndarray  # int64, one per row
    values: list[str]

    def tolist(self) -> list[str]:
        table = np.asarray(self.values, dtype=object)
        return table[self.codes].tolist() if len(self.codes) else []


@dataclass(frozen=True)
class CsvData:
    header: list[str]  # stripped column names
    x: np.ndarray  # float32 (rows, len(numeric)), columns in the order asked
    text: dict[int, TextColumn]  # by column index

    @property
    def n_rows(self) -> int:
        return int(self.x.shape[0])


Select = Callable[[list[str]], Columns]


def first_record(path: Path) -> list[str] | None:
    """The first non-blank record of the file (the header), or None if it cannot be read."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            for row in csv.reader(fh):
                if any(cell.strip() for cell in row):
                    return row
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return None


def convert_options(raw_header: list[str], cols: Columns) -> Any:
    """pyarrow's conversion: numbers as float64 (never inferred), text as strings that are never null."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    numeric = [raw_header[i] for i in cols.numeric]
    text = [raw_header[i] for i in cols.text]
    types = {**{n: pa.float64() for n in numeric}, **{n: pa.string() for n in text}}
    return pacsv.ConvertOptions(
        column_types=types,
        include_columns=list(dict.fromkeys(numeric + text)),
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )


def table_data(table: Any, raw_header: list[str], cols: Columns) -> CsvData | None:
    """A pyarrow table as :class:`CsvData`; None when a value breaks a rule the exact reader reports."""
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return None
    xt = np.empty((len(cols.numeric), table.num_rows), dtype=np.float32)  # filled by rows, transposed once: faster
    for j, i in enumerate(cols.numeric):
        check_stop()
        column = table.column(raw_header[i])
        if column.null_count:
            return None
        values = column.to_numpy()
        if not (np.abs(values) <= FLOAT32_MAX).all():  # NaN, infinite, or beyond float32
            return None
        xt[j] = values  # rounded once, float64 to float32, as the exact reader does
    codes: dict[int, TextColumn] = {}
    limit = csv.field_size_limit()
    for i in cols.text:
        column = pc.utf8_trim_whitespace(table.column(raw_header[i]))
        lengths = pc.utf8_length(column)
        if pc.max(lengths).as_py() > limit:  # the csv module refuses such a field
            return None
        if i in cols.required and pc.min(lengths).as_py() == 0:
            return None
        encoded = column.combine_chunks().dictionary_encode()
        codes[i] = TextColumn(
            encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            [str(v) for v in encoded.dictionary.to_pylist()],
        )
    return CsvData([h.strip() for h in raw_header], np.ascontiguousarray(xt.T), codes)


QUOTE_SCAN_BYTES = 8 << 20


def has_quotes(path: Path, after_header: bool = False) -> bool:
    """Whether the file holds a quote anywhere (True for an empty or unreadable file), read a block at a
    time into memory of its own (a mapping of the whole file kept every page scanned in this process).
    ``after_header`` looks past a first line whose quotes pair up (a quoted header: its names may hold
    commas, but no record spans lines because of it)."""
    try:
        with path.open("rb") as fh:
            if after_header:
                first = fh.readline(1 << 20)
                if not first or first.count(b'"') % 2 or not first.endswith(b"\n"):
                    return True
            empty = not after_header
            while data := fh.read(QUOTE_SCAN_BYTES):
                empty = False
                if b'"' in data:
                    return True
            return empty
    except OSError:
        return True
