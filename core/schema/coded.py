"""A text column as codes into its distinct values, as a table's reader gives it (:class:`Coded`).

A CSV's text column of 300,000 cells has a handful of distinct values: kept
as one int32 code per row (-1 where the cell is missing) and the distinct
texts once, inference, fitting and encoding look at each distinct text once
and at the codes with numpy, never at a cell at a time. It reads like the
object array it stands for (a cell is its ``str`` or ``None``; a mask or an
index array gives another :class:`Coded`; ``np.asarray`` gives the object
array), so code that does not know it still gets the same values.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeAlias

import numpy as np


class Coded:
    """Cells as ``codes`` (int32, -1 for missing) into ``levels`` (distinct texts, object array)."""

    __slots__ = ("codes", "levels")
    dtype = np.dtype(object)
    ndim = 1

    def __init__(self, codes: np.ndarray, levels: Any) -> None:
        self.codes = np.asarray(codes, dtype=np.int32)
        self.levels = np.asarray(list(levels), dtype=object)

    @property
    def shape(self) -> tuple[int]:
        return (len(self.codes),)

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)):
            code = int(self.codes[key])
            return None if code < 0 else self.levels[code]
        return Coded(self.codes[key], self.levels)

    def _cells(self) -> np.ndarray:
        table = np.empty(len(self.levels) + 1, dtype=object)
        table[:-1] = self.levels
        table[-1] = None  # code -1: the last entry
        return table[self.codes]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        cells = self._cells()
        return cells if dtype is None else cells.astype(dtype)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cells().tolist())

    def tolist(self) -> list[Any]:
        return self._cells().tolist()

    def missing(self) -> np.ndarray:
        return self.codes < 0

    def present_levels(self) -> np.ndarray:
        """The indices of the levels some cell holds (in level order)."""
        present = self.codes[self.codes >= 0]
        return (
            np.flatnonzero(np.bincount(present, minlength=len(self.levels)))
            if len(present)
            else np.empty(0, dtype=np.int64)
        )

    def distinct(self) -> list[str]:
        """The distinct texts the cells hold."""
        return [str(v) for v in self.levels[self.present_levels()]]

    def map_levels(self, table: np.ndarray, missing: Any) -> np.ndarray:
        """Each cell's entry of ``table`` (one per level), ``missing`` where the cell is missing."""
        full = np.empty(len(table) + 1, dtype=np.asarray(table).dtype)
        full[:-1] = table
        full[-1] = missing
        return full[self.codes]

    def normalised(self, missing: frozenset[str]) -> Coded:
        """The cells stripped, those that are one of the ``missing`` words missing (levels merged by text)."""
        texts = [str(v).strip() for v in self.levels]
        index: dict[str, int] = {}
        remap = np.array(
            [-1 if t in missing else index.setdefault(t, len(index)) for t in texts] + [-1], dtype=np.int32
        )
        if len(index) == len(texts) and texts == [str(v) for v in self.levels]:
            return self
        return Coded(remap[self.codes], list(index))


# A table's column as read: an object or float64 array, or a text column's codes.
Column: TypeAlias = "np.ndarray | Coded"


def from_arrow(column: Any) -> Coded:
    """A pyarrow string (or chunked string) column, nulls missing, as :class:`Coded`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = pc.dictionary_encode(column)
    codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
    return Coded(codes, encoded.dictionary.to_pylist())
