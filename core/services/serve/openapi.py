"""What a served model says about itself: its OpenAPI 3.1 description and the /docs page, from its schema.

A table model's description lists its raw columns (kind, levels, a training row as the example) under
``x-traindesk`` too, which the window's try-it form is built from. Torch-free.
"""

from __future__ import annotations

import html
from typing import Any

import orjson

from core.services.serve.schema import ModelSchema, shape_text


def _request_choices(schema: ModelSchema) -> list[dict[str, Any]]:
    if schema.table is not None:
        return [
            {
                "type": "object",
                "required": ["rows"],
                "additionalProperties": False,
                "properties": {
                    "rows": {
                        "type": "array",
                        "minItems": 1,
                        "items": schema.table.row_schema(),
                        "description": "rows by the table's column names, in any order",
                    }
                },
            }
        ]
    number = {"type": "number"}
    nested: dict[str, Any] = number
    for size in reversed(schema.shape):
        nested = {"type": "array", "items": nested, "minItems": size, "maxItems": size}
    flat = {"type": "array", "items": number, "minItems": schema.row_values, "maxItems": schema.row_values}
    inputs = {
        "type": "array",
        "minItems": 1,
        "items": {"oneOf": [nested, flat]} if len(schema.shape) > 1 else flat,
        "description": f"samples, each {schema.sample_text()}",
    }
    choices: list[dict[str, Any]] = [
        {"type": "object", "properties": {"inputs": inputs}, "required": ["inputs"], "additionalProperties": False}
    ]
    if schema.features:
        row = {
            "type": "object",
            "properties": {f: number for f in schema.features},
            "required": list(schema.features),
            "additionalProperties": False,
        }
        choices.append(
            {
                "type": "object",
                "required": ["rows"],
                "additionalProperties": False,
                "properties": {
                    "rows": {
                        "type": "array",
                        "minItems": 1,
                        "items": row,
                        "description": "rows by column name, in any order",
                    }
                },
            }
        )
    if schema.image_shape is not None:
        c, h, w = schema.image_shape
        choices.append(
            {
                "type": "object",
                "required": ["images"],
                "additionalProperties": False,
                "properties": {
                    "images": {
                        "type": "array",
                        "minItems": 1,
                        "items": {"type": "string", "contentEncoding": "base64", "contentMediaType": "image/png"},
                        "description": f"base64 PNG or JPEG images of any size, resized to {w}×{h} pixels as in "
                        f"training, {'grey' if c == 1 else 'RGB'}",
                    }
                },
            }
        )
    return choices


def _prediction_schema(schema: ModelSchema) -> dict[str, Any]:
    if schema.table is not None:
        return schema.table.answer_schema(schema.classes)
    return {
        "type": "object",
        "properties": {
            "class": {"type": "string", "enum": list(schema.classes)},
            "probabilities": {"type": "object", "properties": {c: {"type": "number"} for c in schema.classes}},
        },
    }


def _summary(schema: ModelSchema) -> str:
    if schema.table is not None:
        t = schema.table
        what = f"predicts {t.schema.target}" + ("" if t.regression else f" ({', '.join(schema.classes)})")
        return f"{what} from the columns {', '.join(t.names)}"
    return f"classes: {', '.join(schema.classes)}; input shape {shape_text(schema.shape)}"


def openapi(schema: ModelSchema, title: str, version: str) -> dict[str, Any]:
    """An OpenAPI 3.1 description of this server for this model."""
    answer: dict[str, Any] = {
        "type": "object",
        "properties": {
            "predictions": {"type": "array", "items": _prediction_schema(schema)},
            "model_version": {"type": "string"},
        },
    }
    if schema.table is not None:
        counts = {"type": "object", "additionalProperties": {"type": "integer"}}
        answer["properties"]["unseen"] = {
            **counts,
            "description": "per column, values training never saw (present only when some were)",
        }
        answer["properties"]["missing"] = {
            **counts,
            "description": "per column, missing values filled as in training (present only when some were)",
        }
    error = {"type": "object", "properties": {"error": {"type": "string"}}}

    def err(text: str) -> dict[str, Any]:
        return {"description": text, "content": {"application/json": {"schema": error}}}

    plain = {"200": {"description": "OK"}}
    spec: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": _summary(schema)},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"PredictRequest": {"oneOf": _request_choices(schema)}, "PredictAnswer": answer, "Error": error},
        },
        "security": [{"bearer": []}],
        "paths": {
            "/predict": {
                "post": {
                    "summary": "predict the value of each row"
                    if schema.regression
                    else "predict the class of each row",
                    "parameters": [
                        {
                            "name": "X-Request-Timeout",
                            "in": "header",
                            "required": False,
                            "schema": {"type": "number"},
                            "description": "seconds to wait at most",
                        }
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/PredictRequest"},
                                "example": schema.example_body(),
                            }
                        },
                    },
                    "responses": {
                        "200": {
                            "description": "one prediction per row, in order",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PredictAnswer"}}},
                        },
                        "400": err("not JSON"),
                        "401": err("no or wrong bearer token"),
                        "413": err("body too large"),
                        "422": err("a field, row or value the model cannot take"),
                        "429": err("queue full: retry after Retry-After seconds"),
                        "500": err("the model process crashed on this input"),
                        "503": err("draining or not ready"),
                        "504": err("deadline passed"),
                    },
                }
            },
            "/health": {"get": {"summary": "the process is up", "security": [], "responses": plain}},
            "/ready": {
                "get": {
                    "summary": "every worker alive and the model checked since its last load",
                    "responses": {"200": {"description": "ready"}, "503": err("not ready")},
                }
            },
            "/metrics": {"get": {"summary": "Prometheus metrics", "responses": plain}},
            "/admin/reload": {
                "post": {
                    "summary": "load a new checkpoint of the same schema, one worker at a time",
                    "requestBody": {
                        "required": False,
                        "content": {
                            "application/json": {
                                "schema": {"type": "object", "properties": {"path": {"type": "string"}}}
                            }
                        },
                    },
                    "responses": {
                        "200": {"description": "reloaded"},
                        "409": err("another schema: refused, the old model serves"),
                        "422": err("not loadable"),
                    },
                }
            },
        },
    }
    if schema.table is not None:
        spec["x-traindesk"] = schema.table.description()
    return spec


def docs_html(schema: ModelSchema, title: str, version: str, url: str) -> str:
    """A self-contained page: what to send, what comes back, a curl line."""
    example = orjson.dumps(schema.example_body()).decode()
    short = (
        example
        if len(example) < 400 or schema.table is not None
        else orjson.dumps({"inputs": [[0.0] * min(schema.row_values, 4)]}).decode()
    )
    if schema.table is not None:
        sending = (
            f"<h3>rows</h3><p>by the table's column names, in any order; a column left out, null or "
            f'<code>""</code> is a missing value:</p><ul>{schema.table.docs_list()}</ul>'
        )
        answer = (
            '{"predictions": [{"value": ...}], "model_version": ...}'
            if schema.regression
            else '{"predictions": [{"class": ..., "probabilities": {...}}], "model_version": ...}'
        )
    else:
        columns = "".join(f"<li><code>{html.escape(f)}</code> number</li>" for f in schema.features[:200])
        sending = (
            f"<h3>inputs</h3><p>each sample {html.escape(schema.sample_text())}: "
            '<code>{"inputs": [[...], ...]}</code></p>'
            + ("<h3>rows</h3><p>by column name, in any order:</p><ul>" + columns + "</ul>" if schema.features else "")
        )
        if schema.image_shape is not None:
            c, h, w = schema.image_shape
            sending += (
                f"<h3>images</h3><p>base64 PNG or JPEG of any size, resized to {w}×{h} pixels as in training, "
                f"{'grey' if c == 1 else 'RGB'}: "
                '<code>{"images": ["iVBOR..."]}</code></p>'
            )
        answer = '{"predictions": [{"class": ..., "probabilities": {...}}], "model_version": ...}'
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}code,pre{{background:#eee;padding:2px}}</style>
</head><body><h1>{html.escape(title)}</h1><p>model version <code>{html.escape(version)}</code>;
{html.escape(_summary(schema))}.
The machine-readable description is <a href="/openapi.json">/openapi.json</a>.</p>
<h2>POST /predict</h2>{sending}
<p>answer: <code>{html.escape(answer)}</code></p>
<pre>curl -s {html.escape(url)}/predict -H 'Content-Type: application/json' -d '{html.escape(short)}'</pre>
<h2>Other endpoints</h2><ul><li>GET /health</li><li>GET /ready</li><li>GET /metrics</li>
<li>POST /admin/reload (bearer token)</li></ul></body></html>"""
