"""A table's schema inside the exports: the raw-column ONNX graph and the raw columns that feed it.

The ONNX export of a model trained on a table takes the table's columns, one
named input per used column, each a 1-D tensor of the batch:

- number: float32, NaN for a missing value (filled with the training median;
  a missing indicator follows where training saw missing cells), clipped to the
  schema's outlier fences where it has them;
- bool: string ("true"/"false", "yes"/"no", "1"/"0", any case; anything else missing);
- category: string; a value of ``missing_values`` is the missing level, a value
  not seen in training the unseen level;
- datetime and text: float32 (batch, width), the column's block as its pre-step gives it (the reference
  is ``core.schema.encode_columns``; ``model.json`` names the pre-step, the width and the layout): ONNX
  holds no date parsing, and n-gram hashing only through extra operator libraries.

The lookups are ``ai.onnx.ml`` LabelEncoder nodes and the filling plain
IsNaN/Where, so onnxruntime alone runs the file. Their output is the encoded
row of :mod:`core.schema`, which the exported model (standardisation
included) takes as before. :func:`columns_from_encoded` turns encoded rows
back into raw columns that encode to the same rows: the export verifies the
graph with them, and ``predict`` feeds such a graph with them.

Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from core.schema import FALSE_WORDS, RESERVED_LEVELS, TRUE_WORDS, UNSEEN_LEVEL, Schema
from core.services.formats.table_graph import (
    RAW_ROWS,
    block_input,
    raw_positions,
    raw_row_columns,
    raw_rows_from_encoded,
)

ML_DOMAIN = "ai.onnx.ml"
ML_OPSET = 2  # LabelEncoder with keys_strings / values_floats


def tabular_schema(desc: Mapping[str, Any]) -> Schema | None:
    """The description's table schema (None for images, arrays and built-in data)."""
    schema = desc.get("schema")
    if not isinstance(schema, Mapping) or not schema.get("columns"):
        return None
    return Schema.from_json(schema)


def table_entry(graph: bool, raw_columns: bool, entry: dict[str, Any], desc: Mapping[str, Any]) -> dict[str, Any]:
    """A file entry of ``model.json`` for a table's model: what it takes and returns. ``graph``: the file is a
    program with the preprocessing inside; ``raw_columns``: it takes the table's raw columns (ONNX)."""
    entry = dict(entry)
    if desc.get("task") == "regression":
        entry["output_shape"] = ["batch", 1]
        if graph:
            entry["output"] = entry["output_name"] = "prediction"
            entry["output_units"] = "the target's"
    schema = tabular_schema(desc)
    if schema is None:
        return entry
    if raw_columns:
        entry["input"] = (
            "raw columns: one named input per column (strings for categories and booleans, "
            "float32 with NaN for missing numbers)"
        )
        entry["inputs"] = raw_inputs(schema)
    elif graph:
        entry["input"] = (
            "raw rows: one float32 column per used column, in 'columns' order (numbers raw with NaN for "
            "missing, booleans 1/0, category indices); the schema's fill, fences and indicators are inside"
        )
        entry["layout"] = RAW_ROWS
        entry["columns"] = raw_row_columns(schema)
    else:
        entry["input"] = "encoded rows (schema.encoded), then standardised with 'preprocessing'"
    return entry


def raw_inputs(schema: Schema) -> list[dict[str, Any]]:
    """What the raw-column ONNX graph takes: one entry per used column."""
    out: list[dict[str, Any]] = []
    for c in schema.used:
        if c.kind in ("datetime", "text"):
            out.append({"name": c.name, "kind": c.kind, "dtype": "float32", "shape": ["batch", c.width]})
            out[-1].update(block_input(c))
        else:
            dtype = "float32" if c.kind == "number" else "string"
            out.append({"name": c.name, "kind": c.kind, "dtype": dtype, "shape": "batch"})
    return out


def columns_from_encoded(schema: Schema, x: np.ndarray, beyond_fences: bool = False) -> dict[str, np.ndarray]:
    """Raw columns (float32 with NaN, or strings) that encode to the rows ``x`` (numbers filled, indicators,
    category indices): the inverse of :func:`core.schema.encode_columns` up to the fill (and, with
    ``beyond_fences``, values at an outlier fence moved past it)."""
    rows = raw_rows_from_encoded(schema, x, beyond_fences)
    out: dict[str, np.ndarray] = {}
    missing_text = schema.missing_values[0] if schema.missing_values else ""
    for c in schema.used:
        j, width = raw_positions(schema)[c.name]
        if c.kind in ("datetime", "text"):  # the pre-step's block: the text's cells cannot be recovered
            out[c.name] = rows[:, j : j + width]
            continue
        v = rows[:, j]
        if c.kind == "bool":
            text = np.where(np.isnan(v), missing_text, np.where(v > 0.5, "true", "false"))
            out[c.name] = text.astype(object)
        elif c.kind == "category":
            codes = np.clip(np.rint(v), 0, len(c.levels) + RESERVED_LEVELS - 1).astype(np.int64)
            table = np.asarray([missing_text, UNSEEN_LEVEL] + list(c.levels), dtype=object)
            out[c.name] = table[codes]
        else:
            out[c.name] = v
    return out


def valid_rows(info: Mapping[str, Any], x: Any) -> Any:
    """Rows (a torch tensor) turned into what encoding raw columns can give: whole category indices,
    0/1 indicators, booleans 0/1 (random rows around the statistics are not); other data unchanged."""
    schema = tabular_schema(info)
    if schema is None:
        return x
    import torch

    from core.schema import encode_columns

    rows = x.reshape(len(x), -1).numpy()
    cols = columns_from_encoded(schema, rows)
    again = encode_columns(schema, cols).x
    return torch.from_numpy(again).reshape(x.shape)


def onnx_feed(schema: Schema, x: np.ndarray, beyond_fences: bool = False) -> dict[str, np.ndarray]:
    """The raw-column graph's inputs for encoded rows ``x``."""
    feed = {}
    for name, col in columns_from_encoded(schema, x, beyond_fences).items():
        feed[name] = col.astype(np.float32) if col.dtype != object else np.asarray(col, dtype=object)
    return feed


def add_raw_columns(path: str, schema: Schema, encoded_input: str = "x") -> None:
    """Rewrite the ONNX file at ``path`` (input ``encoded_input``: encoded rows) to take raw columns instead."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(path)
    graph = model.graph
    nodes: list[Any] = []
    inits: list[Any] = []
    new_inputs: list[Any] = []
    nums: list[str] = []
    inds: list[str] = []
    cats: list[str] = []
    blocks: dict[str, str] = {}
    axes = "traindesk_pre_axes"
    inits.append(helper.make_tensor(axes, TensorProto.INT64, [1], [1]))

    def unsq(src: str, dst: str) -> None:
        nodes.append(helper.make_node("Unsqueeze", [src, axes], [dst]))

    for k, c in enumerate(schema.used):
        p = f"traindesk_pre_{k}"
        if c.kind in ("datetime", "text"):  # the pre-step's block, as the encoded row holds it
            new_inputs.append(helper.make_tensor_value_info(c.name, TensorProto.FLOAT, ["batch", c.width]))
            blocks[c.name] = c.name
            continue
        if c.kind == "category":
            new_inputs.append(helper.make_tensor_value_info(c.name, TensorProto.STRING, ["batch"]))
            keys = list(c.levels) + [m for m in schema.missing_values if m not in c.levels]
            values = [float(i + RESERVED_LEVELS) for i in range(len(c.levels))] + [0.0] * (len(keys) - len(c.levels))
            nodes.append(
                helper.make_node(
                    "LabelEncoder",
                    [c.name],
                    [f"{p}_code"],
                    domain=ML_DOMAIN,
                    keys_strings=keys,
                    values_floats=values,
                    default_float=1.0,
                )
            )
            unsq(f"{p}_code", f"{p}_col")
            cats.append(f"{p}_col")
            continue
        if c.kind == "bool":
            new_inputs.append(helper.make_tensor_value_info(c.name, TensorProto.STRING, ["batch"]))
            nodes.append(
                helper.make_node("StringNormalizer", [c.name], [f"{p}_low"], case_change_action="LOWER", locale="C")
            )
            words = sorted(TRUE_WORDS) + ["1"] + sorted(FALSE_WORDS) + ["0"]
            vals = [1.0] * (len(TRUE_WORDS) + 1) + [0.0] * (len(FALSE_WORDS) + 1)
            nodes.append(
                helper.make_node(
                    "LabelEncoder",
                    [f"{p}_low"],
                    [f"{p}_num"],
                    domain=ML_DOMAIN,
                    keys_strings=words,
                    values_floats=vals,
                    default_float=float("nan"),
                )
            )
            value = f"{p}_num"
        else:
            new_inputs.append(helper.make_tensor_value_info(c.name, TensorProto.FLOAT, ["batch"]))
            value = c.name
        inits.append(helper.make_tensor(f"{p}_fill", TensorProto.FLOAT, [], [c.fill]))
        nodes.append(helper.make_node("IsNaN", [value], [f"{p}_isnan"]))
        nodes.append(helper.make_node("Where", [f"{p}_isnan", f"{p}_fill", value], [f"{p}_filled"]))
        filled = f"{p}_filled"
        if c.clip is not None:  # the schema's outlier fences, as encoding applies them
            inits.append(helper.make_tensor(f"{p}_low", TensorProto.FLOAT, [], [c.clip[0]]))
            inits.append(helper.make_tensor(f"{p}_high", TensorProto.FLOAT, [], [c.clip[1]]))
            nodes.append(helper.make_node("Clip", [filled, f"{p}_low", f"{p}_high"], [f"{p}_clipped"]))
            filled = f"{p}_clipped"
        unsq(filled, f"{p}_col")
        nums.append(f"{p}_col")
        if c.indicator:
            nodes.append(helper.make_node("Cast", [f"{p}_isnan"], [f"{p}_ind1"], to=TensorProto.FLOAT))
            unsq(f"{p}_ind1", f"{p}_ind")
            inds.append(f"{p}_ind")
    parts = nums + inds + [blocks[c.name] for c in schema.blocks] + cats
    inner = "traindesk_encoded"  # the encoded rows, renamed: a column may be called like the old input
    nodes.append(helper.make_node("Concat", parts, [inner], axis=1))
    kept = [i for i in graph.input if i.name != encoded_input]
    del graph.input[:]
    graph.input.extend(new_inputs + kept)
    old_nodes = list(graph.node)
    for node in old_nodes:
        for i, name in enumerate(node.input):
            if name == encoded_input:
                node.input[i] = inner
    del graph.node[:]
    graph.node.extend(nodes + old_nodes)
    graph.initializer.extend(inits)
    if not any(op.domain == ML_DOMAIN for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid(ML_DOMAIN, ML_OPSET))
    onnx.checker.check_model(model)
    onnx.save(model, path)
