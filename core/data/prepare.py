"""A source loaded for training: read, split, a table's schema fitted on the training rows, standardised.

``load_data`` returns :class:`PreparedData`: a seeded stratified train/validation
split, standardised with statistics computed on the training split. In-memory
tensors are moved to shared memory so worker processes map them instead of
copying. Image folders stay on disk and are decoded lazily by a DataLoader in
each training worker (``data.loader_workers`` processes).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch

from core.config import DataConfig
from core.data.images import ImagePrep, image_stats
from core.data.info import DatasetInfo, ImageInput, ImageSplit, PreparedData, Split, TensorSplit
from core.data.raw import RawSource, where
from core.data.sources import read_source
from core.data.split import random_split, stratified_split
from core.data.text_tuning import TextTuning, training_texts, tune_encoder
from core.errors import DataError
from core.host.machine import trim_freed_memory
from core.readers import check_stop
from core.schema import Schema
from core.schema.encode import encode_into


def fit_table(
    raw: RawSource, cfg: DataConfig, train_idx: np.ndarray, encode: bool = True, text_encoder: str = ""
) -> Schema:
    """Fit the table's schema on the training rows; set ``raw.y`` and the feature names, and ``raw.x`` (the
    whole table encoded) when ``encode`` (training encodes straight into its tensor instead). ``text_encoder``:
    ``model.text_encoder``."""
    from core.schema import encode_table, fit_schema

    assert raw.table is not None and raw.target_raw is not None
    y_train = raw.y[train_idx].astype(np.float64) if raw.task == "regression" else None
    schema = fit_schema(
        raw.table,
        cfg.target,
        raw.kinds,
        raw.task,
        raw.class_names,
        y_train,
        train_idx,
        cfg.standardize,
        cfg.missing,
        text_encoder,
    )
    if encode:
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


def _tuned(raw: RawSource, cfg: DataConfig, train_idx: np.ndarray, encoder: str, tune: TextTuning, seed: int) -> str:
    """The folder of ``encoder`` fine-tuned on the training rows' texts and targets."""
    names = [name for name, inf in raw.kinds.items() if inf.kind == "text"] if raw.table is not None else []
    if raw.table is None or not names:
        raise DataError(
            f'model: model.finetune = "full" fine-tunes model.text_encoder on a table\'s text columns; '
            f'{cfg.source} has none (leave model.finetune at "head")'
        )
    texts, origin = training_texts(raw.table.columns, names, train_idx)
    classes = 0 if raw.task == "regression" else len(raw.class_names)
    folder, _ = tune_encoder(encoder, texts, raw.y[train_idx][origin], classes, tune, seed)
    return str(folder)


def _split(raw: RawSource, cfg: DataConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if raw.task == "regression":
        return random_split(len(raw.y), cfg.val_fraction, seed)
    return stratified_split(raw.y, cfg.val_fraction, seed)


def load_data(
    cfg: DataConfig,
    seed: int = 0,
    share: bool = True,
    task: str = "auto",
    images: ImageInput | None = None,
    image_prep: ImagePrep | None = None,
    text_encoder: str = "",
    tune: TextTuning | None = None,
) -> PreparedData:
    """Load, split and standardise a source; tensors go to shared memory when ``share``.

    ``task`` is ``train.task``: a table's target is classes or a number (auto: by its values). ``images``: how
    a pretrained network takes its images (its decoding, size and statistics: core.training.backbones.
    image_input); ``image_prep``: how an image folder's files are decoded otherwise; default: squashed to
    ``data.image_size`` (or the first image's size). ``text_encoder``: ``model.text_encoder`` (a table's text
    columns embedded by that sentence encoder; "": n-grams).
    """
    raw = read_source(cfg, task)
    if images is not None:
        if raw.paths is None:
            raise DataError(f'data: {cfg.source}: {images.what} takes image files (data.source = "images:DIR")')
        image_prep = images.prep
    if raw.paths is not None:
        image_prep = image_prep or ImagePrep.of(raw.image_shape or ())
        raw.image_shape = image_prep.shape
    check_stop()  # a read asks between its blocks; so do the steps after it
    n = int(raw.y.shape[0])
    if n < 2:
        raise DataError(f"data: {cfg.source}: needs at least 2 samples, has {n}")
    train_idx, val_idx = _split(raw, cfg, seed)
    trim_freed_memory()  # each step's temporaries go back before the next: the peak is the data once
    if len(train_idx) == 0:
        raise DataError(f"data: {cfg.source}: no training samples left after the validation split")
    if tune is not None and not tune.inherited and text_encoder:  # an earlier run's is there already
        text_encoder = _tuned(raw, cfg, train_idx, text_encoder, tune, seed)
    schema = fit_table(raw, cfg, train_idx, encode=False, text_encoder=text_encoder) if raw.table is not None else None
    trim_freed_memory()
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
        texts=tuple(schema.text_slots) if schema is not None else (),
        schema=schema_json,
        class_counts=counts,
        dropped_rows=raw.dropped,
        notes=tuple(raw.notes),
    )
    if raw.paths is not None:
        assert raw.image_shape is not None
        if images is not None:
            mean, std = list(images.mean), list(images.std)
        elif cfg.standardize:
            mean, std = image_stats([raw.paths[i] for i in train_idx], image_prep or raw.image_shape, seed)
        else:
            mean, std = [0.0] * raw.image_shape[0], [1.0] * raw.image_shape[0]
        info = info_of(input_shape=raw.image_shape, mean=tuple(mean), std=tuple(std), image_prep=image_prep)
        train_s: Split = ImageSplit(tuple(raw.paths[i] for i in train_idx), tuple(int(raw.y[i]) for i in train_idx))
        val_s: Split = ImageSplit(tuple(raw.paths[i] for i in val_idx), tuple(int(raw.y[i]) for i in val_idx))
        return PreparedData(info, train_s, val_s)
    input_shape = tuple(raw.image_shape) if raw.image_shape is not None else (len(raw.feature_names),)
    # one tensor holds every sample once, the training rows first: both splits are views of it; the row
    # numbers in the smallest type that holds them (int64 arrays of every row were the load's largest
    # temporaries after the columns), the split's own freed
    k = len(train_idx)
    order = np.empty(n, dtype=np.int32 if n < 2**31 else np.int64)
    order[:k], order[k:] = train_idx, val_idx
    del train_idx, val_idx
    x = _new_tensor((n, math.prod(input_shape)), share)
    out = x.numpy()
    if schema is not None:  # a table's statistics come with its schema (identity past the numbers)
        s_mean, s_std = schema.stats()
        f_mean, f_std = np.asarray(s_mean, dtype=np.float32), np.asarray(s_std, dtype=np.float32)
        assert raw.table is not None
        table, raw.table = raw.table, None
        encode_into(schema, table, out, order, f_mean, f_std, release=True)  # the raw columns go as rows come
        del table
    else:
        _fill_rows(out, raw, order)
        f_mean, f_std = _stats(out[:k], cfg.standardize)
        _standardize(out, f_mean, f_std)
    check_stop()
    # images (digits, an NPZ of images) reach every model as (C, H, W), as from an image folder
    xs = x.view(n, *input_shape)
    ys = torch.from_numpy(np.ascontiguousarray(raw.y[order]))
    if share:
        ys.share_memory_()
    train, val = TensorSplit(xs[:k], ys[:k]), TensorSplit(xs[k:], ys[k:])
    info = info_of(input_shape=input_shape, mean=tuple(float(m) for m in f_mean), std=tuple(float(s) for s in f_std))
    return PreparedData(info, train, val)


def _new_tensor(shape: tuple[int, int], share: bool) -> torch.Tensor:
    """An empty float32 tensor, in shared memory when ``share`` (made there: its pages are not yet touched)."""
    if not share:
        return torch.empty(shape, dtype=torch.float32)
    # torch's public share_memory_() copies a tensor into shared memory, touching every page at once; a
    # storage made shared (torch's own constructor for it) fills as rows are written
    storage = torch.UntypedStorage._new_shared(math.prod(shape) * 4)  # noqa: SLF001
    return torch.empty(0, dtype=torch.float32).set_(storage).view(shape)


def _fill_rows(out: np.ndarray, raw: RawSource, order: np.ndarray) -> None:
    """``out[i] = x[order[i]]``, the samples read a block at a time."""
    where = np.empty(len(order), dtype=np.int64)
    where[order] = np.arange(len(order))
    for lo, hi, block in raw.x_blocks():
        out[where[lo:hi]] = block.reshape(hi - lo, -1)
        del block
        check_stop()


STATS_ROWS = 1 << 16  # statistics and standardisation go over this many rows at a time


def _stats(train: np.ndarray, standardize: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per feature: the training rows' mean and standard deviation (float64 sums by blocks, as float32;
    a constant feature's std is 1), or 0 and 1 when not standardising."""
    n, f = train.shape
    if not standardize or n == 0:
        return np.zeros(f, dtype=np.float32), np.ones(f, dtype=np.float32)
    total = np.zeros(f)
    for lo in range(0, n, STATS_ROWS):
        total += train[lo : lo + STATS_ROWS].sum(axis=0, dtype=np.float64)
    mean = total / n
    squares = np.zeros(f)
    for lo in range(0, n, STATS_ROWS):
        squares += np.square(train[lo : lo + STATS_ROWS].astype(np.float64) - mean).sum(axis=0)
    std = np.sqrt(squares / n)
    std = np.where(std < 1e-6, 1.0, std)  # constant pixels stay 0
    return mean.astype(np.float32), std.astype(np.float32)


def _standardize(out: np.ndarray, mean: np.ndarray, std: np.ndarray) -> None:
    """``(x - mean) / std`` in place, in float32, a block of rows at a time."""
    if not (mean != 0).any() and not (std != 1).any():
        return
    for lo in range(0, len(out), STATS_ROWS):
        block = out[lo : lo + STATS_ROWS]
        block -= mean
        block /= std
