"""A source described for a picker: sizes, classes, a table's columns and a small preview of rows or images."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from core.config import DataConfig
from core.data.images import decode_image
from core.data.info import DatasetInfo
from core.data.prepare import fit_table
from core.data.sources import read_source

PREVIEW_ROWS = 5
PREVIEW_IMAGES = 8


def describe_source(source: str, target: str = "label", image_size: int = 0, task: str = "auto",
                    columns: Any = (), missing: Sequence[str] | None = None) -> DatasetInfo:
    """Describe a source for a picker: sizes, classes and a small preview.

    A table's description carries its schema (fitted on every row: a preview, not the training fit) so
    that a window shows each column's kind, missing cells and levels from the object the engine uses.
    """
    extra: dict[str, Any] = {"columns": tuple(dict(columns).items()) if columns else ()}
    if missing is not None:
        extra["missing"] = tuple(missing)
    dcfg = DataConfig(source=source, target=target, image_size=image_size, **extra)
    raw = read_source(dcfg, task)
    n = int(raw.y.shape[0])
    images: list[tuple[np.ndarray, str]] = []
    rows: list[tuple[Any, ...]] = []
    schema = fit_table(raw, dcfg, np.arange(n)) if raw.table is not None else None
    regression = raw.task == "regression"

    def shown(i: int) -> str:
        if raw.target_raw is not None and regression:
            return str(raw.target_raw[i])
        return str(raw.y[i]) if regression else raw.class_names[raw.y[i]]

    if schema is not None and not (all(c.kind == "number" and not c.indicator for c in schema.used)
                                   and len(schema.used) == len(schema.columns)):
        assert raw.table is not None
        used = [c.name for c in schema.used]
        raw.feature_names = used
        raw.x = np.zeros((n, len(used)), np.float32)
        for i in range(min(PREVIEW_ROWS, n)):
            cells = tuple("" if (v := raw.table.columns[c][i]) is None or (isinstance(v, float) and math.isnan(v))
                          else v for c in used)
            rows.append(cells + (shown(i),))
        input_shape: tuple[int, ...] = (schema.n_features,)
    elif raw.paths is not None:
        assert raw.image_shape is not None
        step = max(1, n // PREVIEW_IMAGES)
        for i in range(0, n, step)[:PREVIEW_IMAGES]:
            arr = decode_image(raw.paths[i], raw.image_shape)
            arr = (arr.transpose(1, 2, 0) * 255).astype(np.uint8)
            images.append((arr[..., 0] if arr.shape[2] == 1 else arr, raw.class_names[raw.y[i]]))
        input_shape: tuple[int, ...] = raw.image_shape
    else:
        assert raw.x is not None
        input_shape = tuple(raw.image_shape) if raw.image_shape is not None else (int(raw.x.shape[1]),)
        for i in range(min(PREVIEW_ROWS, n)):
            rows.append(tuple(float(v) for v in raw.x[i]) + (shown(i),))
        if raw.image_shape is not None:
            c, h, w = raw.image_shape
            for i in range(min(PREVIEW_IMAGES, n)):
                img = raw.x[i].reshape(c, h, w)
                lo, hi = float(img.min()), float(img.max())
                img = ((img - lo) / (hi - lo or 1.0) * 255).astype(np.uint8)
                images.append((img[0] if c == 1 else img.transpose(1, 2, 0), raw.class_names[raw.y[i]]))
    counts = () if regression else tuple(int(c) for c in np.bincount(raw.y, minlength=len(raw.class_names)))
    return DatasetInfo(
        name=raw.name, n_samples=n, input_shape=input_shape,
        num_classes=1 if regression else len(raw.class_names),
        class_names=tuple(raw.class_names), feature_names=tuple(raw.feature_names),
        image_shape=raw.image_shape, preview_rows=tuple(rows), preview_images=tuple(images),
        task=raw.task, categories=tuple(schema.cardinalities) if schema is not None else (),
        schema=schema.to_json() if schema is not None else None, class_counts=counts, dropped_rows=raw.dropped,
        notes=tuple(raw.notes),
    )
