"""What a served model takes and gives, read from its description (``model.json``'s fields).

One object turns a request body into the float32 rows the model takes, or
into one line that names the field, the row and what was wrong; it writes
the answers, the OpenAPI description and the /docs page. Nothing here
imports torch: it runs in the HTTP process.
"""

from __future__ import annotations

import base64
import binascii
import html
import io
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

FLOAT32_MAX = float(np.finfo(np.float32).max)
BODY_KEYS = ("inputs", "rows", "images")


class BadRequest(Exception):
    """A request the model cannot take: its HTTP status and one line saying what and where."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _shape_text(shape: tuple[int, ...]) -> str:
    return "×".join(str(s) for s in shape)


def _kind(value: Any) -> str:
    if value is None:
        return "null (a missing value)"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, str):
        shown = value if len(value) <= 20 else value[:17] + "..."
        return f"{shown!r} (text)"
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    return repr(value)


@dataclass(frozen=True)
class ModelSchema:
    """The served model's inputs and outputs: shape, feature names, image size, classes."""

    shape: tuple[int, ...]
    features: tuple[str, ...]
    classes: tuple[str, ...]
    image_shape: tuple[int, ...] | None  # (C, H, W) when images are accepted
    pixel_scale: float

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
        return cls(shape, features, tuple(str(c) for c in meta["classes"]), image, scale)

    # what two models must share for one to replace the other while serving
    def difference(self, other: ModelSchema) -> str | None:
        """None when ``other`` takes and gives the same as this one, else the first difference, in words."""
        if other.shape != self.shape:
            return f"input shape {_shape_text(other.shape)} instead of {_shape_text(self.shape)}"
        if other.features != self.features:
            return "other feature columns"
        if other.classes != self.classes:
            return f"classes {list(other.classes)[:6]} instead of {list(self.classes)[:6]}"
        if other.image_shape != self.image_shape or other.pixel_scale != self.pixel_scale:
            return "another image size or pixel scale"
        return None

    @property
    def row_values(self) -> int:
        return math.prod(self.shape)

    # ------------------------------------------------------------------ requests

    def parse(self, body: bytes) -> np.ndarray:
        """The rows of a ``POST /predict`` body as float32 (n, *shape); BadRequest names what is wrong."""
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(400, f"the body is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise BadRequest(400, 'the body must be a JSON object: {"inputs": [...]}, {"rows": [...]} '
                                  'or {"images": [...]}')
        given = [k for k in BODY_KEYS if k in doc]
        unknown = [k for k in doc if k not in BODY_KEYS]
        if unknown:
            raise BadRequest(422, f"unknown field {unknown[0]!r}: the body takes one of "
                                  + ", ".join(repr(k) for k in BODY_KEYS))
        if len(given) != 1:
            raise BadRequest(422, "the body must have exactly one of " + ", ".join(repr(k) for k in BODY_KEYS)
                             + (f", not {len(given)}" if given else ""))
        key = given[0]
        items = doc[key]
        if not isinstance(items, list) or not items:
            raise BadRequest(422, f"{key!r} must be a non-empty list")
        if key == "inputs":
            return self._inputs(items)
        if key == "rows":
            return self._rows(items)
        return self._images(items)

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
        raise BadRequest(422, f"inputs: samples must each be {self._sample_text()}")  # pragma: no cover

    def _sample_text(self) -> str:
        if len(self.shape) == 1:
            return f"a list of {self.shape[0]} numbers"
        return f"nested as {_shape_text(self.shape)} or a flat list of {self.row_values} numbers"

    def _check_sample(self, sample: Any, i: int) -> None:
        """Raise BadRequest naming where sample ``i`` goes wrong (its shape, or its first value not a number)."""
        where = f"inputs[{i}]"
        if not isinstance(sample, list):
            raise BadRequest(422, f"{where}: is {_kind(sample)}; each sample must be {self._sample_text()}")
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
                raise BadRequest(422, f"{path}: {_kind(value)} is not a number")
        try:
            got = np.array(sample).shape
        except ValueError:
            got = None
        if got not in (self.shape, (self.row_values,)):
            shown = "ragged lists" if got is None else f"shape {_shape_text(got)}"
            raise BadRequest(422, f"{where}: has {len(flat)} values in {shown}; the model takes "
                                  f"{self._sample_text()}")

    def _finite(self, arr: np.ndarray, key: str) -> np.ndarray:
        big = ~(np.abs(arr) <= FLOAT32_MAX)
        if big.any():
            first = np.argwhere(big.reshape(len(arr), -1))[0]
            raise BadRequest(422, f"{key}[{first[0]}]: value {first[1]} is beyond float32's range")
        return arr.astype(np.float32)

    def _rows(self, rows: list[Any]) -> np.ndarray:
        if not self.features:
            raise BadRequest(422, f"'rows': this model has no named columns; send 'inputs' "
                                  f"({self._sample_text()})")
        features = self.features
        want = len(features)
        values: list[list[Any]] = []
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise BadRequest(422, f"rows[{i}]: is {_kind(row)}; each row must be an object of column: value")
            try:
                line = [row[f] for f in features]
            except KeyError:
                missing = [f for f in features if f not in row]
                raise BadRequest(422, f"rows[{i}]: lacks column {missing[0]!r}"
                                      + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")) from None
            if len(row) != want:
                known = set(features)
                extra = next(k for k in row if k not in known)
                raise BadRequest(422, f"rows[{i}]: unknown column {extra!r}; the model's columns are "
                                      + ", ".join(repr(f) for f in features[:5]) + (", ..." if want > 5 else ""))
            values.append(line)
        try:
            arr = np.array(values)
        except (ValueError, TypeError):
            arr = None
        if arr is None or arr.dtype.kind not in "iuf":
            for i, line in enumerate(values):
                for name, value in zip(features, line):
                    if isinstance(value, bool) or not isinstance(value, (int, float)):
                        raise BadRequest(422, f"rows[{i}]: column {name!r}: {_kind(value)} is not a number")
            raise BadRequest(422, "rows: values must be numbers")  # pragma: no cover
        big = ~(np.abs(arr) <= FLOAT32_MAX)
        if big.any():
            i, j = np.argwhere(big)[0]
            raise BadRequest(422, f"rows[{i}]: column {features[j]!r}: value is beyond float32's range")
        return arr.astype(np.float32).reshape((len(rows), *self.shape))

    def _images(self, images: list[Any]) -> np.ndarray:
        if self.image_shape is None:
            raise BadRequest(422, f"'images': this model takes {self.row_values} tabular values, not images; "
                                  "send 'inputs' or 'rows'")
        from PIL import Image, UnidentifiedImageError

        c, h, w = self.image_shape
        out = np.empty((len(images), c, h, w), dtype=np.float32)
        for i, item in enumerate(images):
            where = f"images[{i}]"
            if not isinstance(item, str):
                raise BadRequest(422, f"{where}: is {_kind(item)}; each image must be a base64 PNG or JPEG string")
            text = item.split(",", 1)[1] if item.startswith("data:") else item  # a data: URL is fine too
            try:
                raw = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest(422, f"{where}: is not valid base64") from None
            try:
                img = Image.open(io.BytesIO(raw))
                if img.format not in ("PNG", "JPEG"):
                    raise BadRequest(422, f"{where}: is a {img.format} image; send PNG or JPEG")
                img.load()
            except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError):
                raise BadRequest(422, f"{where}: is not a readable PNG or JPEG image") from None
            if img.size != (w, h):
                raise BadRequest(422, f"{where}: is {img.size[0]}×{img.size[1]} pixels; the model takes "
                                      f"{w}×{h}")
            arr = np.asarray(img.convert("L" if c == 1 else "RGB"), dtype=np.float32) * (self.pixel_scale / 255.0)
            out[i] = arr[None] if c == 1 else arr.transpose(2, 0, 1)
        return out.reshape((len(images), *self.shape))

    # ------------------------------------------------------------------ answers

    def answer(self, probs: np.ndarray, version: str) -> bytes:
        """The JSON answer: per row the predicted class and every class's probability."""
        classes = self.classes
        best = probs.argmax(axis=1).tolist()
        rows = [{"class": classes[k], "probabilities": dict(zip(classes, p))}
                for k, p in zip(best, probs.tolist())]
        return orjson.dumps({"predictions": rows, "model_version": version})

    # ------------------------------------------------------------------ description

    def example_body(self) -> dict[str, Any]:
        if self.features:
            return {"rows": [{f: 0.0 for f in self.features}]}
        return {"inputs": [[0.0] * self.row_values]}

    def openapi(self, title: str, version: str) -> dict[str, Any]:
        """An OpenAPI 3.1 description of this server for this model."""
        number = {"type": "number"}
        nested: dict[str, Any] = number
        for size in reversed(self.shape):
            nested = {"type": "array", "items": nested, "minItems": size, "maxItems": size}
        flat = {"type": "array", "items": number, "minItems": self.row_values, "maxItems": self.row_values}
        inputs = {"type": "array", "minItems": 1, "items": {"oneOf": [nested, flat]} if len(self.shape) > 1 else flat,
                  "description": f"samples, each {self._sample_text()}"}
        choices: list[dict[str, Any]] = [{"type": "object", "properties": {"inputs": inputs}, "required": ["inputs"],
                                          "additionalProperties": False}]
        if self.features:
            row = {"type": "object", "properties": {f: number for f in self.features},
                   "required": list(self.features), "additionalProperties": False}
            choices.append({"type": "object", "required": ["rows"], "additionalProperties": False,
                            "properties": {"rows": {"type": "array", "minItems": 1, "items": row,
                                                    "description": "rows by column name, in any order"}}})
        if self.image_shape is not None:
            c, h, w = self.image_shape
            choices.append({"type": "object", "required": ["images"], "additionalProperties": False,
                            "properties": {"images": {
                                "type": "array", "minItems": 1,
                                "items": {"type": "string", "contentEncoding": "base64",
                                          "contentMediaType": "image/png"},
                                "description": f"base64 PNG or JPEG images of {w}×{h} pixels, "
                                               f"{'grey' if c == 1 else 'RGB'}"}}})
        answer = {"type": "object", "properties": {
            "predictions": {"type": "array", "items": {"type": "object", "properties": {
                "class": {"type": "string", "enum": list(self.classes)},
                "probabilities": {"type": "object",
                                  "properties": {c: {"type": "number"} for c in self.classes}}}}},
            "model_version": {"type": "string"}}}
        error = {"type": "object", "properties": {"error": {"type": "string"}}}

        def err(text: str) -> dict[str, Any]:
            return {"description": text, "content": {"application/json": {"schema": error}}}

        secured = [{"bearer": []}]
        plain = {"200": {"description": "OK"}}
        return {
            "openapi": "3.1.0",
            "info": {"title": title, "version": version,
                     "description": f"classes: {', '.join(self.classes)}; input shape {_shape_text(self.shape)}"},
            "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
                           "schemas": {"PredictRequest": {"oneOf": choices}, "PredictAnswer": answer,
                                       "Error": error}},
            "security": secured,
            "paths": {
                "/predict": {"post": {
                    "summary": "predict the class of each row",
                    "parameters": [{"name": "X-Request-Timeout", "in": "header", "required": False,
                                    "schema": {"type": "number"}, "description": "seconds to wait at most"}],
                    "requestBody": {"required": True, "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/PredictRequest"},
                        "example": self.example_body()}}},
                    "responses": {"200": {"description": "one prediction per row, in order", "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/PredictAnswer"}}}},
                        "400": err("not JSON"), "401": err("no or wrong bearer token"),
                        "413": err("body too large"), "422": err("a field, row or value the model cannot take"),
                        "429": err("queue full: retry after Retry-After seconds"),
                        "500": err("the model process crashed on this input"),
                        "503": err("draining or not ready"), "504": err("deadline passed")}}},
                "/health": {"get": {"summary": "the process is up", "security": [], "responses": plain}},
                "/ready": {"get": {"summary": "every worker alive and the model checked since its last load",
                                   "responses": {"200": {"description": "ready"}, "503": err("not ready")}}},
                "/metrics": {"get": {"summary": "Prometheus metrics", "responses": plain}},
                "/admin/reload": {"post": {"summary": "load a new checkpoint of the same schema, one worker at a time",
                                           "requestBody": {"required": False, "content": {"application/json": {
                                               "schema": {"type": "object",
                                                          "properties": {"path": {"type": "string"}}}}}},
                                           "responses": {"200": {"description": "reloaded"},
                                                         "409": err("another schema: refused, the old model serves"),
                                                         "422": err("not loadable")}}},
            },
        }

    def docs_html(self, title: str, version: str, url: str) -> str:
        """A self-contained page: what to send, what comes back, a curl line."""
        example = orjson.dumps(self.example_body()).decode()
        short = example if len(example) < 400 else orjson.dumps({"inputs": [[0.0] * min(self.row_values, 4)]}).decode()
        columns = "".join(f"<li><code>{html.escape(f)}</code> number</li>" for f in self.features[:200])
        image = ""
        if self.image_shape is not None:
            c, h, w = self.image_shape
            image = (f"<h3>images</h3><p>base64 PNG or JPEG, {w}×{h} pixels, {'grey' if c == 1 else 'RGB'}: "
                     "<code>{\"images\": [\"iVBOR...\"]}</code></p>")
        return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}code,pre{{background:#eee;padding:2px}}</style>
</head><body><h1>{html.escape(title)}</h1><p>model version <code>{html.escape(version)}</code>;
classes: {html.escape(', '.join(self.classes))}; input shape {_shape_text(self.shape)}.
The machine-readable description is <a href="/openapi.json">/openapi.json</a>.</p>
<h2>POST /predict</h2><h3>inputs</h3><p>each sample {html.escape(self._sample_text())}:
<code>{{"inputs": [[...], ...]}}</code></p>
{"<h3>rows</h3><p>by column name, in any order:</p><ul>" + columns + "</ul>" if self.features else ""}
{image}<p>answer: <code>{{"predictions": [{{"class": ..., "probabilities": {{...}}}}], "model_version": ...}}</code></p>
<pre>curl -s {html.escape(url)}/predict -H 'Content-Type: application/json' -d '{html.escape(short)}'</pre>
<h2>Other endpoints</h2><ul><li>GET /health</li><li>GET /ready</li><li>GET /metrics</li>
<li>POST /admin/reload (bearer token)</li></ul></body></html>"""
