"""Reading a raw table for a model trained on one: its schema encodes the columns, in any order.

Extra columns are ignored, a missing column is a one-line error naming it, a
value of the wrong kind names its column and row; values a category column
never saw in training go to its unseen level and are counted in the input's
notes. An ``id`` column (not a feature) names the rows; the target column,
when present, makes the input a labelled test set.

Torch-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from core.schema import RawTable, Schema, _category_text, encode_columns, read_table, unseen_note


def read_table_input(path: Path, meta: dict[str, Any], scheme: str = "csv") -> dict[str, Any]:
    """The fields of a ``core.services.predict.inputs.PredictInput``: ``ids`` (None: number the rows), ``x``,
    ``labels``, ``notes``; ``scheme`` is the input kind's name ("csv", "parquet", "jsonl")."""
    schema = Schema.from_json(meta["schema"])
    parts, _ = table_parts(
        meta, read_table(path, scheme, "predict", schema.missing_values, exact=(schema.target, "id"))
    )
    return parts


def table_parts(
    meta: dict[str, Any], table: RawTable, row0: int = 0, threads: int | None = None
) -> tuple[dict[str, Any], dict[str, int]]:
    """The fields of a ``PredictInput`` from a table's raw columns (a whole file's, or a block of its rows
    from row ``row0``: an error names the file's row), and the category values training never saw, by column;
    ``threads`` encode the columns (None: ``encode_columns`` chooses)."""
    schema = Schema.from_json(meta["schema"])
    enc = encode_columns(schema, table.columns, table.where, table.path, row0, threads)
    used = {c.name for c in schema.used}
    ids: Any = None
    if "id" in table.columns and "id" not in used:
        values = table.columns["id"].tolist()  # numbers as written: 7, not 7.0
        ids = ["" if v is None or v != v else _category_text(v) for v in values]
    labels = None
    if schema.target in table.columns and schema.target not in used:
        values = table.columns[schema.target]
        texts = [
            "" if v is None or (isinstance(v, float) and np.isnan(v)) else _category_text(v) for v in values.tolist()
        ]  # 1.0 read from a file is class "1", as in training
        if all(texts):
            labels = texts
    note = unseen_note(enc)
    shape = tuple(int(s) for s in meta["input"]["shape"])
    parts = {"ids": ids, "x": enc.x.reshape((len(enc.x), *shape)), "labels": labels, "notes": (note,) if note else ()}
    return parts, dict(enc.unseen)
