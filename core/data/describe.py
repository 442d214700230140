"""A source described for a picker: sizes, classes, a table's columns and a small preview of rows or images.

A table is described in two steps: its columns (kinds, missing cells, levels) need no target, so a table whose
configured target is not one of its columns is still listed (``DatasetInfo.needs_target``), with
:func:`core.schema.propose_target` naming the column most likely meant; the task and the fitted schema follow once the
target is a column. :func:`describe_columns` lists the columns alone, for a table whose whole description fails.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.config import DataConfig
from core.data.images import decode_image
from core.data.info import DatasetInfo
from core.data.prepare import fit_table
from core.data.sources import read_source, read_source_table, table_source
from core.errors import DataError
from core.schema import Inferred, RawTable, infer_kinds
from core.schema.cells import distinct_texts
from core.schema.coded import Column

PREVIEW_ROWS = 5
PREVIEW_IMAGES = 8
MAX_PREVIEW_IMAGES = 24  # one image of each class up to this many classes


def preview_indices(y: np.ndarray, classes: int, n: int) -> list[int]:
    """The samples a preview shows: the first of each class, in class order (ten classes, ten images: every
    class seen), then others spread over the data set, PREVIEW_IMAGES at least and MAX_PREVIEW_IMAGES at most."""
    k = min(n, max(PREVIEW_IMAGES, min(classes, MAX_PREVIEW_IMAGES)))
    labels = np.asarray(y[:n])
    chosen: list[int] = []
    if classes > 1 and labels.dtype.kind in "iu":
        present, first = np.unique(labels, return_index=True)
        chosen = [int(first[j]) for j in np.argsort(present, kind="stable")][:k]
    taken = set(chosen)
    step = max(1, n // max(1, k))
    chosen += [i for i in range(0, n, step) if i not in taken][: k - len(chosen)]
    return chosen


def _column_json(name: str, inf: Inferred, values: Column) -> dict[str, Any]:
    """A column as a listing shows it before any fit: kind, missing cells, why it is ignored, its levels."""
    out: dict[str, Any] = {"name": name, "kind": inf.kind, "missing": inf.missing}
    if inf.reason:
        out["reason"] = inf.reason
    if inf.kind == "category":
        out["levels"] = sorted(distinct_texts(values))
    if inf.kind == "datetime":
        out["order"] = inf.order
    if inf.kind == "text":
        out["distinct"] = inf.levels
    return out


def _columns_only(table: RawTable, dcfg: DataConfig) -> DatasetInfo:
    """A table's columns alone, the target's aside when it is one: each one's inferred kind, no task."""
    kinds = infer_kinds(table, dcfg.target, dict(dcfg.columns))
    columns = [_column_json(name, inf, table.columns[name]) for name, inf in kinds.items()]
    notes: tuple[tuple[str, str], ...] = ()
    if dcfg.target not in table.columns:
        notes = (
            (
                "warning",
                f"target column {dcfg.target!r} not found in {table.path}; columns: "
                + ", ".join(table.names[:20])
                + (" ..." if len(table.names) > 20 else "")
                + " (set data.target)",
            ),
        )
    return DatasetInfo(
        name=Path(table.path).stem,
        n_samples=table.n_rows,
        input_shape=(),
        num_classes=0,
        class_names=(),
        task="",
        schema={"columns": columns, "target": None},
        table_columns=tuple(table.names),
        notes=notes,
    )


def describe_columns(
    source: str, target: str = "label", columns: Any = (), missing: Sequence[str] | None = None
) -> DatasetInfo:
    """A csv: or parquet: source's columns alone (kinds, missing cells, levels; the target's aside when it is a
    column), without fitting anything: what a picker lists while the whole description fails (a column with no
    value, a target with one class), so that a kind can be set or another target picked."""
    extra: dict[str, Any] = {"columns": tuple(dict(columns).items()) if columns else ()}
    if missing is not None:
        extra["missing"] = tuple(missing)
    dcfg = DataConfig(source=source, target=target, **extra)
    table = read_source_table(dcfg)
    if table is None:
        raise DataError(f"data: {source} is not a table (csv: or parquet:)")
    return _columns_only(table, dcfg)


def describe_source(
    source: str,
    target: str = "label",
    image_size: int = 0,
    task: str = "auto",
    columns: Any = (),
    missing: Sequence[str] | None = None,
) -> DatasetInfo:
    """Describe a source for a picker: sizes, classes and a small preview.

    A table's description carries its schema (fitted on every row: a preview, not the training fit) so
    that a window shows each column's kind, missing cells and levels from the object the engine uses.
    A table whose ``target`` is not one of its columns is described by its columns alone
    (``needs_target``; no task, no preview).
    """
    extra: dict[str, Any] = {"columns": tuple(dict(columns).items()) if columns else ()}
    if missing is not None:
        extra["missing"] = tuple(missing)
    dcfg = DataConfig(source=source, target=target, image_size=image_size, **extra)
    table = read_source_table(dcfg)
    if table is not None and target not in table.columns:
        return _columns_only(table, dcfg)
    raw = table_source(table, dcfg, task) if table is not None else read_source(dcfg, task)
    n = int(raw.y.shape[0])
    images: list[tuple[np.ndarray, str]] = []
    rows: list[tuple[Any, ...]] = []
    schema = fit_table(raw, dcfg, np.arange(n)) if raw.table is not None else None
    regression = raw.task == "regression"

    def shown(i: int) -> str:
        if raw.target_raw is not None and regression:
            return str(raw.target_raw[i])
        return str(raw.y[i]) if regression else raw.class_names[raw.y[i]]

    if schema is not None and not (
        all(c.kind == "number" and not c.indicator for c in schema.used) and len(schema.used) == len(schema.columns)
    ):
        assert raw.table is not None
        used = [c.name for c in schema.used]
        raw.feature_names = used
        raw.x = np.zeros((n, len(used)), np.float32)
        for i in range(min(PREVIEW_ROWS, n)):
            cells = tuple(
                "" if (v := raw.table.columns[c][i]) is None or (isinstance(v, float) and math.isnan(v)) else v
                for c in used
            )
            rows.append(cells + (shown(i),))
        input_shape: tuple[int, ...] = (schema.n_features,)
    elif raw.paths is not None:
        assert raw.image_shape is not None
        for i in preview_indices(raw.y, len(raw.class_names), n):
            arr = decode_image(raw.paths[i], raw.image_shape)
            arr = (arr.transpose(1, 2, 0) * 255).astype(np.uint8)
            images.append((arr[..., 0] if arr.shape[2] == 1 else arr, raw.class_names[raw.y[i]]))
        input_shape = raw.image_shape
    else:
        if raw.x is None:  # an array left in its file: its first block holds the preview
            first = next(raw.x_blocks())[2]
            raw.x = first.reshape(len(first), -1)
        n_features = len(raw.feature_names) if raw.rows is not None else int(raw.x.shape[1])
        input_shape = tuple(raw.image_shape) if raw.image_shape is not None else (n_features,)
        n_shown = min(len(raw.x), n)
        for i in range(min(PREVIEW_ROWS, n_shown)):
            rows.append(tuple(float(v) for v in raw.x[i]) + (shown(i),))
        if raw.image_shape is not None:
            c, h, w = raw.image_shape
            for i in preview_indices(raw.y[:n_shown], len(raw.class_names), n_shown):
                img = raw.x[i].reshape(c, h, w)
                lo, hi = float(img.min()), float(img.max())
                img = ((img - lo) / (hi - lo or 1.0) * 255).astype(np.uint8)
                images.append((img[0] if c == 1 else img.transpose(1, 2, 0), raw.class_names[raw.y[i]]))
    counts = () if regression else tuple(int(c) for c in np.bincount(raw.y, minlength=len(raw.class_names)))
    return DatasetInfo(
        name=raw.name,
        n_samples=n,
        input_shape=input_shape,
        num_classes=1 if regression else len(raw.class_names),
        class_names=tuple(raw.class_names),
        feature_names=tuple(raw.feature_names),
        image_shape=raw.image_shape,
        preview_rows=tuple(rows),
        preview_images=tuple(images),
        task=raw.task,
        categories=tuple(schema.cardinalities) if schema is not None else (),
        texts=tuple(schema.text_slots) if schema is not None else (),
        schema=schema.to_json() if schema is not None else None,
        class_counts=counts,
        dropped_rows=raw.dropped,
        notes=tuple(raw.notes),
        table_columns=tuple(table.names) if table is not None else (),
    )
