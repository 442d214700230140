"""A served table model's side of the API: rows by the table's own column names, answered in its terms.

The model's fitted schema (:mod:`core.schema`) is the one contract: a request's
rows are encoded by it exactly as ``traindesk predict`` encodes a CSV's rows
(any key order, extra keys ignored, ``null``, ``""``, a missing word or an
absent key a missing value, an unseen category its unseen level), and the
description (OpenAPI, /docs, the window's try-it form) lists the raw columns
with their kinds, levels and a real training row as the example. Encoded
features never appear in what a client sees. Torch-free.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.schema import CellError, Schema, encode_rows

SCALARS = (str, int, float, bool)


def kind_text(value: Any) -> str:
    """A JSON value as an error shows it: ``'long' (text)``, ``true (a boolean)``, ``a list``."""
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


class RowError(ValueError):
    """A row the model cannot take: one line naming the row and the column."""


@dataclass(frozen=True)
class TableRows:
    """The raw columns a table model takes and what it answers: classes, or a number in the target's units."""

    schema: Schema

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> TableRows | None:
        doc = meta.get("schema")
        if not isinstance(doc, Mapping) or not doc.get("columns"):
            return None
        return cls(Schema.from_json(doc))

    @property
    def regression(self) -> bool:
        return self.schema.task == "regression"

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.schema.used]

    def same_as(self, other: TableRows) -> bool:
        mine = [(c.name, c.kind, tuple(c.levels)) for c in self.schema.used]
        return mine == [(c.name, c.kind, tuple(c.levels)) for c in other.schema.used]

    # ------------------------------------------------------------------ requests

    def encode(self, rows: list[Any]) -> tuple[np.ndarray, dict[str, dict[str, int]]]:
        """The rows as the model's float32 input, and the unseen and missing values met (per column)."""
        kinds = {c.name: c.kind for c in self.schema.used}
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise RowError(f"rows[{i}]: is {kind_text(row)}; each row must be an object of column: value")
            if not kinds.keys() & row.keys():
                raise RowError(
                    f"rows[{i}]: has none of the model's columns ({self.names_text()}); "
                    "a column left out is a missing value, but a row needs at least one"
                )
            for key, value in row.items():
                kind = kinds.get(key)
                if kind is None or value is None:
                    continue  # another key: ignored
                if not isinstance(value, SCALARS):
                    raise RowError(f"rows[{i}]: column {key!r}: {kind_text(value)} is not a value")
                if kind == "number" and isinstance(value, bool):  # a mistake, not 1 or 0
                    raise RowError(f"rows[{i}]: column {key!r}: {kind_text(value)} is not a number")
        try:
            enc = encode_rows(self.schema, rows)
        except CellError as exc:
            raise RowError(
                f"rows[{exc.row}]: column {exc.column!r}: {kind_text(exc.value)} is not {exc.expected}"
            ) from None
        notes = {k: v for k, v in (("unseen", enc.unseen), ("missing", enc.missing)) if v}
        return enc.x, notes

    def names_text(self) -> str:
        names = self.names
        return ", ".join(repr(n) for n in names[:6]) + (", ..." if len(names) > 6 else "")

    def example_row(self) -> dict[str, Any]:
        """A real training row (the schema's example), or one made of the fill values and first levels."""
        if self.schema.example:
            return {n: self.schema.example.get(n) for n in self.names}
        out: dict[str, Any] = {}
        for c in self.schema.used:
            if c.kind == "category":
                out[c.name] = c.levels[0] if c.levels else None
            elif c.kind == "bool":
                out[c.name] = c.fill > 0.5
            else:
                out[c.name] = int(c.fill) if float(c.fill).is_integer() else c.fill
        return out

    def canary(self) -> np.ndarray:
        """The example row, encoded: what a model process must answer before it takes requests."""
        return encode_rows(self.schema, [self.example_row()]).x

    # ------------------------------------------------------------------ answers

    def answers(self, out: np.ndarray, classes: tuple[str, ...]) -> list[dict[str, Any]]:
        if self.regression:
            return [{"value": v} for v in out[:, 0].tolist()]
        best = out.argmax(axis=1).tolist()
        return [{"class": classes[k], "probabilities": dict(zip(classes, p))} for k, p in zip(best, out.tolist())]

    # ------------------------------------------------------------------ description

    def columns(self) -> list[dict[str, Any]]:
        """Each raw column: name, kind, levels (categories), the example's value, missing cells seen in training."""
        example = self.example_row()
        out = []
        for c in self.schema.used:
            entry: dict[str, Any] = {"name": c.name, "kind": c.kind, "example": example.get(c.name)}
            if c.kind == "category":
                entry["levels"] = list(c.levels)
            if c.missing:
                entry["missing_in_training"] = c.missing
            out.append(entry)
        return out

    def description(self) -> dict[str, Any]:
        """What the window's try-it form and a client read: ``x-traindesk`` of /openapi.json."""
        return {
            "task": self.schema.task,
            "target": self.schema.target,
            "columns": self.columns(),
            "example": {"rows": [self.example_row()]},
            **({"classes": list(self.schema.classes)} if not self.regression else {}),
        }

    def row_schema(self) -> dict[str, Any]:
        props: dict[str, Any] = {}
        example = self.example_row()
        for c in self.schema.used:
            if c.kind == "number":
                prop: dict[str, Any] = {"type": ["number", "null"], "description": "a number; null when missing"}
            elif c.kind == "bool":
                prop = {
                    "type": ["boolean", "string", "null"],
                    "description": "true/false (also yes/no, 1/0); null when missing",
                }
            elif c.kind == "text":
                prop = {"type": ["string", "null"], "description": "free text; null when missing"}
            elif c.kind == "datetime":
                form = {"iso": "YYYY-MM-DD[ HH:MM[:SS]]", "dmy": "DD/MM/YYYY[ HH:MM]", "mdy": "MM/DD/YYYY[ HH:MM]"}
                prop = {
                    "type": ["string", "null"],
                    "description": f"a date as {form[c.order]}; null when missing, another text is taken as missing",
                }
            else:
                shown = ", ".join(c.levels[:30]) + (", ..." if len(c.levels) > 30 else "")
                prop = {
                    "type": ["string", "number", "null"],
                    "x-levels": list(c.levels),
                    "description": f"one of: {shown}; another value is taken as unseen; null when missing",
                }
            prop["example"] = example.get(c.name)
            props[c.name] = prop
        return {
            "type": "object",
            "properties": props,
            "additionalProperties": True,
            "description": "a row by the table's column names, in any order; a column left out is missing, "
            "other keys are ignored",
        }

    def answer_schema(self, classes: tuple[str, ...]) -> dict[str, Any]:
        if self.regression:
            return {
                "type": "object",
                "properties": {
                    "value": {"type": "number", "description": f"the predicted {self.schema.target}, in its own units"}
                },
            }
        return {
            "type": "object",
            "properties": {
                "class": {"type": "string", "enum": list(classes)},
                "probabilities": {"type": "object", "properties": {c: {"type": "number"} for c in classes}},
            },
        }

    def docs_list(self) -> str:
        items = []
        for c in self.columns()[:200]:
            what = c["kind"] + (f": {', '.join(c['levels'][:20])}" if c.get("levels") else "")
            items.append(f"<li><code>{html.escape(c['name'])}</code> {html.escape(what)}</li>")
        return "".join(items)
