"""A source as read, before the split: arrays or image paths, and what reading it noted."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from core.readers import NpzRows
from core.schema import Inferred, RawTable
from core.schema.coded import Column


def where(source: str) -> str:
    """The prefix of a source's errors: a file source's messages name the file themselves."""
    return f"data: {source}" if source.startswith("builtin:") else "data"


@dataclass
class RawSource:
    """A loaded source before the split: arrays, or image paths."""

    name: str
    class_names: list[str]
    y: np.ndarray
    x: np.ndarray | None = None
    rows: NpzRows | None = None  # an array left in its file, read by blocks (in place of x)
    paths: list[str] | None = None
    feature_names: list[str] = field(default_factory=list)
    image_shape: tuple[int, int, int] | None = None
    task: str = "classification"
    table: RawTable | None = None  # csv:, parquet: the columns, encoded once the split is known
    kinds: dict[str, Inferred] = field(default_factory=dict)
    target_raw: Column | None = None  # the target's cells of the rows kept
    dropped: int = 0
    notes: list[tuple[str, str]] = field(default_factory=list)

    def x_blocks(self) -> Iterator[tuple[int, int, np.ndarray]]:
        """The samples as float32 rows ``(lo, hi, x[lo:hi])``, a block at a time (an array in memory: one)."""
        if self.rows is not None:
            yield from self.rows.blocks()
            return
        assert self.x is not None
        x = self.x.reshape(len(self.x), -1)
        yield 0, len(x), x
