"""A table's columns as read from a CSV, Parquet or JSON lines file (:class:`RawTable`), before any kind is inferred."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
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

    def take(self, rows: np.ndarray, release: bool = False) -> RawTable:
        """These rows of every column; ``release`` empties this table a column at a time as it goes (the
        rows are then held once, not twice)."""
        if not release:
            return RawTable(
                self.where, self.path, {k: v[rows] for k, v in self.columns.items()}, int(len(rows)), self.kind
            )
        taken: dict[str, Column] = {}
        for name in list(self.columns):
            taken[name] = self.columns.pop(name)[rows]
        return RawTable(self.where, self.path, taken, int(len(rows)), self.kind)


def _as_text(values: np.ndarray, missing: frozenset[str]) -> np.ndarray:
    out = np.asarray(values, dtype=object)
    if missing:
        is_missing = np.fromiter((v is None or v in missing for v in out), dtype=bool, count=len(out))
        out = out.copy()
        out[is_missing] = None
    return out


def read_table(
    path: Path, scheme: str, where: str, missing: Sequence[str] = DEFAULT_MISSING, exact: Sequence[str] = ()
) -> RawTable:
    """Read every column of a CSV (``scheme`` "csv"), Parquet ("parquet") or JSON lines ("jsonl") file;
    raise :class:`DataError`.

    CSV and Parquet files are read by blocks of rows, each block's columns converted and the file's
    block freed before the next is read: the table is held once, as its columns. A number column is
    kept as float32, as the model gets it (float64 for the columns ``exact`` names, such as the target,
    and where a magnitude reaches 2**24, beyond which float32 has no room for every integer).
    """
    path = Path(path).expanduser()
    miss = frozenset(missing)
    if scheme in ("parquet", "jsonl"):
        return _read_arrow(path, scheme, where, miss, frozenset(exact))
    fast = _read_csv_fast(path, where, miss, frozenset(exact))
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


EXACT_FLOAT32 = float(2**24)  # float32 holds every integer up to this magnitude


def _narrowed(name: str, col: Column, exact: frozenset[str]) -> Column:
    """A float64 number column as float32, unless ``exact`` names it or a magnitude reaches 2**24."""
    if isinstance(col, np.ndarray) and col.dtype == np.float64 and name not in exact:
        big = len(col) and float(np.fmax.reduce(np.abs(col))) >= EXACT_FLOAT32  # NaN (missing) skipped
        return col if big else col.astype(np.float32)
    return col


class WholeRead(Exception):
    """A CSV file that only the line-precise text reader reads (to accept it, or to say what is wrong)."""


class _Blocks:
    """A table's columns gathered block by block (each block's as :func:`table_blocks` gives them), text
    codes into one list of levels per column."""

    def __init__(self) -> None:
        self.names: list[str] | None = None
        self.parts: dict[str, list[Column]] = {}
        self.n_rows = 0

    def add(self, names: list[str], columns: Sequence[Column]) -> None:
        if self.names is None:
            self.names = names
            self.parts = {name: [] for name in names}
        for name, col in zip(names, columns):
            self.parts[name].append(col)
        self.n_rows += len(columns[0]) if columns else 0

    def columns(self) -> dict[str, Column]:
        """The whole columns, each joined from its blocks (and the blocks freed) one column at a time."""
        from core.host.machine import trim_freed_memory

        out: dict[str, Column] = {}
        joined = 0
        for name in list(self.parts):
            parts = self.parts.pop(name)
            out[name] = _joined(parts)
            joined += len(parts) > 1 and _nbytes(out[name])
            del parts
            if joined >= TRIM_BYTES:  # the blocks' memory goes back as the joined columns take its place
                trim_freed_memory()
                joined = 0
        return out


TRIM_BYTES = 64 << 20  # freed memory is handed back each time this much has been joined or read


def _nbytes(column: Column) -> int:
    return int(column.codes.nbytes if isinstance(column, Coded) else np.asarray(column).nbytes)


def _joined(parts: list[Column]) -> Column:
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(p, Coded) for p in parts):
        index: dict[Any, int] = {}
        codes = []
        for p in parts:
            assert isinstance(p, Coded)
            remap = np.array([index.setdefault(v, len(index)) for v in p.levels.tolist()] + [-1], dtype=np.int32)
            codes.append(remap[p.codes])
        return Coded(np.concatenate(codes), list(index))
    arrays = [np.asarray(p) for p in parts]
    return np.concatenate(arrays, dtype=np.result_type(*arrays))


def _read_csv_fast(path: Path, where: str, missing: frozenset[str], exact: frozenset[str]) -> RawTable | None:
    """pyarrow's reader with type inference, a piece of the file at a time; None when the file needs the
    line-precise text reader."""
    gathered = _Blocks()
    try:
        for names, columns in _csv_block_columns(path, missing, exact):
            gathered.add(names, columns)
    except WholeRead:
        return None
    if gathered.n_rows == 0:
        return None
    return RawTable(where, str(path), gathered.columns(), gathered.n_rows, "csv")


def _csv_block_columns(
    path: Path, missing: frozenset[str], exact: frozenset[str]
) -> Iterator[tuple[list[str], list[Column]]]:
    """A CSV's names and columns a piece of the file at a time, by pyarrow's reader with type inference;
    raises :class:`WholeRead` when the file needs the line-precise text reader: malformed, no rows, names
    twice, a number that is not finite, or a later piece that the first one's types do not fit."""
    import pyarrow as pa

    from core.readers.blocks import check_stop, reading_threads
    from core.readers.csv_typed import typed_csv_blocks

    if not path.is_file():
        raise WholeRead
    threads = reading_threads()
    any_rows = False
    read = 0  # bytes of columns read since pyarrow's pool last gave back what it freed
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:  # column by column on every core
        try:
            for block in typed_csv_blocks(path, sorted(missing)):
                names = [str(n).strip() for n in block.column_names]
                if len(set(names)) != len(names):
                    raise WholeRead
                convert = pool.map if threads and block.num_rows >= 20_000 else map
                narrow = [name not in exact for name in names]  # converted on the column's own thread
                converted = list(convert(lambda c, n: _column(c, missing, n), block.columns, narrow))
                read += block.nbytes
                del block
                if read >= TRIM_BYTES:  # pyarrow's pool keeps what it freed: as much again as the columns
                    pa.default_memory_pool().release_unused()  # read, by the end of a large file
                    read = 0
                if any(c is None for c in converted):
                    raise WholeRead
                if converted and len(converted[0]):
                    any_rows = True
                    yield names, converted
                del converted
                check_stop()
        except (pa.ArrowException, OSError, ValueError):
            raise WholeRead from None
    if not any_rows:
        raise WholeRead


def table_blocks(
    path: Path, scheme: str, where: str, missing: Sequence[str] = DEFAULT_MISSING, exact: Sequence[str] = ()
) -> Iterator[RawTable]:
    """The table of :func:`read_table` as blocks of consecutive rows, one at a time (a CSV's pieces, a
    Parquet file's batches; a JSON lines file whole): the same columns, block by block. A CSV that only
    the line-precise reader reads raises :class:`WholeRead`, possibly after some blocks (``read_table``
    reads it whole, or says what is wrong)."""
    path = Path(path).expanduser()
    miss, keep = frozenset(missing), frozenset(exact)
    if scheme == "csv":
        for names, columns in _csv_block_columns(path, miss, keep):
            yield RawTable(where, str(path), dict(zip(names, columns)), len(columns[0]), "csv")
    elif scheme == "parquet":
        for names, columns in _parquet_block_columns(path, where, miss, keep):
            yield RawTable(where, str(path), dict(zip(names, columns)), len(columns[0]) if columns else 0, "parquet")
    else:
        yield read_table(path, scheme, where, missing, exact)


def table_piece(
    path: Path, start: int, stop: int, typed: Any, where: str, exact: Sequence[str] = (), threads: bool = False
) -> RawTable | None:
    """Bytes ``start:stop`` of a CSV (whole lines, no quote) as :func:`table_blocks` gives their rows: read
    with the types of its first piece (``typed``: ``core.readers.csv_typed.typed_columns``, its missing
    words included), parsed on pyarrow's threads or (``threads`` False) this one, each column converted on
    this thread. None where the blocks must read the file (rows
    the first piece's types do not fit, a value only the text reader takes, a name twice)."""
    import pyarrow as pa

    from core.readers.csv_typed import read_typed_rows

    try:
        block = read_typed_rows(path, start, stop, typed, threads)
    except (pa.ArrowException, OSError, ValueError):
        return None
    names = [str(n).strip() for n in block.column_names]
    miss, keep = frozenset(typed.missing), frozenset(exact)
    columns = [_column(c, miss, name not in keep) for c, name in zip(block.columns, names)]
    if len(set(names)) != len(names) or any(c is None for c in columns):
        return None
    return RawTable(where, str(path), dict(zip(names, columns)), int(block.num_rows), "csv")


def _column(col: Any, missing: frozenset[str], narrow: bool = False) -> Any:
    """A typed pyarrow column as float64 (NaN for missing; float32 when ``narrow``, as :func:`_narrowed`
    makes it) or :class:`Coded` text; None when the text reader must read the file: "nan", "inf" or a value
    beyond float32 written in a cell (it names them), a date."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        values = np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)  # null: NaN
        if col.null_count == len(values):
            return values.astype(np.float32) if narrow else values
        if col.null_count:  # the NaN are the nulls, and the rest lie within float32
            written_nan = int(np.count_nonzero(np.isnan(values))) != col.null_count
            lo, hi = float(np.fmin.reduce(values)), float(np.fmax.reduce(values))
        else:
            written_nan, lo, hi = False, float(values.min()), float(values.max())  # NaN would propagate
        if written_nan or not (-FLOAT32_MAX <= lo and hi <= FLOAT32_MAX):
            return None
        return values.astype(np.float32) if narrow and max(-lo, hi) < EXACT_FLOAT32 else values
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


PARQUET_BATCH_ROWS = 65_536  # a Parquet file is read this many rows at a time


def _read_arrow(path: Path, scheme: str, where: str, missing: frozenset[str], exact: frozenset[str]) -> RawTable:
    """A Parquet ("parquet", by batches of rows) or JSON lines ("jsonl", whole) file's columns, by the types
    the file gives them."""
    from core.readers.arrow_file import read_arrow_table

    if scheme == "parquet":
        return _read_parquet(path, where, missing, exact)

    def read(p: Path) -> Any:
        import pyarrow.json as pajson

        return pajson.read_json(p)

    table = read_arrow_table(path, where, read, "JSON lines file")
    columns = {
        str(name): _narrowed(str(name), _arrow_column(table.column(name), missing), exact)
        for name in table.column_names
    }
    return RawTable(where, str(path), columns, int(table.num_rows), scheme)


def _read_parquet(path: Path, where: str, missing: frozenset[str], exact: frozenset[str]) -> RawTable:
    gathered = _Blocks()
    for names, columns in _parquet_block_columns(path, where, missing, exact):
        gathered.add(names, columns)
    if gathered.n_rows == 0:
        raise DataError(f"{where}: {path} has no data rows")
    return RawTable(where, str(path), gathered.columns(), gathered.n_rows, "parquet")


def _parquet_block_columns(
    path: Path, where: str, missing: frozenset[str], exact: frozenset[str]
) -> Iterator[tuple[list[str], list[Column]]]:
    """A Parquet file's names and columns, at most ``PARQUET_BATCH_ROWS`` rows at a time; raise
    :class:`DataError`.

    A row group is read a column at a time, each converted before the next is read, then given out in
    blocks of rows: pyarrow's ``iter_batches`` held about as much again as the data (its pre-buffered
    row groups), a column of a row group holds a few MB.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from core.readers.blocks import check_stop

    if not path.is_file():
        raise DataError(f"{where}: file not found: {path}")
    try:
        with pq.ParquetFile(path, pre_buffer=False) as pf:
            names = [str(n) for n in pf.schema_arrow.names]
            for group in range(pf.metadata.num_row_groups):
                columns = []
                for name in names:
                    check_stop()
                    chunk = pf.read_row_group(group, columns=[name], use_threads=False).column(0)
                    columns.append(_narrowed(name, _arrow_column(chunk, missing), exact))
                    del chunk
                n = len(columns[0]) if columns else 0
                step = max(1, PARQUET_BATCH_ROWS)
                for lo in range(0, n, step):
                    yield names, [c[lo : lo + step] for c in columns]
                del columns
    except (pa.ArrowException, OSError, ValueError) as exc:
        why = " ".join(str(exc).split())[:120]
        raise DataError(f"{where}: {path} is not a readable Parquet file ({why})") from None


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
