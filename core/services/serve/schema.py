"""What a served model takes and gives, read from its description (``model.json``'s fields).

One object turns a request body into the float32 rows the model takes, or
into one line that names the field, the row and what was wrong; it writes
the answers, the OpenAPI description and the /docs page. A model trained on
a table takes and answers in the table's own terms (:mod:`core.services.serve.tables`).
Nothing here imports torch: it runs in the HTTP process.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from core.readers.images import ImageError, ImagePrep, decode_image, prep_of
from core.services.serve.tables import RowError, TableRows, kind_text

FLOAT32_MAX = float(np.finfo(np.float32).max)
BODY_KEYS = ("inputs", "rows", "images")
IMAGE_FORMATS = ("PNG", "JPEG")


class BadRequest(Exception):
    """A request the model cannot take: its HTTP status and one line saying what and where."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def shape_text(shape: tuple[int, ...]) -> str:
    return "×".join(str(s) for s in shape)


@dataclass(frozen=True)
class ModelSchema:
    """The served model's inputs and outputs: shape, feature names, image size, classes, a table's columns."""

    shape: tuple[int, ...]
    features: tuple[str, ...]
    classes: tuple[str, ...]
    image_shape: tuple[int, ...] | None  # (C, H, W) when images are accepted
    pixel_scale: float
    table: TableRows | None = None  # a table's model: rows by its raw columns, never encoded features
    prep: ImagePrep | None = None  # how an image is decoded: as in training (core.readers.images)

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> ModelSchema:
        shape = tuple(int(s) for s in meta["input"]["shape"])
        features = tuple(str(f) for f in meta["input"].get("features") or [])
        if len(features) != math.prod(shape):
            features = ()
        image: tuple[int, ...] | None = None
        if len(shape) == 3 and shape[0] in (1, 3):
            image = shape
        else:
            named = bool(features) and list(features) != [f"f{i}" for i in range(len(features))]
            raw = [int(s) for s in meta["input"].get("image_shape") or []]
            if not named and len(raw) == 2:
                raw = [1, *raw]
            if not named and len(raw) == 3 and raw[0] in (1, 3) and math.prod(raw) == math.prod(shape):
                image = tuple(raw)
        # a model trained on 0-255 pixel arrays (its mean says so) gets decoded pixels as it learned them,
        # as `predict` does with an image folder
        means = (meta.get("preprocessing") or {}).get("mean") or [0.0]
        scale = 255.0 if max(abs(float(m)) for m in means) > 1.5 else 1.0
        table = TableRows.from_meta(meta)
        if table is not None:
            image = None
        prep = prep_of(meta["input"].get("image_prep"), image) if image is not None else None
        return cls(shape, features, tuple(str(c) for c in meta["classes"]), image, scale, table, prep)

    @property
    def outputs(self) -> int:
        """Values the model gives per row: one per class, or one (a regression's value)."""
        return len(self.classes) or 1

    @property
    def regression(self) -> bool:
        return not self.classes

    def canary(self) -> np.ndarray:
        """The row a model process must answer before it takes requests: a table's example row, else zeros."""
        if self.table is not None:
            return self.table.canary().reshape((1, *self.shape))
        return np.zeros((1, *self.shape), dtype=np.float32)

    def answers_right(self, out: np.ndarray) -> bool:
        """Whether a model's output for one row has the right shape and values (probabilities, or a number)."""
        if out.shape != (1, self.outputs) or not bool(np.isfinite(out).all()):
            return False
        return self.regression or abs(float(out.sum()) - 1.0) <= 1e-3

    # what two models must share for one to replace the other while serving
    def difference(self, other: ModelSchema) -> str | None:
        """None when ``other`` takes and gives the same as this one, else the first difference, in words."""
        if other.shape != self.shape:
            return f"input shape {shape_text(other.shape)} instead of {shape_text(self.shape)}"
        if other.features != self.features:
            return "other feature columns"
        if other.classes != self.classes:
            return f"classes {list(other.classes)[:6]} instead of {list(self.classes)[:6]}"
        if other.image_shape != self.image_shape or other.pixel_scale != self.pixel_scale or other.prep != self.prep:
            return "another image size, pixel scale or resizing"
        if (self.table is None) != (other.table is None) or (
            self.table is not None and other.table is not None and not self.table.same_as(other.table)
        ):
            return "other table columns, kinds or levels"
        return None

    @property
    def row_values(self) -> int:
        return math.prod(self.shape)

    # ------------------------------------------------------------------ requests

    def parse(self, body: bytes) -> tuple[np.ndarray, dict[str, Any] | None]:
        """The rows of a ``POST /predict`` body as float32 (n, *shape), and what encoding a table's rows met
        (unseen and missing values per column, or None); BadRequest names what is wrong."""
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(400, f"the body is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise BadRequest(
                400, 'the body must be a JSON object: {"inputs": [...]}, {"rows": [...]} or {"images": [...]}'
            )
        given = [k for k in BODY_KEYS if k in doc]
        unknown = [k for k in doc if k not in BODY_KEYS]
        if unknown:
            raise BadRequest(
                422, f"unknown field {unknown[0]!r}: the body takes one of " + ", ".join(repr(k) for k in BODY_KEYS)
            )
        if len(given) != 1:
            raise BadRequest(
                422,
                "the body must have exactly one of "
                + ", ".join(repr(k) for k in BODY_KEYS)
                + (f", not {len(given)}" if given else ""),
            )
        key = given[0]
        items = doc[key]
        if not isinstance(items, list) or not items:
            raise BadRequest(422, f"{key!r} must be a non-empty list")
        if self.table is not None:
            if key != "rows":
                raise BadRequest(
                    422,
                    f"{key!r}: this model was trained on a table: send "
                    f'{{"rows": [{{column: value, ...}}]}} by its column names '
                    f"({self.table.names_text()})",
                )
            try:
                x, notes = self.table.encode(items)
            except RowError as exc:
                raise BadRequest(422, str(exc)) from None
            return x.reshape((len(items), *self.shape)), notes or None
        if key == "inputs":
            return self._inputs(items), None
        if key == "rows":
            return self._rows(items), None
        return self._images(items), None

    def _inputs(self, samples: list[Any]) -> np.ndarray:
        n = len(samples)
        try:
            arr = np.array(samples)
        except (ValueError, TypeError):
            arr = None  # ragged or mixed: find the first bad sample below
        if arr is not None and arr.dtype.kind in "iuf":
            if arr.shape[1:] == self.shape or arr.shape[1:] == (self.row_values,):
                return self._finite(arr.reshape((n, *self.shape)), "inputs")
        for i, sample in enumerate(samples):
            self._check_sample(sample, i)
        raise BadRequest(422, f"inputs: samples must each be {self.sample_text()}")  # pragma: no cover

    def sample_text(self) -> str:
        if len(self.shape) == 1:
            return f"a list of {self.shape[0]} numbers"
        return f"nested as {shape_text(self.shape)} or a flat list of {self.row_values} numbers"

    def _check_sample(self, sample: Any, i: int) -> None:
        """Raise BadRequest naming where sample ``i`` goes wrong (its shape, or its first value not a number)."""
        where = f"inputs[{i}]"
        if not isinstance(sample, list):
            raise BadRequest(422, f"{where}: is {kind_text(sample)}; each sample must be {self.sample_text()}")
        flat: list[tuple[str, Any]] = []

        def walk(value: Any, path: str) -> None:
            if isinstance(value, list):
                for j, v in enumerate(value):
                    walk(v, f"{path}[{j}]")
            else:
                flat.append((path, value))

        walk(sample, where)
        for path, value in flat:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise BadRequest(422, f"{path}: {kind_text(value)} is not a number")
        try:
            got = np.array(sample).shape
        except ValueError:
            got = None
        if got not in (self.shape, (self.row_values,)):
            shown = "ragged lists" if got is None else f"shape {shape_text(got)}"
            raise BadRequest(422, f"{where}: has {len(flat)} values in {shown}; the model takes {self.sample_text()}")

    def _finite(self, arr: np.ndarray, key: str) -> np.ndarray:
        big = ~(np.abs(arr) <= FLOAT32_MAX)
        if big.any():
            first = np.argwhere(big.reshape(len(arr), -1))[0]
            raise BadRequest(422, f"{key}[{first[0]}]: value {first[1]} is beyond float32's range")
        return arr.astype(np.float32)

    def _rows(self, rows: list[Any]) -> np.ndarray:
        if not self.features:
            raise BadRequest(422, f"'rows': this model has no named columns; send 'inputs' ({self.sample_text()})")
        features = self.features
        want = len(features)
        values: list[list[Any]] = []
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise BadRequest(422, f"rows[{i}]: is {kind_text(row)}; each row must be an object of column: value")
            try:
                line = [row[f] for f in features]
            except KeyError:
                missing = [f for f in features if f not in row]
                raise BadRequest(
                    422,
                    f"rows[{i}]: lacks column {missing[0]!r}"
                    + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
                ) from None
            if len(row) != want:
                known = set(features)
                extra = next(k for k in row if k not in known)
                raise BadRequest(
                    422,
                    f"rows[{i}]: unknown column {extra!r}; the model's columns are "
                    + ", ".join(repr(f) for f in features[:5])
                    + (", ..." if want > 5 else ""),
                )
            values.append(line)
        try:
            arr = np.array(values)
        except (ValueError, TypeError):
            arr = None
        if arr is None or arr.dtype.kind not in "iuf":
            for i, line in enumerate(values):
                for name, value in zip(features, line):
                    if isinstance(value, bool) or not isinstance(value, (int, float)):
                        raise BadRequest(422, f"rows[{i}]: column {name!r}: {kind_text(value)} is not a number")
            raise BadRequest(422, "rows: values must be numbers")  # pragma: no cover
        big = ~(np.abs(arr) <= FLOAT32_MAX)
        if big.any():
            i, j = np.argwhere(big)[0]
            raise BadRequest(422, f"rows[{i}]: column {features[j]!r}: value is beyond float32's range")
        return arr.astype(np.float32).reshape((len(rows), *self.shape))

    def _images(self, images: list[Any]) -> np.ndarray:
        if self.image_shape is None:
            raise BadRequest(
                422, f"'images': this model takes {self.row_values} tabular values, not images; send 'inputs' or 'rows'"
            )
        assert self.prep is not None
        c, h, w = self.image_shape
        out = np.empty((len(images), c, h, w), dtype=np.float32)
        for i, item in enumerate(images):
            where = f"images[{i}]"
            if not isinstance(item, str):
                raise BadRequest(422, f"{where}: is {kind_text(item)}; each image must be a base64 PNG or JPEG string")
            text = item.split(",", 1)[1] if item.startswith("data:") else item  # a data: URL is fine too
            try:
                raw = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest(422, f"{where}: is not valid base64") from None
            try:  # decoded, oriented and resized exactly as the training images were
                out[i] = decode_image(raw, self.prep, formats=IMAGE_FORMATS)
            except ImageError as exc:
                said = exc.reason.startswith(("is a ", "too many pixels"))
                raise BadRequest(
                    422, f"{where}: {exc.reason}" if said else f"{where}: is not a readable PNG or JPEG image"
                ) from None
        if self.pixel_scale != 1.0:
            out *= self.pixel_scale
        return out.reshape((len(images), *self.shape))

    # ------------------------------------------------------------------ answers

    def answer(self, probs: np.ndarray, version: str, notes: dict[str, Any] | None = None) -> bytes:
        """The JSON answer: per row the predicted class and every class's probability, or a regression's
        value in the target's units; ``notes`` (a table's unseen and missing values) are added as they are."""
        if self.table is not None:
            rows = self.table.answers(probs, self.classes)
        else:
            classes = self.classes
            best = probs.argmax(axis=1).tolist()
            rows = [{"class": classes[k], "probabilities": dict(zip(classes, p))} for k, p in zip(best, probs.tolist())]
        return orjson.dumps({"predictions": rows, "model_version": version, **(notes or {})})

    # ------------------------------------------------------------------ description

    def example_body(self) -> dict[str, Any]:
        if self.table is not None:
            return {"rows": [self.table.example_row()]}
        if self.features:
            return {"rows": [{f: 0.0 for f in self.features}]}
        return {"inputs": [[0.0] * self.row_values]}
