"""A CSV as typed pyarrow tables (types inferred), read in pieces that pyarrow's threads parse, one piece at a
time (``typed_csv_blocks``) or whole (``read_typed_csv``).

A file with no quote is cut at line breaks into pieces of about
``PIECES_PER_BLOCK`` read blocks (``blocks.READ_BLOCK_BYTES``, looked up at each read); the first (with the header) is read with type inference,
the others with the types it found (integers widened to float64, so a later
``1.5`` is still a number), each by ``pyarrow.csv.read_csv`` on all cores,
asking between pieces whether to stop. A file with quotes (a value may span
lines) goes through pyarrow's streaming reader, block by block. None when
pyarrow cannot read it as one table (a later piece holds what the first
piece's types do not foresee, a malformed line): the caller then reads it
with the line-precise reader, whose errors name the line.

``typed_columns`` gives the names and types that first piece has, and
``read_typed_rows`` reads any byte range of whole lines with them: other
processes each read their own rows of the file exactly as the pieces do.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.readers import blocks
from core.readers.blocks import check_stop
from core.readers.csv_columns import has_quotes

PIECES_PER_BLOCK = 4  # 16 MB pieces: about 0.05-0.1 s of parsing on two cores, a Stop is noticed within that


def read_typed_csv(path: Path, missing: Sequence[str]) -> Any:
    """The file as a pyarrow table (every column, types inferred, ``missing`` words null), or None."""
    import pyarrow as pa

    try:
        tables = list(typed_csv_blocks(path, missing))
    except (pa.ArrowException, OSError, ValueError):
        return None
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def typed_csv_blocks(path: Path, missing: Sequence[str]) -> Iterator[Any]:
    """The file's rows as pyarrow tables of consecutive rows, one piece (or block) at a time, every piece
    with the types the first one has; raises ``pyarrow.ArrowException`` (or ``OSError``, ``ValueError``)
    when pyarrow cannot read the file that way: the caller reads it with the line-precise reader."""
    convert = typed_convert_options(missing)
    return _streamed(path, convert) if has_quotes(path, after_header=True) else _in_pieces(path, convert)


def typed_convert_options(missing: Sequence[str]) -> Any:
    """pyarrow's conversion of a typed read: types inferred, ``missing`` words and empty cells null."""
    import pyarrow.csv as pacsv

    return pacsv.ConvertOptions(null_values=sorted(missing), strings_can_be_null=True, quoted_strings_can_be_null=True)


def _streamed(path: Path, convert: Any) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    reader = pacsv.open_csv(
        path,
        read_options=pacsv.ReadOptions(block_size=blocks.READ_BLOCK_BYTES, use_threads=blocks.reading_threads()),
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=convert,
    )
    any_rows = False
    for batch in reader:
        check_stop()
        any_rows = True
        yield pa.Table.from_batches([batch], schema=reader.schema)
    if not any_rows:
        yield reader.schema.empty_table()


def _in_pieces(path: Path, convert: Any) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    schema = None
    read_rest = None
    threads = blocks.reading_threads()
    with path.open("rb", buffering=0) as fh:
        for piece in _pieces(fh.fileno(), os.fstat(fh.fileno()).st_size, PIECES_PER_BLOCK * blocks.READ_BLOCK_BYTES):
            check_stop()
            # each piece is read into memory of its own, freed with it (a mapping of the whole file kept
            # pages read in this process until the end)
            data = pa.py_buffer(piece)
            del piece
            if schema is None:  # the header's piece: names and types inferred
                first = pacsv.read_csv(
                    data, read_options=pacsv.ReadOptions(use_threads=threads), convert_options=convert
                )
                schema = _widened(first.schema)
                yield first.cast(schema)
                read_rest = (
                    pacsv.ReadOptions(column_names=first.column_names, use_threads=threads),
                    _typed_options(schema, convert),
                )
                continue
            assert read_rest is not None
            yield pacsv.read_csv(data, read_options=read_rest[0], convert_options=read_rest[1])
    check_stop()
    if schema is None:
        raise ValueError("empty file")


def _pieces(fd: int, end: int, size: int) -> Iterator[bytes]:
    """The file's bytes in pieces of whole lines, about ``size`` each, the first one holding the header;
    each read once, into memory of its own."""
    start = 0
    while start < end:
        stop = min(start + size, end)
        while stop < end:  # the piece goes on to the end of the line it stops in
            window = os.pread(fd, 1 << 16, stop)
            cut = window.find(b"\n")
            if cut != -1 or not window:
                stop = stop + cut + 1 if cut != -1 else end
                break
            stop += len(window)
        yield os.pread(fd, stop - start, start)
        start = stop


def _widened(schema: Any) -> Any:
    """The first piece's types, integers widened to float64 (a later ``1.5`` is still a number)."""
    import pyarrow as pa

    return pa.schema([pa.field(f.name, pa.float64() if pa.types.is_integer(f.type) else f.type) for f in schema])


def _typed_options(schema: Any, convert: Any) -> Any:
    import pyarrow.csv as pacsv

    return pacsv.ConvertOptions(
        column_types={f.name: f.type for f in schema},
        null_values=convert.null_values,
        strings_can_be_null=True,
        quoted_strings_can_be_null=True,
    )


@dataclass(frozen=True)
class TypedColumns:
    """A CSV's column names as its header spells them and the types its first piece gave them (widened):
    what every other piece is read with. Small and picklable: it travels with each piece to a process."""

    names: list[str]
    schema: Any  # pyarrow.Schema
    missing: list[str]


def typed_columns(path: Path, missing: Sequence[str]) -> TypedColumns:
    """The names and types of the first piece ``typed_csv_blocks`` reads (the same bytes, the same
    inference); raises ``pyarrow.ArrowException``, ``OSError`` or ``ValueError`` as it does."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    with path.open("rb", buffering=0) as fh:
        first = next(
            _pieces(fh.fileno(), os.fstat(fh.fileno()).st_size, PIECES_PER_BLOCK * blocks.READ_BLOCK_BYTES), b""
        )
    if not first:
        raise ValueError("empty file")
    table = pacsv.read_csv(pa.py_buffer(first), convert_options=typed_convert_options(missing))
    return TypedColumns(table.column_names, _widened(table.schema), sorted(missing))


def read_typed_rows(path: Path, start: int, stop: int, typed: TypedColumns, threads: bool = False) -> Any:
    """Bytes ``start:stop`` of the file (whole lines after the header) as a pyarrow table of ``typed``'s
    columns, parsed on pyarrow's threads or (``threads`` False) this thread alone; raises ``pyarrow.ArrowException`` (or ``OSError``, ``ValueError``)
    where the rows do not fit those types."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    with path.open("rb", buffering=0) as fh:
        data = os.pread(fh.fileno(), stop - start, start)
    read = pacsv.ReadOptions(column_names=typed.names, use_threads=threads)
    return pacsv.read_csv(
        pa.py_buffer(data),
        read_options=read,
        convert_options=_typed_options(typed.schema, typed_convert_options(typed.missing)),
    )
