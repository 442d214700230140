"""Raw columns (or a request's rows) in any order turned into the model's input, by a fitted schema."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.errors import DataError
from core.schema.cells import category_text, numbers_of
from core.schema.coded import Coded
from core.schema.dates import date_parts, parse_dates
from core.schema.spec import RESERVED_LEVELS, ColumnSpec, Schema
from core.schema.table import RawTable
from core.schema.text import BUCKETS, text_slots

MISSING, UNSEEN = 0, 1  # a category's reserved indices (RESERVED_LEVELS of them)
PARALLEL_ROWS = 20_000  # this many rows are encoded on several threads, a column each


@dataclass
class Encoded:
    """The model's input for some rows, and what encoding them met."""

    x: np.ndarray  # float32 (rows, n_features): numbers filled, indicators, date and text blocks, category indices
    unseen: dict[str, int]  # category column -> values not seen in training
    missing: dict[str, int]  # column -> missing cells

    @property
    def n_unseen(self) -> int:
        return sum(self.unseen.values())

    def numeric_and_categories(self, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
        """(numeric part float32 (date and text blocks included), category indices int64), split."""
        k = len(schema.categorical)
        cut = self.x.shape[1] - k
        return self.x[:, :cut], self.x[:, cut:].astype(np.int64)


def encode_columns(
    schema: Schema | Mapping[str, Any],
    columns: Mapping[str, Any],
    where: str = "predict",
    path: str = "",
    row0: int = 0,
    threads: int | None = None,
) -> Encoded:
    """Encode raw columns (name -> sequence of values; any order, extra columns ignored).

    Values may be numbers, text, ``None`` or NaN; text in ``schema.missing_values``
    is missing. A missing column is a one-line error naming it; a value of the
    wrong kind names its column and row (``row0`` + its position, 1-based). ``threads``: how many columns
    are encoded at once (None: one per core from ``PARALLEL_ROWS`` rows on).
    """
    if not isinstance(schema, Schema):
        schema = Schema.from_json(schema)
    where_path = f"{where}: {path}" if path else where
    absent = [c.name for c in schema.used if c.name not in columns]
    if absent:
        raise DataError(
            f"{where_path} lacks column {absent[0]!r} that the model needs"
            + (f" (and {len(absent) - 1} more)" if len(absent) > 1 else "")
        )
    miss_words = frozenset(schema.missing_values)
    n = None
    for c in schema.used:
        length = len(columns[c.name])
        if n is None:
            n = length
        elif length != n:
            raise DataError(f"{where_path}: column {c.name!r} has {length} values, others have {n}")
    n = n or 0
    used = list(schema.used)
    if threads is None:
        threads = min(8, os.cpu_count() or 1) if n >= PARALLEL_ROWS and len(used) > 1 else 1
    with ThreadPoolExecutor(max_workers=threads) as pool:  # column by column on every core: numpy lets go of the GIL
        done = list(pool.map(lambda c: _encode_column(c, columns[c.name], miss_words, where, path, row0), used))
    scalar = [e for e in done if e.kind in ("number", "bool")]
    by_name = {e.name: e for e in done}
    parts = (
        [e.values for e in scalar]
        + [e.indicator for e in scalar if e.indicator is not None]
        + [by_name[c.name].values for c in schema.blocks]
        + [e.values for e in done if e.kind == "category"]
    )
    width = sum(1 if p.ndim == 1 else p.shape[1] for p in parts)
    xt = np.empty((width, n), dtype=np.float32)  # filled by rows, transposed once: faster than stack
    j = 0
    for part in parts:
        if part.ndim == 1:
            xt[j] = part
            j += 1
        else:  # a date's or a text's block
            xt[j : j + part.shape[1]] = part.T
            j += part.shape[1]
    return Encoded(
        np.ascontiguousarray(xt.T),
        {e.name: e.unseen for e in done if e.unseen},
        {e.name: e.missing for e in done if e.missing},
    )


@dataclass(frozen=True)
class _Column:
    name: str
    kind: str
    values: np.ndarray  # the filled number (float64), the category index (float32), or a block (rows, width)
    indicator: np.ndarray | None  # float32 1 where missing, for a column with an indicator
    missing: int
    unseen: int = 0


def _encode_column(c: ColumnSpec, raw: Any, miss_words: frozenset[str], where: str, path: str, row0: int) -> _Column:
    if c.kind in ("datetime", "text"):
        return _encode_block(c, raw, miss_words, where, path)
    values = _column_array(raw, miss_words)
    if c.kind == "category":
        index = {v: i + RESERVED_LEVELS for i, v in enumerate(c.levels)}
        if isinstance(values, Coded):  # each distinct text looked up once
            lut = np.array([index.get(category_text(v), UNSEEN) for v in values.levels], dtype=np.float32)
            codes = values.map_levels(lut, np.float32(MISSING))
        else:
            codes = np.empty(len(values), dtype=np.float32)
            for k, v in enumerate(values):
                if v is None or (isinstance(v, (float, np.floating)) and math.isnan(v)):
                    codes[k] = MISSING
                else:
                    codes[k] = index.get(category_text(v), UNSEEN)
        return _Column(c.name, c.kind, codes, None, int((codes == MISSING).sum()), int((codes == UNSEEN).sum()))
    x = numbers_of(None, c.name, values, c.kind, where, path, row0)
    m = np.isnan(x)
    n_missing = int(np.count_nonzero(m))
    filled = np.where(m, c.fill, x) if n_missing else x  # float64: rounded to float32 once, as it is copied
    if c.clip is not None:  # an outlier is taken as the fence the schema was fitted with (float32 values)
        filled = np.clip(filled, float(np.float32(c.clip[0])), float(np.float32(c.clip[1])))
    return _Column(c.name, c.kind, filled, m.astype(np.float32) if c.indicator else None, n_missing)


def _encode_block(c: ColumnSpec, raw: Any, miss_words: frozenset[str], where: str, path: str) -> _Column:
    """A date's parts (the training means where missing, then its indicator) or a text's n-gram slots or its
    sentence embedding (core.schema.sentences); a 2-D
    float array of the block's width is taken as the block itself (what the exported graphs take)."""
    if not isinstance(raw, Coded) and np.ndim(raw) == 2:
        block = np.asarray(raw, dtype=np.float32)
        if block.shape[1] != c.width:
            where_path = f"{where}: {path}" if path else where
            raise DataError(
                f"{where_path}: column {c.name!r} is given as {block.shape[1]} numbers a row; the model takes its "
                f"cells, or its pre-step's {c.width} numbers"
            )
        if c.kind == "text" and not c.encoder:  # whole bucket numbers in range, whatever the rows came from
            k = sum(c.slots)
            block = block.copy()
            block[:, :k] = np.clip(np.rint(block[:, :k]), 0, BUCKETS - 1)
        return _Column(c.name, c.kind, block, None, 0)
    values = _column_array(raw, miss_words)
    if c.kind == "text" and c.encoder:
        from core.schema.sentences import embedding_block

        block, n_missing = embedding_block(values, c.encoder, c.fingerprint)
        return _Column(c.name, c.kind, block, None, n_missing)
    if c.kind == "text":
        miss = (
            np.asarray([v is None for v in values], dtype=bool) if not isinstance(values, Coded) else values.missing()
        )
        return _Column(c.name, c.kind, text_slots(values, *c.slots), None, int(miss.sum()))
    seconds, _ = parse_dates(values, c.order)
    miss = np.isnan(seconds)
    parts = date_parts(seconds, c.origin)
    if miss.any():
        parts[miss] = [m for m, _ in c.parts]
    if c.indicator:
        parts = np.concatenate([parts, miss[:, None].astype(np.float64)], axis=1)
    return _Column(c.name, c.kind, parts, None, int(miss.sum()))


def _column_array(values: Any, missing: frozenset[str]) -> Any:
    if isinstance(values, Coded):
        return values.normalised(missing)
    arr = np.asarray(values)
    if arr.dtype.kind in "fiub":
        return arr.astype(np.float64, copy=False)
    out = np.empty(len(arr), dtype=object)
    for k, v in enumerate(arr.tolist()):
        if isinstance(v, str):
            v = v.strip()
            out[k] = None if v in missing else v
        else:
            out[k] = v
    return out


def encode_rows(
    schema: Schema | Mapping[str, Any], rows: Sequence[Mapping[str, Any]], where: str = "request"
) -> Encoded:
    """Encode a list of row mappings ``[{column: value}, ...]`` (a JSON request's ``rows``).

    Keys in any order, extra keys ignored; an absent key, ``None`` or a missing word (``""``) is a missing
    value, as an empty cell of a CSV is. A value of the wrong kind raises :class:`CellError` (its row is the
    row's index in ``rows``).
    """
    if not isinstance(schema, Schema):
        schema = Schema.from_json(schema)
    columns: dict[str, np.ndarray] = {}
    for c in schema.used:
        col = np.empty(len(rows), dtype=object)
        col[:] = [row.get(c.name) for row in rows]
        columns[c.name] = col
    return encode_columns(schema, columns, where)


def encode_table(schema: Schema, table: RawTable) -> Encoded:
    return encode_columns(schema, table.columns, table.where, table.path)


ENCODE_ROWS = 1 << 16  # rows encoded at a time straight into the training tensor


def encode_into(
    schema: Schema,
    table: RawTable,
    out: np.ndarray,
    order: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray,
    release: bool = False,
    block_rows: int | None = None,
) -> Encoded:
    """Encode ``table`` a block of its rows at a time straight into ``out`` (float32, (len(order),
    n_features)): output row ``i`` is table row ``order[i]``, standardised as ``(x - mean) / std`` in float32
    (as a whole table's encoding is). The table is read in file order, so each block's rows land in as many
    runs of ``out`` as ``order`` has sorted parts (training rows, then validation rows).

    ``release`` consumes the table: the pages of the rows already encoded go back to the system as the
    encoded rows fill ``out``, so the two are never both held whole (the columns are emptied at the end).
    Returns what encoding met (``x`` is ``out``).
    """
    from core.host.machine import release_pages
    from core.readers.blocks import check_stop

    index = np.int32 if table.n_rows < 2**31 else np.int64  # each output row's number, in half the memory
    where = np.full(table.n_rows, -1, dtype=index)
    where[order] = np.arange(len(order), dtype=index)
    used = list(schema.used)
    unseen: dict[str, int] = {}
    missing: dict[str, int] = {}
    scale = bool((mean != 0).any() or (std != 1).any())
    step = block_rows or ENCODE_ROWS
    for lo in range(0, table.n_rows, step):
        check_stop()  # a stop asked while the data loads ends it here too
        hi = min(lo + step, table.n_rows)
        enc = encode_columns(
            schema, {c.name: table.columns[c.name][lo:hi] for c in used}, table.where, table.path, row0=lo
        )
        rows = where[lo:hi]
        keep = rows >= 0
        x = enc.x if keep.all() else enc.x[keep]
        if scale:
            x -= mean
            x /= std
        out[rows[keep]] = x
        for name, k in enc.unseen.items():
            unseen[name] = unseen.get(name, 0) + k
        for name, k in enc.missing.items():
            missing[name] = missing.get(name, 0) + k
        del enc, x
        if release:
            for column in table.columns.values():
                release_pages(column.codes if isinstance(column, Coded) else column, hi)
    if release:
        table.columns.clear()
    return Encoded(out, unseen, missing)


def unseen_note(enc: Encoded) -> str:
    """A line about unseen category values, or "" when there were none."""
    if not enc.unseen:
        return ""
    parts = ", ".join(f"{k}: {v}" for k, v in enc.unseen.items())
    return f"{enc.n_unseen} category value(s) not seen in training mapped to the unseen level ({parts})"
