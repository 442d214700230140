"""Data sources: built-in scikit-learn sets, synthetic, CSV, NPZ and image folders.

``load_data`` returns :class:`PreparedData`: a seeded stratified train/validation
split, standardised with statistics computed on the training split. In-memory
tensors are moved to shared memory so worker processes map them instead of
copying. Image folders stay on disk and are decoded lazily by a DataLoader in
each training worker (``data.loader_workers`` processes).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import parse_qsl

import numpy as np
import torch

from core.config import DataConfig
from core.errors import DataError
from core.lifeline import loader_worker_init
from core.readers import TextColumn, check_stop, read_npz
from core.schema import IMBALANCE_RATIO, Inferred, RawTable, Schema

BUILTIN_DATASETS = ("digits", "iris", "wine", "breast_cancer", "diabetes", "synthetic")
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}
PREVIEW_ROWS = 5
PREVIEW_IMAGES = 8


@dataclass(frozen=True)
class DatasetInfo:
    """What a data source holds; travels with the model (class names, statistics)."""

    name: str
    n_samples: int
    input_shape: tuple[int, ...]  # one sample as the model receives it: (C, H, W) for images, (F,) for tables
    num_classes: int
    class_names: tuple[str, ...]
    feature_names: tuple[str, ...] = ()
    image_shape: tuple[int, ...] | None = None  # (C, H, W) when samples are images
    n_train: int = 0
    n_val: int = 0
    mean: tuple[float, ...] = ()  # standardisation: per feature, or per channel for images
    std: tuple[float, ...] = ()
    preview_rows: tuple[tuple[Any, ...], ...] = ()
    preview_images: tuple[tuple[np.ndarray, str], ...] = field(default=(), compare=False, repr=False)
    task: str = "classification"        # or "regression": one standardised output
    categories: tuple[int, ...] = ()     # tables: levels of each category feature (the last len() features)
    schema: dict[str, Any] | None = field(default=None, compare=False, repr=False)  # core.schema.Schema as JSON
    class_counts: tuple[int, ...] = ()   # training samples per class
    dropped_rows: int = 0                # rows without a target value, left out
    notes: tuple[tuple[str, str], ...] = ()  # (level, message) for the run's log: the task chosen, ignored columns

    def as_dict(self) -> dict[str, Any]:
        """What a checkpoint and model.json carry about the data (no previews)."""
        out = {
            "name": self.name, "input_shape": list(self.input_shape), "num_classes": self.num_classes,
            "class_names": list(self.class_names), "feature_names": list(self.feature_names),
            "image_shape": list(self.image_shape) if self.image_shape else None,
            "mean": list(self.mean), "std": list(self.std),
        }
        if self.task != "classification":
            out["task"] = self.task
        if self.categories:
            out["categories"] = list(self.categories)
        if self.schema is not None:
            out["schema"] = self.schema
        return out

    @property
    def target_scale(self) -> tuple[float, float]:
        """Regression: (mean, std) that turn the model's output into the target's units."""
        t = (self.schema or {}).get("target") or {}
        return float(t.get("mean", 0.0)), float(t.get("std", 1.0))

    @property
    def summary(self) -> str:
        """One line for pickers: samples, features or image size, classes."""
        if self.image_shape is not None:
            c, h, w = self.image_shape
            shape = f"{w}x{h} images" + (" (RGB)" if c == 3 else "")
        else:
            shape = f"{int(np.prod(self.input_shape))} features"
        if self.task == "regression":
            text = f"{self.n_samples:,} samples, {shape}, a numeric target (regression)"
        else:
            text = f"{self.n_samples:,} samples, {shape}, {self.num_classes} classes"
        return text + (f"; columns: {self.columns_summary}" if self.columns_summary else "")

    @property
    def columns_summary(self) -> str:
        """A table's columns as the schema sees them: kind, missing cells, levels; why one is ignored."""
        parts = []
        for c in (self.schema or {}).get("columns") or []:
            bits = [c["kind"]]
            if c["kind"] == "category":
                bits.append(f"{len(c.get('levels', []))} levels")
            if c.get("missing"):
                bits.append(f"{c['missing']} missing")
            if c["kind"] == "ignore" and c.get("reason"):
                bits.append(c["reason"])
            parts.append(f"{c['name']} ({', '.join(bits)})")
        return ", ".join(parts)

    @property
    def class_summary(self) -> str:
        """Training samples per class, with a warning when the largest is IMBALANCE_RATIO times the smallest."""
        if not self.class_counts:
            return ""
        pairs = ", ".join(f"{n}: {c}" for n, c in zip(self.class_names, self.class_counts))
        return f"classes (training samples): {pairs}"

    @property
    def imbalance_warning(self) -> str:
        counts = [c for c in self.class_counts if c > 0]
        if len(counts) < 2 or max(counts) < IMBALANCE_RATIO * min(counts):
            return ""
        return (f"classes are imbalanced: the largest has {max(counts)} training samples, the smallest {min(counts)} "
                f"({max(counts) / min(counts):.1f}x); consider train.class_weights = \"balanced\" and "
                "train.select_by = \"val_balanced_accuracy\"")


@dataclass(frozen=True)
class TensorSplit:
    """Features and labels in memory (shared memory once prepared)."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return int(self.y.shape[0])


@dataclass(frozen=True)
class ImageSplit:
    """Image files decoded on demand."""

    paths: tuple[str, ...]
    labels: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.labels)


Split = TensorSplit | ImageSplit


@dataclass(frozen=True)
class PreparedData:
    info: DatasetInfo
    train: Split
    val: Split


# ----------------------------------------------------------------------------- sources


def _where(source: str) -> str:
    """The prefix of a source's errors: a file source's messages name the file themselves."""
    return f"data: {source}" if source.startswith("builtin:") else "data"


@dataclass
class _Raw:
    """A loaded source before the split: arrays, or image paths."""

    name: str
    class_names: list[str]
    y: np.ndarray
    x: np.ndarray | None = None
    paths: list[str] | None = None
    feature_names: list[str] = field(default_factory=list)
    image_shape: tuple[int, int, int] | None = None
    task: str = "classification"
    table: RawTable | None = None          # csv:, parquet: the columns, encoded once the split is known
    kinds: dict[str, Inferred] = field(default_factory=dict)
    target_raw: np.ndarray | None = None   # the target's cells of the rows kept
    dropped: int = 0
    notes: list[tuple[str, str]] = field(default_factory=list)


def _builtin(name: str, query: str, source: str) -> _Raw:
    if name == "synthetic":
        return _synthetic(query, source)
    if query:
        raise DataError(f"{_where(source)}: builtin:{name} takes no parameters")
    from sklearn import datasets as skd

    if name == "diabetes":  # a numeric target: regression
        bunch = skd.load_diabetes()
        x = np.asarray(bunch.data, dtype=np.float32)
        return _Raw("diabetes", [], np.asarray(bunch.target, dtype=np.float32), x=x,
                    feature_names=[str(f) for f in bunch.feature_names], task="regression",
                    notes=[("info", "task: regression (builtin:diabetes has a numeric target)")])

    loaders = {
        "digits": skd.load_digits,
        "iris": skd.load_iris,
        "wine": skd.load_wine,
        "breast_cancer": skd.load_breast_cancer,
    }
    if name not in loaders:
        raise DataError(
            f"{_where(source)}: unknown built-in dataset {name!r}; choose one of "
            + ", ".join(BUILTIN_DATASETS)
        )
    bunch = loaders[name]()
    x = np.asarray(bunch.data, dtype=np.float32)
    names = [str(n) for n in bunch.target_names]
    feats = [str(f) for f in getattr(bunch, "feature_names", [])] or [f"f{i}" for i in range(x.shape[1])]
    image_shape = (1, 8, 8) if name == "digits" else None
    return _Raw(name, names, np.asarray(bunch.target, dtype=np.int64), x=x,
                feature_names=feats, image_shape=image_shape)


def _synthetic(query: str, source: str) -> _Raw:
    params = {"n": 10000, "features": 32, "classes": 10, "seed": 0}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in params:
            raise DataError(
                f"{_where(source)}: unknown parameter {key!r}; known: " + ", ".join(params)
            )
        try:
            params[key] = int(value)
        except ValueError:
            raise DataError(f"{_where(source)}: parameter {key} must be an integer, got {value!r}") from None
    n, f, c = params["n"], params["features"], params["classes"]
    if not (2 <= c <= 1000 and 1 <= f <= 100000 and c <= n <= 50_000_000):
        raise DataError(f"{_where(source)}: need 2 <= classes <= 1000, features >= 1, classes <= n")
    gen = torch.Generator().manual_seed(params["seed"])
    # Gaussian clusters around random centres: learnable, not trivially separable.
    centres = torch.randn(c, f, generator=gen) * (3.0 / math.sqrt(f)) * 1.5
    y = torch.randint(0, c, (n,), generator=gen)
    x = centres[y] + torch.randn(n, f, generator=gen) * 1.0
    return _Raw(f"synthetic(n={n},features={f},classes={c})", [f"class{i}" for i in range(c)],
                y.numpy(), x=x.numpy(), feature_names=[f"f{i}" for i in range(f)])


def _encode_labels(column: TextColumn, source: str, what: str) -> tuple[np.ndarray, list[str]]:
    """Class names sorted (numerically when they are all numbers) and label indices."""
    uniq = sorted(set(column.values))
    try:
        uniq = sorted(uniq, key=float)
    except ValueError:
        pass
    if len(uniq) < 2:
        raise DataError(f"{_where(source)}: {what} has only one class ({uniq[0] if uniq else 'none'}); need at least 2")
    rank = {v: i for i, v in enumerate(uniq)}
    order = np.array([rank[v] for v in column.values], dtype=np.int64)
    return order[column.codes], [str(u) for u in uniq]


def _table(scheme: str, path_text: str, cfg: DataConfig, task: str) -> _Raw:
    """A CSV or Parquet table: column kinds inferred (and overridden), rows without a target dropped."""
    from core.schema import choose_task, class_codes, infer_kinds, read_table, regression_target, target_values

    source = cfg.source
    path = Path(path_text).expanduser()
    table = read_table(path, scheme, _where(source), cfg.missing)
    if cfg.target not in table.columns:
        target_values(table, cfg.target)  # raises, naming the columns there are
    if len(table.columns) < 2:
        raise DataError(f"{_where(source)}: {path} has no feature columns besides {cfg.target!r}")
    values, present = target_values(table, cfg.target)
    dropped = int((~present).sum())
    notes: list[tuple[str, str]] = []
    if dropped:
        table = table.take(np.flatnonzero(present))
        values = table.columns[cfg.target]
        notes.append(("warning", f"{dropped} row(s) of {path.name} have no value in target column {cfg.target!r}: "
                                 "left out"))
    if table.n_rows == 0:
        raise DataError(f"{_where(source)}: {path} has no row with a value in target column {cfg.target!r}")
    chosen, why = choose_task(values, task)
    kinds = infer_kinds(table, cfg.target, dict(cfg.columns))
    for name, inf in kinds.items():
        if inf.kind == "ignore" and inf.reason != "set in data.columns":
            notes.append(("info", f"column {name!r} ignored: {inf.reason}"))
    if chosen == "regression":
        y = regression_target(table, cfg.target, values)
        if len(np.unique(y)) < 2:
            raise DataError(f"{_where(source)}: {path} target column {cfg.target!r} has a single value ({y[0]:g}); "
                            "nothing to learn")
        names: list[str] = []
    else:
        names, y = class_codes(values)
        if len(names) < 2:
            raise DataError(f"{_where(source)}: target column {cfg.target!r} of {path} has only one class "
                            f"({names[0] if names else 'none'}); need at least 2")
    notes.insert(0, ("info", f"task: {chosen} ({why})"))
    return _Raw(path.stem, names, y, task=chosen, table=table, kinds=kinds, target_raw=values, dropped=dropped,
                notes=notes)


def _npz(path_text: str, source: str) -> _Raw:
    path = Path(path_text).expanduser()
    arrays = read_npz(path, _where(source), labels=True)
    x, y_raw, names_arr = arrays.x, arrays.y, arrays.class_names
    assert y_raw is not None
    uniq, codes = np.unique(y_raw, return_inverse=True)
    y, names = _encode_labels(TextColumn(codes.reshape(-1).astype(np.int64), [str(v) for v in uniq.tolist()]),
                              source, f"{path}'s y")
    if names_arr is not None and np.issubdtype(y_raw.dtype, np.integer) and int(y_raw.min()) >= 0:
        given = [str(n) for n in names_arr.tolist()]
        if len(given) > int(y_raw.max()):
            y, names = y_raw.astype(np.int64), given
    image_shape = None
    if x.ndim == 4 and x.shape[1] in (1, 3):
        image_shape = tuple(int(s) for s in x.shape[1:])
    elif x.ndim == 3:
        image_shape = (1, int(x.shape[1]), int(x.shape[2]))
    x = x.reshape(x.shape[0], -1)
    return _Raw(path.stem, names, y, x=x, feature_names=[f"f{i}" for i in range(x.shape[1])],
                image_shape=image_shape)  # type: ignore[arg-type]


def _images(dir_text: str, image_size: int, source: str) -> _Raw:
    root = Path(dir_text).expanduser()
    if not root.is_dir():
        raise DataError(f"{_where(source)}: folder not found: {root}")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(classes) < 2:
        raise DataError(
            f"{_where(source)}: {root} needs one sub-folder per class (at least 2), found {len(classes)}"
        )
    paths: list[str] = []
    labels: list[int] = []
    for label, cls in enumerate(classes):
        files = sorted(
            str(p) for p in (root / cls).rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
        )
        if not files:
            raise DataError(f"{_where(source)}: class folder {root / cls} holds no images")
        paths += files
        labels += [label] * len(files)
    for k, path in enumerate(paths):  # a broken file is an input error now, not a worker crash mid-training
        if k % 64 == 0:
            check_stop()  # a Stop or Ctrl-C while a large folder is checked
        _verify_image(path, source)
    first = _open_image(paths[0], source)
    channels = 1 if first.mode in ("L", "1", "I", "I;16", "F") else 3
    w, h = (image_size, image_size) if image_size else first.size
    return _Raw(root.name, classes, np.asarray(labels, dtype=np.int64), paths=paths,
                image_shape=(channels, h, w))


def _image_problem(exc: Exception) -> str:
    """Why PIL refused a file, in a few words on one line."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(exc, UnidentifiedImageError):
        return "not an image file (or a format Pillow cannot read)"
    if isinstance(exc, Image.DecompressionBombError):
        return "too many pixels (possible decompression bomb)"
    if isinstance(exc, FileNotFoundError):
        return "file not found"
    text = " ".join(str(exc).split())
    return text[:120] or type(exc).__name__


def _verify_image(path: str, source: str) -> None:
    """Check a file's header and, for PNG, every chunk's checksum, without decoding pixels."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            img.verify()
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as exc:
        raise DataError(f"data: {source}: cannot decode image {path}: {_image_problem(exc)}") from None


def _open_image(path: str, source: str = "") -> Any:
    from PIL import Image

    try:
        img = Image.open(path)
        img.load()
        return img
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as exc:
        raise DataError(f"data: {source or path}: cannot decode image {path}: {_image_problem(exc)}") from None


def decode_image(path: str, image_shape: tuple[int, ...]) -> np.ndarray:
    """Decode, convert and resize one image to float32 (C, H, W) in [0, 1]."""
    c, h, w = image_shape
    img = _open_image(path)
    img = img.convert("L" if c == 1 else "RGB")
    if img.size != (w, h):
        img = img.resize((w, h))
    arr = np.asarray(img, dtype=np.float32) / 255.0
    return arr[None] if c == 1 else arr.transpose(2, 0, 1).copy()


def _read_source(cfg: DataConfig, task: str = "auto") -> _Raw:
    scheme, _, rest = cfg.source.partition(":")
    if scheme == "builtin":
        name, _, query = rest.partition("?")
        raw = _builtin(name, query, cfg.source)
        if task == "regression" and raw.task != "regression":
            raise DataError(f"{_where(cfg.source)}: train.task = \"regression\" needs a numeric target; "
                            f"builtin:{name} has classes")
        if task == "classification" and raw.task == "regression":
            raise DataError(f"{_where(cfg.source)}: train.task = \"classification\" needs classes; "
                            f"builtin:{name} has a numeric target")
        return raw
    if scheme in ("csv", "parquet"):
        return _table(scheme, rest, cfg, task)
    if scheme == "npz":
        return _npz(rest, cfg.source)
    if scheme == "images":
        return _images(rest, cfg.image_size, cfg.source)
    raise DataError(f"data: unknown source scheme in {cfg.source!r}; use builtin:, csv:, parquet:, npz: or images:")


# ----------------------------------------------------------------------------- split


def stratified_split(y: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split keeping each class's share in both parts (sorted indices: training, validation).

    Each part holds at least as many samples as there are classes (sklearn needs
    that to stratify). A class with a single sample cannot be stratified: it
    goes to validation only when ``val_fraction`` rounds to 1, else to training.
    """
    from sklearn.model_selection import train_test_split

    y = np.asarray(y, dtype=np.int64)
    idx = np.arange(len(y))
    if val_fraction <= 0 or len(y) == 0:
        return idx, idx[:0]
    single = np.bincount(y)[y] < 2
    lone, rest = idx[single], idx[~single]
    train, val = (idx[:0], lone) if int(round(val_fraction)) >= 1 else (lone, idx[:0])
    if len(rest):
        k = len(np.unique(y[rest]))
        n_val = min(max(math.ceil(len(rest) * val_fraction), k), len(rest) - k)
        tr, va = train_test_split(rest, test_size=n_val, random_state=seed, shuffle=True, stratify=y[rest])
        train, val = np.concatenate([train, tr]), np.concatenate([val, va])
    return np.sort(train), np.sort(val)


def _image_stats(paths: Sequence[str], shape: tuple[int, ...], seed: int) -> tuple[list[float], list[float]]:
    """Per-channel mean/std from up to 256 training images (enough for standardisation)."""
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(paths), size=min(256, len(paths)), replace=False)
    decoded = []
    for k, i in enumerate(pick):
        if k % 32 == 0:
            check_stop()
        decoded.append(decode_image(paths[i], shape))
    arrs = np.stack(decoded)
    mean = arrs.mean(axis=(0, 2, 3))
    std = arrs.std(axis=(0, 2, 3))
    return mean.tolist(), np.where(std < 1e-6, 1.0, std).tolist()


def random_split(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split without strata (a numeric target): sorted indices of training and validation."""
    idx = np.arange(n)
    if val_fraction <= 0 or n < 2:
        return idx, idx[:0]
    n_val = min(max(1, math.ceil(n * val_fraction)), n - 1)
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def _fit_table(raw: _Raw, cfg: DataConfig, train_idx: np.ndarray) -> Schema:
    """Fit the table's schema on the training rows; set ``raw.x`` (encoded), ``raw.y`` and the feature names."""
    from core.schema import encode_table, fit_schema

    assert raw.table is not None and raw.target_raw is not None
    y_train = raw.y[train_idx].astype(np.float64) if raw.task == "regression" else None
    schema = fit_schema(raw.table, cfg.target, raw.kinds, raw.task, raw.class_names, y_train, train_idx,
                        cfg.standardize, cfg.missing)
    raw.x = encode_table(schema, raw.table).x
    raw.feature_names = schema.feature_names
    if raw.task == "regression":
        raw.y = schema.encode_target(raw.target_raw, _where(cfg.source))
    return schema


def _split(raw: _Raw, cfg: DataConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if raw.task == "regression":
        return random_split(len(raw.y), cfg.val_fraction, seed)
    return stratified_split(raw.y, cfg.val_fraction, seed)


def load_data(cfg: DataConfig, seed: int = 0, share: bool = True, task: str = "auto") -> PreparedData:
    """Load, split and standardise a source; tensors go to shared memory when ``share``.

    ``task`` is ``train.task``: a table's target is classes or a number (auto: by its values).
    """
    raw = _read_source(cfg, task)
    check_stop()  # a read asks between its blocks; so do the steps after it
    n = int(raw.y.shape[0])
    if n < 2:
        raise DataError(f"data: {cfg.source}: needs at least 2 samples, has {n}")
    train_idx, val_idx = _split(raw, cfg, seed)
    if len(train_idx) == 0:
        raise DataError(f"data: {cfg.source}: no training samples left after the validation split")
    schema = _fit_table(raw, cfg, train_idx) if raw.table is not None else None
    regression = raw.task == "regression"
    if regression and schema is None:  # builtin:diabetes: standardise the target as a table's is
        y_tr = raw.y[train_idx].astype(np.float64)
        t_mean, t_std = float(y_tr.mean()), float(y_tr.std()) or 1.0
        raw.y = ((raw.y - t_mean) / t_std).astype(np.float32)
        schema_json: dict[str, Any] | None = {"target": {"name": "target", "kind": "number", "mean": t_mean,
                                                         "std": t_std}, "task": "regression"}
    else:
        schema_json = schema.to_json() if schema is not None else None
    counts = () if regression else tuple(int(c) for c in np.bincount(raw.y[train_idx], minlength=len(raw.class_names)))
    common = dict(
        name=raw.name, n_samples=n, num_classes=1 if regression else len(raw.class_names),
        class_names=tuple(raw.class_names), feature_names=tuple(raw.feature_names),
        image_shape=raw.image_shape, n_train=len(train_idx), n_val=len(val_idx),
        task=raw.task, categories=tuple(schema.cardinalities) if schema is not None else (),
        schema=schema_json, class_counts=counts, dropped_rows=raw.dropped, notes=tuple(raw.notes),
    )
    if raw.paths is not None:
        assert raw.image_shape is not None
        if cfg.standardize:
            mean, std = _image_stats([raw.paths[i] for i in train_idx], raw.image_shape, seed)
        else:
            mean, std = [0.0] * raw.image_shape[0], [1.0] * raw.image_shape[0]
        info = DatasetInfo(input_shape=raw.image_shape, mean=tuple(mean), std=tuple(std), **common)  # type: ignore[arg-type]
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
    info = DatasetInfo(input_shape=input_shape, mean=tuple(float(m) for m in f_mean),
                       std=tuple(float(s) for s in f_std), **common)  # type: ignore[arg-type]
    return PreparedData(info, train, val)


def describe_source(source: str, target: str = "label", image_size: int = 0, task: str = "auto",
                    columns: Any = (), missing: Sequence[str] | None = None) -> DatasetInfo:
    """Describe a source for a picker: sizes, classes and a small preview.

    A table's description carries its schema (fitted on every row: a preview, not the training fit) so
    that a window shows each column's kind, missing cells and levels from the object the engine uses.
    """
    from core.config import DataConfig as _DC

    extra: dict[str, Any] = {"columns": tuple(dict(columns).items()) if columns else ()}
    if missing is not None:
        extra["missing"] = tuple(missing)
    dcfg = _DC(source=source, target=target, image_size=image_size, **extra)
    raw = _read_source(dcfg, task)
    n = int(raw.y.shape[0])
    images: list[tuple[np.ndarray, str]] = []
    rows: list[tuple[Any, ...]] = []
    schema = _fit_table(raw, dcfg, np.arange(n)) if raw.table is not None else None
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


# ----------------------------------------------------------------------------- batches


class ImageDataset(torch.utils.data.Dataset):
    """Decodes image files on demand and standardises them per channel."""

    def __init__(self, split: ImageSplit, info: DatasetInfo, augment: Any = None) -> None:
        self.augment = augment  # training only: runs here, in the DataLoader processes
        self.paths = split.paths
        self.labels = split.labels
        self.shape = info.image_shape or info.input_shape
        self.mean = np.asarray(info.mean, dtype=np.float32).reshape(-1, 1, 1)
        self.std = np.asarray(info.std, dtype=np.float32).reshape(-1, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        arr = (decode_image(self.paths[i], self.shape) - self.mean) / self.std
        x = torch.from_numpy(arr)
        return (self.augment(x) if self.augment is not None else x), self.labels[i]


class TensorBatches:
    """Mini-batches from in-memory tensors by index: no per-sample Python work."""

    def __init__(self, split: TensorSplit, batch_size: int, augment: Any = None,
                 image_shape: tuple[int, ...] | None = None) -> None:
        self.x, self.y, self.batch_size = split.x, split.y, batch_size
        self.augment, self.image_shape = augment, image_shape  # images held as rows (digits)

    def epoch(self, indices: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        bs = self.batch_size
        for start in range(0, len(indices), bs):
            idx = indices[start:start + bs]
            xb = self.x.index_select(0, idx)
            if self.augment is not None and self.image_shape is not None:
                xb = self.augment(xb.view(-1, *self.image_shape)).reshape(xb.shape)
            yield xb, self.y.index_select(0, idx)


class _EpochSampler(torch.utils.data.Sampler[int]):
    """The indices of the current epoch; set by the training loop before each epoch."""

    def __init__(self) -> None:
        self.indices: list[int] = []

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class ImageBatches:
    """Mini-batches decoded by ``loader_workers`` DataLoader processes.

    One DataLoader for the whole run, with persistent workers: its sampler
    takes each epoch's indices (sampling happens in this process), so loader
    processes start once, not every epoch.
    """

    def __init__(self, split: ImageSplit, info: DatasetInfo, batch_size: int, loader_workers: int,
                 augment: Any = None) -> None:
        self.dataset = ImageDataset(split, info, augment)
        self.batch_size = batch_size
        self.loader_workers = loader_workers
        self.sampler = _EpochSampler()
        self.loader = torch.utils.data.DataLoader(
            self.dataset,
            batch_size=batch_size,
            sampler=self.sampler,
            num_workers=loader_workers,
            persistent_workers=loader_workers > 0,
            worker_init_fn=functools.partial(loader_worker_init, os.getpid()) if loader_workers else None,
            # fork is safe here: a training worker has no Qt and no CUDA context
            multiprocessing_context="fork" if loader_workers and os.name == "posix" else None,
        )

    def epoch(self, indices: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.sampler.indices = indices.tolist()
        for xb, yb in self.loader:
            yield xb, yb.long()


def make_batches(split: Split, info: DatasetInfo, batch_size: int, loader_workers: int,
                 augment: Any = None) -> TensorBatches | ImageBatches:
    """Training batches; ``augment`` (core.augment) changes training images only."""
    if isinstance(split, TensorSplit):
        return TensorBatches(split, batch_size, augment, info.image_shape)
    return ImageBatches(split, info, batch_size, loader_workers, augment)


def full_tensors(split: Split, info: DatasetInfo) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole split as tensors (decoding images if needed): for evaluation and export checks."""
    if isinstance(split, TensorSplit):
        return split.x, split.y
    ds = ImageDataset(split, info)
    xs = [ds[i][0] for i in range(len(ds))]
    x = torch.stack(xs) if xs else torch.empty((0, *info.input_shape))
    return x, torch.tensor(split.labels, dtype=torch.long)
