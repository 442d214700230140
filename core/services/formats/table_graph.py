"""A table's schema inside the torch.export graph: raw rows in, the schema's fill, fences and indicators inside.

The ``.pt2`` of a model trained on a table takes one float32 matrix, one column per used column in the
table's order, the same raw numbers the ONNX graph's inputs take:

- number: the raw value, NaN for a missing one (filled with the training median; the missing indicator
  is made inside where training saw missing cells), clipped to the schema's outlier fences;
- bool: 1 or 0, NaN for missing;
- category: the level's index in the schema (0 missing, 1 unseen, 2.. the levels in order); NaN is missing,
  an index out of range unseen (strings cannot enter a torch graph);
- datetime and text: the column's block of the encoded row, as its pre-step gives it (several numbers:
  ``core.schema.encode_columns`` of the cells, a text's sentence embedding where ``model.text_encoder`` set
  one; ``model.json`` names each block's width, layout and encoder).

:func:`raw_rows_from_encoded` turns encoded rows back into such raw rows (the export verifies the graph
with them, and ``predict`` feeds the graph with them). Torch loads on first use.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from core.schema import RESERVED_LEVELS, ColumnSpec, Schema
from core.schema.dates import DATE_PARTS
from core.schema.text import describe_pre_step

if TYPE_CHECKING:
    import torch
    from torch import nn

RAW_ROWS = "raw rows"  # the ``.pt2`` entry's ``layout``: the graph takes raw rows, not encoded ones


def block_input(c: ColumnSpec) -> dict[str, Any]:
    """What a date's or a text's input to an exported graph is: its pre-step and the numbers it gives."""
    if c.kind == "text" and c.encoder:
        from core.schema.sentences import describe_pre_step as embedding_pre_step

        return embedding_pre_step(c.encoder, c.fingerprint, c.dim)
    if c.kind == "text":
        return describe_pre_step(*c.slots)
    return {
        "width": c.width,
        "pre_step": "core.schema.encode_columns (core.schema.dates.date_parts of the parsed cells)",
        "layout": ", ".join(DATE_PARTS)
        + (", missing (1 where the date was missing)" if c.indicator else "")
        + f"; a missing date's parts are the training means; days since {c.origin:.0f} s after 1970",
    }


def raw_positions(schema: Schema) -> dict[str, tuple[int, int]]:
    """Each used column's (first position, width) in a raw row: one number each, a block for a date or text."""
    out: dict[str, tuple[int, int]] = {}
    at = 0
    for c in schema.used:
        width = c.width if c.kind in ("datetime", "text") else 1
        out[c.name] = (at, width)
        at += width
    return out


def raw_row_columns(schema: Schema) -> list[dict[str, Any]]:
    """What each column of a raw row is, in order (a ``model.json`` entry's ``columns``)."""
    out: list[dict[str, Any]] = []
    for c in schema.used:
        col: dict[str, Any] = {"name": c.name, "kind": c.kind}
        if c.kind in ("datetime", "text"):
            col.update(block_input(c))
        elif c.kind == "category":
            col["values"] = "index: 0 missing, 1 unseen, 2.. the schema's levels in order"
        elif c.kind == "bool":
            col["values"] = "1 or 0, NaN missing"
        else:
            col["values"] = "the raw number, NaN missing"
        out.append(col)
    return out


def raw_rows_from_encoded(schema: Schema, x: np.ndarray, beyond_fences: bool = False) -> np.ndarray:
    """Raw rows (one float32 column per used column, a block per date or text) that encode to the encoded
    rows ``x``.

    ``beyond_fences``: a value at an outlier fence is moved past it (the graph clips it back), so that a
    verification exercises the fences too."""
    x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    numeric, categorical = schema.numeric, schema.categorical
    position = {c.name: j for j, c in enumerate(numeric)}
    indicator = {c.name: len(numeric) + k for k, c in enumerate(c for c in numeric if c.indicator)}
    n_ind = len(indicator)
    block_at = len(numeric) + n_ind
    blocks: dict[str, int] = {}
    for c in schema.blocks:
        blocks[c.name] = block_at
        block_at += c.width
    cat_position = {c.name: block_at + k for k, c in enumerate(categorical)}
    raw_at = raw_positions(schema)
    out = np.empty((len(x), sum(w for _, w in raw_at.values())), dtype=np.float32)
    for c in schema.used:
        j, width = raw_at[c.name]
        if c.name in blocks:
            out[:, j : j + width] = x[:, blocks[c.name] : blocks[c.name] + width]
            continue
        if c.kind == "category":
            out[:, j] = x[:, cat_position[c.name]]
            continue
        v = x[:, position[c.name]].copy()
        if beyond_fences and c.clip is not None:
            low, high = np.float32(c.clip[0]), np.float32(c.clip[1])
            v[v <= low] -= np.float32(1.0) + abs(low)
            v[v >= high] += np.float32(1.0) + abs(high)
        if c.name in indicator:
            v[x[:, indicator[c.name]] > 0.5] = np.nan
        out[:, j] = v
    return out


@functools.cache
def _table_rows_class() -> type:
    # Built on first use so that importing this module does not import torch.
    import torch
    from torch import nn

    class TableRows(nn.Module):
        """Raw rows in; the schema's encoded rows handed to ``model`` (which standardises them)."""

        num_idx: torch.Tensor
        fill: torch.Tensor
        low: torch.Tensor
        high: torch.Tensor
        ind_idx: torch.Tensor
        blk_idx: torch.Tensor
        cat_idx: torch.Tensor
        cat_top: torch.Tensor

        def __init__(self, model: nn.Module, schema: Schema) -> None:
            super().__init__()
            self.model = model
            at = {name: first for name, (first, _) in raw_positions(schema).items()}
            numeric = schema.numeric
            inf = float("inf")
            self.register_buffer("num_idx", torch.tensor([at[c.name] for c in numeric], dtype=torch.long))
            self.register_buffer("fill", torch.tensor([c.fill for c in numeric], dtype=torch.float32))
            self.register_buffer("low", torch.tensor([c.clip[0] if c.clip else -inf for c in numeric]).float())
            self.register_buffer("high", torch.tensor([c.clip[1] if c.clip else inf for c in numeric]).float())
            self.register_buffer(
                "ind_idx", torch.tensor([k for k, c in enumerate(numeric) if c.indicator], dtype=torch.long)
            )
            self.register_buffer(
                "blk_idx", torch.tensor([at[c.name] + k for c in schema.blocks for k in range(c.width)]).long()
            )
            self.register_buffer("cat_idx", torch.tensor([at[c.name] for c in schema.categorical], dtype=torch.long))
            self.register_buffer(
                "cat_top", torch.tensor([len(c.levels) + RESERVED_LEVELS - 1 for c in schema.categorical]).float()
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            numbers = x.index_select(1, self.num_idx)
            missing = torch.isnan(numbers)
            filled = torch.where(missing, self.fill, numbers)
            parts = [torch.minimum(torch.maximum(filled, self.low), self.high)]
            parts.append(missing.index_select(1, self.ind_idx).to(x.dtype))
            parts.append(x.index_select(1, self.blk_idx))
            codes = x.index_select(1, self.cat_idx).round()
            codes = torch.where(torch.isnan(codes), torch.zeros_like(codes), codes)
            outside = (codes < 0) | (codes > self.cat_top)
            parts.append(torch.where(outside, torch.ones_like(codes), codes))
            return self.model(torch.cat(parts, dim=1))

    return TableRows


def with_table_rows(model: nn.Module, schema: Schema) -> nn.Module:
    """``model`` (encoded rows in, standardisation inside) behind the schema's fill, fences and indicators."""
    wrapped: nn.Module = _table_rows_class()(model, schema)
    return wrapped.eval()


def raw_rows_runner(schema: Schema, module: Any) -> Any:
    """numpy encoded rows in (what ``predict`` and ``serve`` hand a predictor), the raw-row graph run on them."""
    import torch

    def run(x: np.ndarray) -> np.ndarray:
        rows = torch.from_numpy(raw_rows_from_encoded(schema, x))
        with torch.no_grad():
            out: torch.Tensor = module(rows)
            return out.detach().numpy()

    return run
