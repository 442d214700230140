"""The fitted schema: each column's spec (fill, indicator, statistics, levels), the encoded row's layout, JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.schema.cells import DEFAULT_MISSING, category_text, parse_numbers
from core.schema.coded import Coded, Column
from core.schema.dates import DATE_PARTS

MISSING_LEVEL, UNSEEN_LEVEL = "<missing>", "<unseen>"
RESERVED_LEVELS = 2  # index 0: missing, 1: unseen
SCHEMA_VERSION = 1


def embedding_size(cardinality: int) -> int:
    """fastai's rule of thumb for an embedding's width: min(600, round(1.6 * n ** 0.56))."""
    return int(min(600, round(1.6 * cardinality**0.56)))


@dataclass
class ColumnSpec:
    name: str
    kind: str  # number | category | bool | datetime | text | ignore
    reason: str = ""
    fill: float = 0.0  # number, bool: the training median
    indicator: bool = False  # number, bool: a missing-indicator feature follows
    mean: float = 0.0  # standardisation of the filled value
    std: float = 1.0
    levels: list[str] = field(default_factory=list)  # category: training levels (index 2..)
    missing: int = 0  # missing cells seen when fitting
    clip: tuple[float, float] | None = None  # number: values beyond these fences are taken as the fence
    outliers: int = 0  # training values beyond the fences
    order: str = ""  # datetime: how its dates are written (iso | dmy | mdy)
    origin: float = 0.0  # datetime: the earliest training date, seconds since 1970 on the clock as written
    parts: list[tuple[float, float]] = field(default_factory=list)  # datetime: each part's training (mean, std)
    slots: tuple[int, int] = (0, 0)  # text: word and character n-gram slots a row keeps
    encoder: str = ""  # text: the sentence encoder (model.text_encoder) whose embedding is its block, or n-grams
    fingerprint: str = ""  # text: the encoder's weights (hub revision or the folder's sha256)
    dim: int = 0  # text: the encoder's embedding size

    @property
    def width(self) -> int:
        """How many numbers of the encoded row this column takes."""
        if self.kind == "datetime":
            return len(DATE_PARTS) + int(self.indicator)
        if self.kind == "text":
            return self.dim if self.encoder else 2 * sum(self.slots)
        return 0 if self.kind == "ignore" else 1

    @property
    def block_names(self) -> list[str]:
        """A datetime or text column's encoded features, in order."""
        if self.kind == "datetime":
            return [f"{self.name}_{p}" for p in DATE_PARTS] + ([f"{self.name}_missing"] if self.indicator else [])
        if self.kind == "text" and self.encoder:
            return [f"{self.name}_embedding{i}" for i in range(self.dim)]
        if self.kind == "text":
            k = sum(self.slots)
            return [f"{self.name}_bucket{i}" for i in range(k)] + [f"{self.name}_weight{i}" for i in range(k)]
        return []

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.reason:
            out["reason"] = self.reason
        if self.kind in ("number", "bool"):
            out.update(fill=self.fill, indicator=self.indicator, mean=self.mean, std=self.std)
        if self.clip is not None:
            out.update(clip=[self.clip[0], self.clip[1]], outliers=self.outliers)
        if self.kind == "category":
            out["levels"] = list(self.levels)
            out["reserved"] = [MISSING_LEVEL, UNSEEN_LEVEL]
        if self.kind == "datetime":
            out.update(
                order=self.order,
                origin=self.origin,
                indicator=self.indicator,
                parts={p: [m, s] for p, (m, s) in zip(DATE_PARTS, self.parts)},
            )
        if self.kind == "text" and self.encoder:
            out["encoder"] = {"name": self.encoder, "fingerprint": self.fingerprint, "dim": self.dim}
        elif self.kind == "text":
            out["slots"] = {"words": self.slots[0], "chars": self.slots[1]}
        out["missing"] = self.missing
        return out

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> ColumnSpec:
        clip = d.get("clip")
        parts = d.get("parts") or {}
        slots = d.get("slots") or {}
        encoder = d.get("encoder") or {}
        return ColumnSpec(
            str(d["name"]),
            str(d["kind"]),
            str(d.get("reason", "")),
            float(d.get("fill", 0.0)),
            bool(d.get("indicator", False)),
            float(d.get("mean", 0.0)),
            float(d.get("std", 1.0)),
            [str(v) for v in d.get("levels", [])],
            int(d.get("missing", 0)),
            (float(clip[0]), float(clip[1])) if clip else None,
            int(d.get("outliers", 0)),
            str(d.get("order", "")),
            float(d.get("origin", 0.0)),
            [(float(parts[p][0]), float(parts[p][1])) for p in DATE_PARTS if p in parts],
            (int(slots.get("words", 0)), int(slots.get("chars", 0))),
            str(encoder.get("name", "")),
            str(encoder.get("fingerprint", "")),
            int(encoder.get("dim", 0)),
        )


@dataclass
class Schema:
    columns: list[ColumnSpec]
    target: str
    task: str  # classification | regression
    classes: list[str] = field(default_factory=list)
    target_mean: float = 0.0  # regression: the model learns (y - mean) / std
    target_std: float = 1.0
    missing_values: list[str] = field(default_factory=lambda: list(DEFAULT_MISSING))
    example: dict[str, Any] = field(default_factory=dict)  # a training row of the used columns, as JSON values

    # -- layout -----------------------------------------------------------------
    @property
    def used(self) -> list[ColumnSpec]:
        return [c for c in self.columns if c.kind != "ignore"]

    @property
    def numeric(self) -> list[ColumnSpec]:
        return [c for c in self.columns if c.kind in ("number", "bool")]

    @property
    def categorical(self) -> list[ColumnSpec]:
        return [c for c in self.columns if c.kind == "category"]

    @property
    def dates(self) -> list[ColumnSpec]:
        return [c for c in self.columns if c.kind == "datetime"]

    @property
    def texts(self) -> list[ColumnSpec]:
        return [c for c in self.columns if c.kind == "text"]

    @property
    def embedded_texts(self) -> list[ColumnSpec]:
        """The text columns a sentence encoder embeds (their blocks are dense features)."""
        return [c for c in self.texts if c.encoder]

    @property
    def ngram_texts(self) -> list[ColumnSpec]:
        return [c for c in self.texts if not c.encoder]

    @property
    def blocks(self) -> list[ColumnSpec]:
        """The columns that take a block of the encoded row, in its order: dates, embedded texts, n-gram texts."""
        return self.dates + self.embedded_texts + self.ngram_texts

    @property
    def text_slots(self) -> list[int]:
        """Each n-gram text column's slots (its block is twice as wide: buckets, then weights)."""
        return [sum(c.slots) for c in self.ngram_texts]

    @property
    def cardinalities(self) -> list[int]:
        return [len(c.levels) + RESERVED_LEVELS for c in self.categorical]

    @property
    def feature_names(self) -> list[str]:
        """The encoded row's features, in order."""
        return (
            [c.name for c in self.numeric]
            + [f"{c.name}_missing" for c in self.numeric if c.indicator]
            + [name for c in self.blocks for name in c.block_names]
            + [c.name for c in self.categorical]
        )

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    def stats(self) -> tuple[list[float], list[float]]:
        """Per encoded feature: (mean, std) the model standardises with (identity past the numbers)."""
        n_ind = sum(c.indicator for c in self.numeric)
        mean = [c.mean for c in self.numeric] + [0.0] * n_ind
        std = [c.std for c in self.numeric] + [1.0] * n_ind
        for c in self.dates:
            mean += [m for m, _ in c.parts] + [0.0] * int(c.indicator)
            std += [s for _, s in c.parts] + [1.0] * int(c.indicator)
        n_embedded = sum(c.dim for c in self.embedded_texts)  # a sentence embedding is taken as it comes
        mean += [0.0] * n_embedded
        std += [1.0] * n_embedded
        n_rest = 2 * sum(self.text_slots) + len(self.categorical)
        return mean + [0.0] * n_rest, std + [1.0] * n_rest

    # -- JSON -------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        target: dict[str, Any] = {"name": self.target, "kind": "classes" if self.task == "classification" else "number"}
        if self.task == "classification":
            target["classes"] = list(self.classes)
        else:
            target.update(mean=self.target_mean, std=self.target_std, formula="prediction = output * std + mean")
        return {
            "version": SCHEMA_VERSION,
            "task": self.task,
            "target": target,
            "columns": [c.to_json() for c in self.columns],
            "missing_values": list(self.missing_values),
            **({"example": dict(self.example)} if self.example else {}),
            "encoded": {
                "features": self.feature_names,
                "categories": self.cardinalities,
                "texts": self.text_slots,
                "layout": "numbers (filled), missing indicators, each date's parts (and its indicator), each "
                "embedded text's sentence embedding, each other text's n-gram buckets and weights, category indices (0 missing, 1 unseen, 2.. levels)",
            },
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Schema:
        t = d["target"]
        return Schema(
            [ColumnSpec.from_json(c) for c in d["columns"]],
            str(t["name"]),
            str(d["task"]),
            [str(c) for c in t.get("classes", [])],
            float(t.get("mean", 0.0)),
            float(t.get("std", 1.0)),
            [str(v) for v in d.get("missing_values", DEFAULT_MISSING)],
            dict(d.get("example") or {}),
        )

    # -- the target -------------------------------------------------------------
    def encode_target(self, values: Column, where: str) -> np.ndarray:
        if self.task == "regression":
            numbers, _ = parse_numbers(values)
            return ((numbers - self.target_mean) / self.target_std).astype(np.float32)
        index = {c: i for i, c in enumerate(self.classes)}
        if isinstance(values, Coded):  # each distinct text looked up once
            return values.map_levels(
                np.array([index.get(category_text(v), -1) for v in values.levels], dtype=np.int64), -1
            )
        return np.asarray([index[category_text(v)] for v in values], dtype=np.int64)

    def decode_output(self, out: np.ndarray) -> np.ndarray:
        """Regression: the model's outputs in the target's units."""
        return out * self.target_std + self.target_mean
