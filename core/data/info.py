"""What a data source holds and how it is split: the types that travel from loading to training and export.

:class:`DatasetInfo` is what a model carries about its data (class names,
statistics, a table's schema); :class:`PreparedData` is a source loaded and
split, its parts in memory (:class:`TensorSplit`) or image files decoded on
demand (:class:`ImageSplit`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from core.readers.images import ImagePrep
from core.schema import IMBALANCE_RATIO

if TYPE_CHECKING:
    import torch


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
    task: str = "classification"  # or "regression": one standardised output
    categories: tuple[int, ...] = ()  # tables: levels of each category feature (the last len() features)
    texts: tuple[int, ...] = ()  # tables: n-gram slots of each free-text column (before the categories)
    schema: dict[str, Any] | None = field(default=None, compare=False, repr=False)  # core.schema.Schema as JSON
    class_counts: tuple[int, ...] = ()  # training samples per class
    dropped_rows: int = 0  # rows without a target value, left out
    notes: tuple[tuple[str, str], ...] = ()  # (level, message) for the run's log: the task chosen, ignored columns
    table_columns: tuple[str, ...] = ()  # a table's columns in file order, the target's included (descriptions)
    image_prep: ImagePrep | None = None  # image files: how each is decoded (every face decodes by it)

    @property
    def prep(self) -> ImagePrep | None:
        """How images are decoded: ``image_prep``, else a squash to ``image_shape``; None for non-images."""
        if self.image_prep is not None:
            return self.image_prep
        return ImagePrep.of(self.image_shape) if self.image_shape else None

    def as_dict(self) -> dict[str, Any]:
        """What a checkpoint and model.json carry about the data (no previews)."""
        out = {
            "name": self.name,
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "class_names": list(self.class_names),
            "feature_names": list(self.feature_names),
            "image_shape": list(self.image_shape) if self.image_shape else None,
            "mean": list(self.mean),
            "std": list(self.std),
        }
        if self.task != "classification":
            out["task"] = self.task
        if self.categories:
            out["categories"] = list(self.categories)
        if self.texts:
            out["texts"] = list(self.texts)
        if self.schema is not None:
            out["schema"] = self.schema
        if self.image_prep is not None:
            out["image_prep"] = self.image_prep.to_json()
        return out

    @property
    def target_scale(self) -> tuple[float, float]:
        """Regression: (mean, std) that turn the model's output into the target's units."""
        t = (self.schema or {}).get("target") or {}
        return float(t.get("mean", 0.0)), float(t.get("std", 1.0))

    @property
    def needs_target(self) -> bool:
        """A table described before its target is known: its columns, no task (``describe_source``)."""
        return self.schema is not None and self.schema.get("target") is None

    @property
    def summary(self) -> str:
        """One line for pickers: samples, features or image size, classes."""
        if self.needs_target:
            return f"{self.n_samples:,} rows, {len(self.table_columns)} columns; choose the target column"
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
    def imbalanced(self) -> bool:
        """The largest class has at least IMBALANCE_RATIO times the smallest's training samples."""
        counts = [c for c in self.class_counts if c > 0]
        return len(counts) >= 2 and max(counts) >= IMBALANCE_RATIO * min(counts)

    @property
    def imbalance_warning(self) -> str:
        counts = [c for c in self.class_counts if c > 0]
        if not self.imbalanced:
            return ""
        return (
            f"classes are imbalanced: the largest has {max(counts)} training samples, the smallest {min(counts)} "
            f"({max(counts) / min(counts):.1f}x); the best model is chosen by balanced accuracy; consider "
            'train.class_weights = "balanced"'
        )


@dataclass(frozen=True)
class TensorSplit:
    """Features and labels in memory (shared memory once prepared)."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return int(self.y.shape[0])


@dataclass(frozen=True)
class FeatureSplit(TensorSplit):
    """A frozen backbone's features of image files (N, D), computed once: trained on as they are (no
    augmentation can change them); ``paths`` are the images they came from."""

    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageInput:
    """Images as a pretrained network takes them, in place of the data's own size and statistics."""

    prep: ImagePrep  # how each file is decoded: the network's size, resize, crop and interpolation
    mean: tuple[float, ...]
    std: tuple[float, ...]
    what: str  # who asks, for errors: 'model.kind = "timm:NAME"'


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
