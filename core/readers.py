"""Reading CSV and NPZ files into numpy arrays: the one reader for training and prediction.

CSV: pyarrow's multi-threaded reader parses a well-formed file; when it refuses
one, or the values break a rule (blank, non-finite, too large for float32), the
file is read again by the line-precise reader below, whose one-line error names
the line and the column (it also accepts what only Python's float() reads, such
as ``1_000``). Where both accept a file they give the same float32 values
(parsed as float64, then rounded once), so well-formed files never pay for the
slow reader. A CSV with one line per record can also be cut into pieces of
whole rows (``csv_split``) that other processes parse apart
(``read_csv_rows``); a piece they cannot parse sends the caller back to
``read_csv``. NPZ: ``np.load`` without pickles, checked once.

Every reader goes by blocks (CSV pieces of ``READ_BLOCK_BYTES``, NPZ arrays
in chunks of as many bytes) and asks between blocks whether the caller wants
it to stop (:func:`stop_reading_when`); it then raises :class:`ReadStopped`.
A Ctrl-C while a large file loads ends the command at once, not once the file
is read.

Torch-free: ``core.predict`` imports this at command time.
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import math
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from core.errors import DataError

FLOAT32_MAX = float(np.finfo(np.float32).max)
READ_BLOCK_BYTES = 4 << 20  # a read asks whether to stop after each block of about this many bytes (0.1-0.2 s)


# ----------------------------------------------------------------------------- stopping a read


class ReadStopped(Exception):
    """A read given up between two blocks because its caller asked it to stop (a Ctrl-C, a Stop)."""


_should_stop: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar("should_stop", default=None)


@contextlib.contextmanager
def stop_reading_when(should_stop: Callable[[], bool]) -> Iterator[None]:
    """Reads in this context (this thread) ask ``should_stop()`` between blocks and raise :class:`ReadStopped`."""
    token = _should_stop.set(should_stop)
    try:
        yield
    finally:
        _should_stop.reset(token)


def check_stop() -> None:
    """Raise :class:`ReadStopped` if the reading in progress was asked to stop."""
    should_stop = _should_stop.get()
    if should_stop is not None and should_stop():
        raise ReadStopped("reading stopped")


# ----------------------------------------------------------------------------- CSV


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
    required: Mapping[int, str] = field(default_factory=dict)  # text columns that may not be blank -> their name in errors


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
    header: list[str]              # stripped column names
    x: np.ndarray                  # float32 (rows, len(numeric)), columns in the order asked
    text: dict[int, TextColumn]    # by column index

    @property
    def n_rows(self) -> int:
        return int(self.x.shape[0])


Select = Callable[[list[str]], Columns]


def read_csv(path: Path, where: str, select: Select) -> CsvData:
    """Read the columns ``select(header)`` names; raise :class:`DataError` (or what ``select`` raises)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{where}: file not found: {path}")
    fast = _read_fast(path, select)
    return fast if fast is not None else _read_exact(path, where, select)


def _first_record(path: Path) -> list[str] | None:
    """The first non-blank record of the file (the header), or None if it cannot be read."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            for row in csv.reader(fh):
                if any(cell.strip() for cell in row):
                    return row
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return None


def _read_fast(path: Path, select: Select) -> CsvData | None:
    """pyarrow's reader; None when the file needs the exact reader (to accept it, or to say what is wrong)."""
    raw_header = _first_record(path)
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
                parse_options=pacsv.ParseOptions(newlines_in_values=_has_quotes(path)),
                convert_options=_convert_options(raw_header, cols),
            )
        except (pa.ArrowException, OSError, ValueError):
            return None
    return _table_data(table, raw_header, cols)


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
    convert = _convert_options(raw_header, cols)
    with path.open("rb") as fh:
        for piece in split.pieces(max(1, READ_BLOCK_BYTES // line)):
            check_stop()
            fh.seek(piece.start)
            try:
                table = pacsv.read_csv(pa.BufferReader(fh.read(piece.stop - piece.start)), read_options=read,
                                       convert_options=convert)
            except (pa.ArrowException, ValueError):
                return None
            if table.num_rows != piece.count:  # a blank line, skipped by pyarrow: the exact reader's lines
                return None
            tables.append(table)
    check_stop()
    if split.whole or not tables:
        return None
    return pa.concat_tables(tables)


def _convert_options(raw_header: list[str], cols: Columns) -> Any:
    """pyarrow's conversion: numbers as float64 (never inferred), text as strings that are never null."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    numeric = [raw_header[i] for i in cols.numeric]
    text = [raw_header[i] for i in cols.text]
    types = {**{n: pa.float64() for n in numeric}, **{n: pa.string() for n in text}}
    return pacsv.ConvertOptions(column_types=types, include_columns=list(dict.fromkeys(numeric + text)),
                                strings_can_be_null=False, quoted_strings_can_be_null=False)


def _table_data(table: Any, raw_header: list[str], cols: Columns) -> CsvData | None:
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
        codes[i] = TextColumn(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64),
                              [str(v) for v in encoded.dictionary.to_pylist()])
    return CsvData([h.strip() for h in raw_header], np.ascontiguousarray(xt.T), codes)


# ----------------------------------------------------------------------------- CSV row ranges, read on their own


SCAN_BYTES = 8 << 20  # the file is scanned for row starts in blocks of this size: pieces go out as it scans


@dataclass(frozen=True)
class CsvRows:
    """Rows ``first``..``first + count`` of a CSV and the bytes that hold them: a piece one process reads."""

    path: str
    names: list[str]      # the header's names as written (the parser's column names)
    columns: Columns
    first: int
    count: int
    start: int            # byte offsets of the piece: [start, stop)
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
        import mmap

        tail_from = self.data_end - tail_bytes if tail_rows else self.data_end
        first = 0
        starts = np.array([self.data_start], dtype=np.int64)  # where the rows from ``first`` on start
        with open(self.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            for offset in range(self.data_start, self.data_end, SCAN_BYTES):
                size = min(SCAN_BYTES, self.data_end - offset)
                if mm.find(b'"', offset, offset + size) != -1:
                    self.whole = True
                    return
                block = np.frombuffer(mm, np.uint8, size, offset)
                starts = np.concatenate([starts, np.flatnonzero(block == 10) + (offset + 1)])
                del block  # the map closes only once no array views it
                while len(starts) > (n := tail_rows if starts[0] >= tail_from else rows):
                    yield self._piece(first, starts[:n + 1])
                    first, starts = first + n, starts[n:]
        yield self._piece(first, np.append(starts, self.data_end))
        self.n_rows = first + len(starts)

    def _piece(self, first: int, bounds: np.ndarray) -> CsvRows:
        return CsvRows(str(self.path), self.names, self.columns, first, len(bounds) - 1,
                       int(bounds[0]), int(bounds[-1]))


def csv_split(path: Path, select: Select) -> CsvSplit | None:
    """A CSV ready to be cut into pieces, or None when it must be read whole by :func:`read_csv`.

    A file is cut when its header is its first line, names no column twice
    and ``select`` accepts it. Quotes stop the cutting (``CsvSplit.whole``);
    pieces that :func:`read_csv_rows` cannot parse (blank lines, bad values)
    also send the caller back to :func:`read_csv`, whose errors name the line
    and the column.
    """
    path = Path(path)
    raw_header = _first_record(path)
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
        table = pacsv.read_csv(pa.BufferReader(data),
                               read_options=pacsv.ReadOptions(column_names=rows.names, use_threads=False),
                               convert_options=_convert_options(rows.names, rows.columns))
    except (pa.ArrowException, OSError, ValueError):
        return None
    if table.num_rows != rows.count:  # a blank line (skipped by pyarrow), or the file changed since it was indexed
        return None
    return _table_data(table, rows.names, rows.columns)


def _has_quotes(path: Path) -> bool:
    import mmap

    try:
        with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return mm.find(b'"') != -1
    except (OSError, ValueError):  # e.g. an empty file cannot be mapped
        return True


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


def _numeric_column(path: Path, where: str, name: str, cells: list[str], lines: list[int]) -> np.ndarray:
    def bad(k: int, what: str) -> DataError:
        return DataError(f"{where}: {path} column {name!r} {what} (line {lines[k]}: {cells[k].strip()[:40]!r})")

    stop = len(cells)  # the first cell that is not a number, if any: errors come in line order
    try:
        values = np.fromiter(map(float, cells), dtype=np.float64, count=stop)
    except ValueError:
        for stop, cell in enumerate(cells):
            try:
                float(cell)
            except ValueError:
                break
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


# ----------------------------------------------------------------------------- NPZ


@dataclass(frozen=True)
class NpzData:
    x: np.ndarray                    # float32 (N, ...), finite
    y: np.ndarray | None = None      # labels as stored (N,), when asked for
    class_names: np.ndarray | None = None
    ids: np.ndarray | None = None


X_KEYS = ("x", "X", "features")
Y_KEYS = ("y", "Y", "labels", "target")
ID_KEYS = ("id", "ids")


def read_npz(path: Path, where: str, labels: bool) -> NpzData:
    """Array ``x`` (and ``y`` when ``labels``) from an NPZ, refusing pickles; raise :class:`DataError`."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{where}: file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            keys = set(npz.files)
            xk = next((k for k in X_KEYS if k in keys), None)
            yk = next((k for k in Y_KEYS if k in keys), None)
            if xk is None or (labels and yk is None):
                need = "arrays 'x' and 'y'" if labels else "an array 'x'"
                raise DataError(f"{where}: {path} needs {need}, has: " + ", ".join(sorted(keys)))
            x = _read_member(npz, xk)
            y = np.asarray(npz[yk]) if labels and yk is not None else None
            names = np.asarray(npz["class_names"]) if labels and "class_names" in keys else None
            idk = next((k for k in ID_KEYS if k in keys), None)
            ids = np.asarray(npz[idk]) if idk is not None else None
    except (DataError, ReadStopped):
        raise
    except ValueError as exc:
        if "allow_pickle" in str(exc) and zipfile.is_zipfile(path):  # else numpy took it for a pickle
            raise DataError(
                f"{where}: {path} holds object arrays (pickled Python objects), which are refused; save numeric arrays"
            ) from None
        why = type(exc).__name__ if zipfile.is_zipfile(path) else "not a zip archive"
        raise DataError(f"{where}: {path} is not a readable .npz file ({why})") from None
    except Exception as exc:  # numpy raises many types for a corrupt archive
        raise DataError(f"{where}: {path} is not a readable .npz file ({type(exc).__name__})") from None
    if y is not None and (x.ndim < 2 or y.ndim != 1 or x.shape[0] != y.shape[0]):
        raise DataError(f"{where}: {path}: x must be (N, ...) and y (N,), got {x.shape} and {y.shape}")
    if x.ndim < 1 or x.shape[0] == 0:
        raise DataError(f"{where}: {path} holds no samples")
    if not np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.complexfloating):
        raise DataError(f"{where}: {path}: x must be real numbers, got {x.dtype}")
    if math.prod(x.shape[1:]) == 0:
        raise DataError(f"{where}: {path}: x has no features, shape {x.shape}")
    with np.errstate(over="ignore", invalid="ignore"):  # too large for float32 becomes inf: refused below
        x = np.ascontiguousarray(x, dtype=np.float32)
    if not np.isfinite(x).all():
        raise DataError(f"{where}: {path}: x has NaN or infinite values (or values too large for float32)")
    if y is not None and np.issubdtype(y.dtype, np.floating) and not np.isfinite(y).all():
        raise DataError(f"{where}: {path}: y has NaN or infinite labels")
    if ids is not None and ids.shape[:1] != x.shape[:1]:
        ids = None
    return NpzData(x, y, names, ids)


def _read_member(npz: Any, key: str) -> np.ndarray:
    """Array ``key`` of an open NPZ, read in chunks of ``READ_BLOCK_BYTES`` (asking whether to stop between
    them); what is not a plain array of numbers goes to numpy's own reader, which says what is wrong."""
    try:
        with npz.zip.open(f"{key}.npy") as fh:
            major, _ = np.lib.format.read_magic(fh)
            read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(fh)
            if dtype.hasobject:
                raise ValueError("object array")
            out = np.empty(shape[::-1] if fortran else shape, dtype=dtype)
            view = memoryview(out.reshape(-1).view(np.uint8))
            for lo in range(0, len(view), READ_BLOCK_BYTES):
                check_stop()
                part = view[lo:lo + READ_BLOCK_BYTES]
                if fh.readinto(part) != len(part):
                    raise ValueError("truncated array")
            check_stop()
            return out.T if fortran else out
    except (KeyError, ValueError, OSError, zipfile.BadZipFile, EOFError):
        return np.asarray(npz[key])


@dataclass(frozen=True)
class StoredArray:
    """A float32 array kept uncompressed inside a file (an NPZ written by ``np.savez``): processes that
    need some of its rows read them there (:meth:`rows`) instead of being sent them."""

    path: str
    offset: int              # where the array's bytes start in the file
    shape: tuple[int, ...]

    def rows(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo``..``hi`` (float32, C order), read from the file."""
        per_row = math.prod(self.shape[1:])
        with open(self.path, "rb") as fh:
            fh.seek(self.offset + lo * per_row * 4)
            data = np.fromfile(fh, np.dtype("<f4"), count=(hi - lo) * per_row)
        if data.size != (hi - lo) * per_row:
            raise DataError(f"predict: {self.path} changed while it was being read")
        return data.astype(np.float32, copy=False).reshape((hi - lo, *self.shape[1:]))


def stored_npz_x(path: Path) -> StoredArray | None:
    """Where an NPZ holds ``x`` (the array :func:`read_npz` reads) as little-endian float32 in C order,
    uncompressed; None for anything else (compressed with ``savez_compressed``, another dtype)."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            key = next((f"{k}.npy" for k in X_KEYS if f"{k}.npy" in names), None)
            if key is None:
                return None
            info = zf.getinfo(key)
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:  # compressed or encrypted
            return None
        with open(path, "rb") as fh:
            fh.seek(info.header_offset)
            local = fh.read(30)  # the entry's local header: its name and extra field lengths are its own
            if len(local) != 30 or local[:4] != b"PK\x03\x04":
                return None
            name_len, extra_len = struct.unpack("<HH", local[26:30])
            start = info.header_offset + 30 + name_len + extra_len
            fh.seek(start)
            major, _ = np.lib.format.read_magic(fh)
            if major not in (1, 2):
                return None
            read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(fh)
            offset = fh.tell()
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None
    if fortran or dtype != np.dtype("<f4") or not shape or offset + math.prod(shape) * 4 > start + info.file_size:
        return None
    return StoredArray(str(path), offset, tuple(int(s) for s in shape))
