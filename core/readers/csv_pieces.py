"""A CSV with one line per record cut into pieces of whole rows (:func:`csv_split`) that other processes
parse apart (:func:`read_csv_rows`); a piece they cannot parse sends the caller back to ``read_csv``."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.readers.csv_columns import Columns, CsvData, Select, convert_options, first_record, table_data

SCAN_BYTES = 8 << 20  # the file is scanned for row starts in blocks of this size: pieces go out as it scans


@dataclass(frozen=True)
class CsvRows:
    """Rows ``first``..``first + count`` of a CSV and the bytes that hold them: a piece one process reads."""

    path: str
    names: list[str]  # the header's names as written (the parser's column names)
    columns: Columns
    first: int
    count: int
    start: int  # byte offsets of the piece: [start, stop)
    stop: int


class CsvSplit:
    """A CSV with one line per record, cut into pieces of whole rows while it is scanned (:func:`csv_split`).

    ``pieces`` yields as it scans, so that pieces are parsed (in other
    processes) while the rest is still being cut. If it meets a quote, a
    value may span lines: it stops and sets ``whole``, and every piece it
    yielded is void; the file must then be read by :func:`read_csv`.
    """

    def __init__(self, path: Path, names: list[str], columns: Columns, data_start: int, data_end: int) -> None:
        self.path = path
        self.names = names
        self.header = [h.strip() for h in names]
        self.columns = columns
        self.data_start = data_start
        self.data_end = data_end
        self.whole = False
        self.n_rows = 0  # rows cut so far: all of them once ``pieces`` is exhausted

    def pieces(self, rows: int, tail_rows: int = 0, tail_bytes: int = 0) -> Iterator[CsvRows]:
        """Pieces of ``rows`` rows each (the last one shorter), in file order; those that start in the last
        ``tail_bytes`` of the file have ``tail_rows`` (so that the processes that parse them finish together)."""
        tail_from = self.data_end - tail_bytes if tail_rows else self.data_end
        first = 0
        starts = np.array([self.data_start], dtype=np.int64)  # where the rows from ``first`` on start
        with open(self.path, "rb") as fh:
            for offset in range(self.data_start, self.data_end, SCAN_BYTES):
                # each block is read into memory of its own, freed with it (a mapping of the whole file kept
                # every page scanned in this process: as much memory as the file, by the end)
                data = os.pread(fh.fileno(), min(SCAN_BYTES, self.data_end - offset), offset)
                if b'"' in data:
                    self.whole = True
                    return
                starts = np.concatenate([starts, np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + (offset + 1)])
                del data
                while len(starts) > (n := tail_rows if starts[0] >= tail_from else rows):
                    yield self._piece(first, starts[: n + 1])
                    first, starts = first + n, starts[n:]
        yield self._piece(first, np.append(starts, self.data_end))
        self.n_rows = first + len(starts)

    def _piece(self, first: int, bounds: np.ndarray) -> CsvRows:
        return CsvRows(
            str(self.path), self.names, self.columns, first, len(bounds) - 1, int(bounds[0]), int(bounds[-1])
        )


def csv_split(path: Path, select: Select) -> CsvSplit | None:
    """A CSV ready to be cut into pieces, or None when it must be read whole by :func:`read_csv`.

    A file is cut when its header is its first line, names no column twice
    and ``select`` accepts it. Quotes stop the cutting (``CsvSplit.whole``);
    pieces that :func:`read_csv_rows` cannot parse (blank lines, bad values)
    also send the caller back to :func:`read_csv`, whose errors name the line
    and the column.
    """
    path = Path(path)
    raw_header = first_record(path)
    if raw_header is None or len(set(raw_header)) != len(raw_header):
        return None
    try:
        cols = select([h.strip() for h in raw_header])
    except Exception:
        return None
    try:
        with path.open("rb") as fh:
            end = fh.seek(0, 2)
            tail = 0
            while end > 0 and tail < 1 << 16:  # line breaks after the last row end nothing
                fh.seek(end - 1)
                if fh.read(1) not in (b"\r", b"\n"):
                    break
                end, tail = end - 1, tail + 1
            fh.seek(0)
            first_line = fh.readline(1 << 20)
    except OSError:
        return None
    if not first_line.endswith(b"\n") or len(first_line) >= end:
        return None  # a header alone (read_csv says so), or one longer than any sane header
    text = first_line.decode("utf-8-sig", errors="replace").rstrip("\r\n")
    if text.split(",") != raw_header and next(csv.reader([text]), None) != raw_header:
        return None  # blank lines before the header, or a header over several lines
    return CsvSplit(path, raw_header, cols, len(first_line), end)


def read_csv_rows(rows: CsvRows) -> CsvData | None:
    """Parse one piece on this thread alone; None when it needs :func:`read_csv` (which then says what is wrong)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        with open(rows.path, "rb") as fh:
            fh.seek(rows.start)
            data = fh.read(rows.stop - rows.start)
        table = pacsv.read_csv(
            pa.BufferReader(data),
            read_options=pacsv.ReadOptions(column_names=rows.names, use_threads=False),
            convert_options=convert_options(rows.names, rows.columns),
        )
    except (pa.ArrowException, OSError, ValueError):
        return None
    if table.num_rows != rows.count:  # a blank line (skipped by pyarrow), or the file changed since it was indexed
        return None
    return table_data(table, rows.names, rows.columns)
