"""A table's schema inside the torch.export graph: raw rows in, the schema's fill, fences and indicators inside.

The ``.pt2`` of a model trained on a table takes one float32 matrix, one column per used column in the
table's order, the same raw numbers the ONNX graph's inputs take:

- number: the raw value, NaN for a missing one (filled with the training median; the missing indicator
  is made inside where training saw missing cells), clipped to the schema's outlier fences;
- bool: 1 or 0, NaN for missing;
- category: the level's index in the schema (0 missing, 1 unseen, 2.. the levels in order); NaN is missing,
  an index out of range unseen (strings cannot enter a torch graph).

:func:`raw_rows_from_encoded` turns encoded rows back into such raw rows (the export verifies the graph
with them, and ``predict`` feeds the graph with them). Torch loads on first use.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from core.schema import RESERVED_LEVELS, Schema

if TYPE_CHECKING:
    import torch
    from torch import nn

RAW_ROWS = "raw rows"  # the ``.pt2`` entry's ``layout``: the graph takes raw rows, not encoded ones


def raw_row_columns(schema: Schema) -> list[dict[str, Any]]:
    """What each column of a raw row is, in order (a ``model.json`` entry's ``columns``)."""
    out: list[dict[str, Any]] = []
    for c in schema.used:
        col: dict[str, Any] = {"name": c.name, "kind": c.kind}
        if c.kind == "category":
            col["values"] = "index: 0 missing, 1 unseen, 2.. the schema's levels in order"
        elif c.kind == "bool":
            col["values"] = "1 or 0, NaN missing"
        else:
            col["values"] = "the raw number, NaN missing"
        out.append(col)
    return out


def raw_rows_from_encoded(schema: Schema, x: np.ndarray, beyond_fences: bool = False) -> np.ndarray:
    """Raw rows (one float32 column per used column) that encode to the encoded rows ``x``.

    ``beyond_fences``: a value at an outlier fence is moved past it (the graph clips it back), so that a
    verification exercises the fences too."""
    x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    numeric, categorical = schema.numeric, schema.categorical
    position = {c.name: j for j, c in enumerate(numeric)}
    indicator = {c.name: len(numeric) + k for k, c in enumerate(c for c in numeric if c.indicator)}
    n_ind = len(indicator)
    cat_position = {c.name: len(numeric) + n_ind + k for k, c in enumerate(categorical)}
    out = np.empty((len(x), len(schema.used)), dtype=np.float32)
    for j, c in enumerate(schema.used):
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
        cat_idx: torch.Tensor
        cat_top: torch.Tensor

        def __init__(self, model: nn.Module, schema: Schema) -> None:
            super().__init__()
            self.model = model
            used = [c.name for c in schema.used]
            numeric = schema.numeric
            inf = float("inf")
            self.register_buffer("num_idx", torch.tensor([used.index(c.name) for c in numeric], dtype=torch.long))
            self.register_buffer("fill", torch.tensor([c.fill for c in numeric], dtype=torch.float32))
            self.register_buffer("low", torch.tensor([c.clip[0] if c.clip else -inf for c in numeric]).float())
            self.register_buffer("high", torch.tensor([c.clip[1] if c.clip else inf for c in numeric]).float())
            self.register_buffer(
                "ind_idx", torch.tensor([k for k, c in enumerate(numeric) if c.indicator], dtype=torch.long)
            )
            self.register_buffer(
                "cat_idx", torch.tensor([used.index(c.name) for c in schema.categorical], dtype=torch.long)
            )
            self.register_buffer(
                "cat_top", torch.tensor([len(c.levels) + RESERVED_LEVELS - 1 for c in schema.categorical]).float()
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            numbers = x.index_select(1, self.num_idx)
            missing = torch.isnan(numbers)
            filled = torch.where(missing, self.fill, numbers)
            parts = [torch.minimum(torch.maximum(filled, self.low), self.high)]
            parts.append(missing.index_select(1, self.ind_idx).to(x.dtype))
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
