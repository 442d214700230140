"""A source loaded for training: read, split, a table's schema fitted on the training rows, standardised.

``load_data`` returns :class:`PreparedData`: a seeded stratified train/validation
split, standardised with statistics computed on the training split. In-memory
tensors are moved to shared memory so worker processes map them instead of
copying. Image folders stay on disk and are decoded lazily by a DataLoader in
each training worker (``data.loader_workers`` processes).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from core.config import DataConfig
from core.data.images import image_stats
from core.data.info import DatasetInfo, ImageSplit, PreparedData, Split, TensorSplit
from core.data.raw import RawSource, where
from core.data.sources import read_source
from core.data.split import random_split, stratified_split
from core.errors import DataError
from core.readers import check_stop
from core.schema import Schema


def fit_table(raw: RawSource, cfg: DataConfig, train_idx: np.ndarray) -> Schema:
    """Fit the table's schema on the training rows; set ``raw.x`` (encoded), ``raw.y`` and the feature names."""
    from core.schema import encode_table, fit_schema

    assert raw.table is not None and raw.target_raw is not None
    y_train = raw.y[train_idx].astype(np.float64) if raw.task == "regression" else None
    schema = fit_schema(
        raw.table, cfg.target, raw.kinds, raw.task, raw.class_names, y_train, train_idx, cfg.standardize, cfg.missing
    )
    raw.x = encode_table(schema, raw.table).x
    for c in schema.numeric:
        if c.clip is not None:
            raw.notes.append(
                (
                    "info",
                    f"column {c.name!r}: {c.outliers} training value(s) far outside the rest are "
                    f"taken as {c.clip[0]:.6g} to {c.clip[1]:.6g} (here and wherever the model "
                    "is used)",
                )
            )
    raw.feature_names = schema.feature_names
    if raw.task == "regression":
        raw.y = schema.encode_target(raw.target_raw, where(cfg.source))
    return schema


def _split(raw: RawSource, cfg: DataConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if raw.task == "regression":
        return random_split(len(raw.y), cfg.val_fraction, seed)
    return stratified_split(raw.y, cfg.val_fraction, seed)


def load_data(cfg: DataConfig, seed: int = 0, share: bool = True, task: str = "auto") -> PreparedData:
    """Load, split and standardise a source; tensors go to shared memory when ``share``.

    ``task`` is ``train.task``: a table's target is classes or a number (auto: by its values).
    """
    raw = read_source(cfg, task)
    check_stop()  # a read asks between its blocks; so do the steps after it
    n = int(raw.y.shape[0])
    if n < 2:
        raise DataError(f"data: {cfg.source}: needs at least 2 samples, has {n}")
    train_idx, val_idx = _split(raw, cfg, seed)
    if len(train_idx) == 0:
        raise DataError(f"data: {cfg.source}: no training samples left after the validation split")
    schema = fit_table(raw, cfg, train_idx) if raw.table is not None else None
    regression = raw.task == "regression"
    if regression and schema is None:  # builtin:diabetes: standardise the target as a table's is
        y_tr = raw.y[train_idx].astype(np.float64)
        t_mean, t_std = float(y_tr.mean()), float(y_tr.std()) or 1.0
        raw.y = ((raw.y - t_mean) / t_std).astype(np.float32)
        schema_json: dict[str, Any] | None = {
            "target": {"name": "target", "kind": "number", "mean": t_mean, "std": t_std},
            "task": "regression",
        }
    else:
        schema_json = schema.to_json() if schema is not None else None
    counts = () if regression else tuple(int(c) for c in np.bincount(raw.y[train_idx], minlength=len(raw.class_names)))
    info_of = functools.partial(  # what the image and the tensor data share
        DatasetInfo,
        name=raw.name,
        n_samples=n,
        num_classes=1 if regression else len(raw.class_names),
        class_names=tuple(raw.class_names),
        feature_names=tuple(raw.feature_names),
        image_shape=raw.image_shape,
        n_train=len(train_idx),
        n_val=len(val_idx),
        task=raw.task,
        categories=tuple(schema.cardinalities) if schema is not None else (),
        schema=schema_json,
        class_counts=counts,
        dropped_rows=raw.dropped,
        notes=tuple(raw.notes),
    )
    if raw.paths is not None:
        assert raw.image_shape is not None
        if cfg.standardize:
            mean, std = image_stats([raw.paths[i] for i in train_idx], raw.image_shape, seed)
        else:
            mean, std = [0.0] * raw.image_shape[0], [1.0] * raw.image_shape[0]
        info = info_of(input_shape=raw.image_shape, mean=tuple(mean), std=tuple(std))
        train_s: Split = ImageSplit(tuple(raw.paths[i] for i in train_idx), tuple(int(raw.y[i]) for i in train_idx))
        val_s: Split = ImageSplit(tuple(raw.paths[i] for i in val_idx), tuple(int(raw.y[i]) for i in val_idx))
        return PreparedData(info, train_s, val_s)
    assert raw.x is not None
    x = raw.x
    if schema is not None:  # a table's statistics come with its schema (identity past the numbers)
        s_mean, s_std = schema.stats()
        f_mean, f_std = np.asarray(s_mean, dtype=np.float32), np.asarray(s_std, dtype=np.float32)
    elif cfg.standardize:
        f_mean = x[train_idx].mean(axis=0)
        f_std = x[train_idx].std(axis=0)
        f_std = np.where(f_std < 1e-6, 1.0, f_std).astype(np.float32)  # constant pixels stay 0
    else:
        f_mean = np.zeros(x.shape[1], dtype=np.float32)
        f_std = np.ones(x.shape[1], dtype=np.float32)
    check_stop()
    xs = torch.from_numpy(((x - f_mean) / f_std).astype(np.float32))
    # images (digits, an NPZ of images) reach every model as (C, H, W), as from an image folder
    input_shape = tuple(raw.image_shape) if raw.image_shape is not None else (int(x.shape[1]),)
    xs = xs.reshape(len(xs), *input_shape)
    ys = torch.from_numpy(raw.y)
    tr = torch.from_numpy(train_idx)
    va = torch.from_numpy(val_idx)
    train = TensorSplit(xs[tr].contiguous(), ys[tr].contiguous())
    val = TensorSplit(xs[va].contiguous(), ys[va].contiguous())
    check_stop()
    if share:
        for t in (train.x, train.y, val.x, val.y):
            t.share_memory_()
    info = info_of(input_shape=input_shape, mean=tuple(float(m) for m in f_mean), std=tuple(float(s) for s in f_std))
    return PreparedData(info, train, val)
