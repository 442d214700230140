"""A served table model's request rows, answers and description, from its fitted schema (no server needed)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from core.data.describe import describe_source
from core.schema import Schema, encode_rows
from core.services.serve.openapi import openapi
from core.services.serve.schema import BadRequest, ModelSchema
from tests import journey_tables as jt


@pytest.fixture(scope="module")
def census_schema(tmp_path_factory: pytest.TempPathFactory) -> Schema:
    header, rows = jt.census(400, seed=0)
    path = jt.write_csv(tmp_path_factory.mktemp("serve-tables") / "census.csv", header, rows)
    info = describe_source(f"csv:{path}", target="species")
    assert info.schema is not None
    return Schema.from_json(info.schema)


def model_schema(schema: Schema) -> ModelSchema:
    meta = {
        "input": {"shape": [schema.n_features], "features": schema.feature_names},
        "preprocessing": {"mean": [0.0]},
        "classes": list(schema.classes),
        "schema": schema.to_json(),
    }
    return ModelSchema.from_meta(meta)


def test_rows_are_encoded_as_predict_encodes_a_csv(census_schema: Schema) -> None:
    ms = model_schema(census_schema)
    rows = [
        {
            "sex": "male",
            "island": "Dream",
            "bill_length_mm": 40.1,
            "flipper_length_mm": "190",
            "adult": True,
            "body_mass_g": None,
            "note": [1, 2],
        },  # any order; an extra key of any kind is ignored
        {"island": "Atlantis", "bill_length_mm": ""},
    ]  # an unseen level; "" and left-out keys are missing
    x, notes = ms.parse(orjson.dumps({"rows": rows}))
    assert np.array_equal(x, encode_rows(census_schema, [{k: v for k, v in r.items() if k != "note"} for r in rows]).x)
    assert notes is not None and notes["unseen"] == {"island": 1}
    assert notes["missing"]["body_mass_g"] == 2 and notes["missing"]["sex"] == 1


@pytest.mark.parametrize(
    "body, message",
    [
        (
            {"rows": [{"island": "Dream"}, {"island": "Dream", "bill_length_mm": "long"}]},
            "rows[1]: column 'bill_length_mm': 'long' (text) is not a number",
        ),
        (
            {"rows": [{"island": "Dream", "bill_length_mm": True}]},
            "rows[0]: column 'bill_length_mm': true (a boolean) is not a number",
        ),
        ({"rows": [{"island": ["Dream"]}]}, "rows[0]: column 'island': a list is not a value"),
        ({"rows": [{"adult": "perhaps"}]}, "rows[0]: column 'adult': 'perhaps' (text) is not true/false"),
        ({"rows": ["Dream"]}, "rows[0]: is 'Dream' (text); each row must be an object of column: value"),
        ({"rows": [{"bill_length_mm_missing": 1, "species": "Adelie"}]}, "rows[0]: has none of the model's columns"),
        ({"inputs": [[0.0] * 10]}, "'inputs': this model was trained on a table: send"),
    ],
)
def test_a_bad_row_is_one_line_naming_its_row_and_raw_column(census_schema: Schema, body: dict, message: str) -> None:
    with pytest.raises(BadRequest) as err:
        model_schema(census_schema).parse(orjson.dumps(body))
    assert err.value.status == 422 and err.value.message.startswith(message), err.value.message
    assert "_missing" not in err.value.message.replace("bill_length_mm_missing", "")  # no encoded feature named


def test_answers_are_classes_or_a_value_and_the_description_lists_raw_columns(census_schema: Schema) -> None:
    ms = model_schema(census_schema)
    probs = np.array([[0.7, 0.2, 0.1]], dtype=np.float32)
    answer = orjson.loads(ms.answer(probs, "v1", {"unseen": {"island": 1}}))
    assert answer["predictions"][0]["class"] == census_schema.classes[0] and answer["unseen"] == {"island": 1}
    assert ms.answers_right(probs) and not ms.answers_right(np.array([[0.5, 0.1, 0.1]]))
    spec = openapi(ms, "t", "v1")
    described = spec["x-traindesk"]
    assert [c["name"] for c in described["columns"]] == [c.name for c in census_schema.used]
    kinds = {c["name"]: c["kind"] for c in described["columns"]}
    assert kinds["island"] == "category" and kinds["bill_length_mm"] == "number" and kinds["adult"] == "bool"
    assert {c["name"]: c.get("levels") for c in described["columns"]}["island"] == ["Biscoe", "Dream", "Torgersen"]
    [choice] = spec["components"]["schemas"]["PredictRequest"]["oneOf"]
    assert list(choice["properties"]) == ["rows"]  # no encoded inputs offered
    example = described["example"]["rows"][0]
    assert all(example[c.name] is not None for c in census_schema.used)  # a complete training row
    x, _ = ms.parse(orjson.dumps(described["example"]))
    assert np.array_equal(x, ms.canary())

    regression = Schema.from_json(
        {
            **census_schema.to_json(),
            "task": "regression",
            "target": {"name": "mass", "kind": "number", "mean": 0.0, "std": 1.0},
        }
    )
    meta = {
        "input": {"shape": [regression.n_features], "features": regression.feature_names},
        "preprocessing": {"mean": [0.0]},
        "classes": [],
        "schema": regression.to_json(),
    }
    rs = ModelSchema.from_meta(meta)
    assert orjson.loads(rs.answer(np.array([[3120.5]], dtype=np.float32), "v1"))["predictions"] == [{"value": 3120.5}]
    assert rs.answers_right(np.array([[3120.5]], dtype=np.float32))
    assert (
        openapi(rs, "t", "v1")["components"]["schemas"]["PredictAnswer"]["properties"]["predictions"]["items"][
            "properties"
        ]["value"]["type"]
        == "number"
    )
