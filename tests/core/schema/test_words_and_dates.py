"""Free text and dates in a table: inferred as such, encoded the same by every door, refused in one line when bad."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import DataError
from core.schema import encode_columns, encode_rows, fit_schema, infer_kind, infer_kinds, read_table
from core.schema.coded import Coded
from core.schema.dates import DATE_PARTS, date_parts, parse_dates
from core.schema.text import text_slots
from tests import journey_tables as jt


def texts(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.asarray([" ".join(rng.choice(jt.FILLER, 5)) + f" {i}" for i in range(n)], dtype=object)


def test_many_distinct_sentences_are_text_and_single_words_stay_ignored() -> None:
    assert infer_kind("message", texts(100)).kind == "text"
    codes = np.asarray([f"SKU{i:05d}" for i in range(100)], dtype=object)
    assert infer_kind("sku", codes).kind == "ignore"  # one token each: an id, not words


@pytest.mark.parametrize(
    ("cells", "order"),
    [
        (["2024-03-05", "2024-03-06 14:30", "2024-03-07T08:00:00+02:00"], "iso"),
        (["05/03/2024", "25/12/2023", "01/02/2024"], "dmy"),
        (["03/05/2024", "12/25/2023", "02/01/2024"], "mdy"),
    ],
)
def test_dates_are_recognised_with_their_order(cells: list[str], order: str) -> None:
    column = np.asarray(cells * 10, dtype=object)
    inferred = infer_kind("when", column)
    assert (inferred.kind, inferred.order) == ("datetime", order)


def test_ambiguous_and_mixed_dates_are_one_line_errors_and_an_order_can_be_set() -> None:
    ambiguous = np.asarray(["05/03/2024", "01/02/2024", "03/04/2024"] * 10, dtype=object)
    with pytest.raises(DataError, match=r"could be day-first or month-first .*datetime:dmy") as err:
        infer_kind("when", ambiguous, where="data")
    assert "\n" not in str(err.value)
    assert infer_kind("when", ambiguous, "datetime:mdy").order == "mdy"
    mixed = np.asarray(["2024-03-05", "25/12/2023"] * 15, dtype=object)
    with pytest.raises(DataError, match=r"'when' mixes forms: '2024-03-05' \(year first\) and '25/12/2023'"):
        infer_kind("when", mixed)
    both = np.asarray(["25/12/2023", "12/25/2023"] * 15, dtype=object)
    with pytest.raises(DataError, match="mixes day-first '25/12/2023' and month-first '12/25/2023'"):
        infer_kind("when", both)


def test_a_cell_that_is_not_a_date_is_missing_and_counted() -> None:
    column = np.asarray([f"2024-03-{d:02d} 10:00" for d in range(1, 29)] + ["soon", "2024-02-30", None], dtype=object)
    inferred = infer_kind("when", column)
    assert inferred.kind == "datetime" and "2 cell(s) not dates" in inferred.reason
    seconds, bad = parse_dates(column, "iso")
    assert bad == 2 and np.isnan(seconds[-3:]).all()


def test_date_parts_are_the_calendar() -> None:
    seconds, _ = parse_dates(np.asarray(["2024-03-04T18:45:00", "2024-12-31 23:59"], dtype=object), "iso")
    parts = dict(zip(DATE_PARTS, date_parts(seconds, seconds[0]).T))
    assert parts["year"].tolist() == [2024, 2024]
    weekday = np.arctan2(parts["weekday_sin"], parts["weekday_cos"]) / (2 * np.pi) * 7 % 7
    assert np.round(weekday).tolist() == [0, 1]  # a Monday, a Tuesday
    hour = np.arctan2(parts["hour_sin"], parts["hour_cos"]) / (2 * np.pi) * 24 % 24
    assert np.round(hour).tolist() == [18, 23]
    assert parts["days"][0] == 0 and parts["days"][1] == pytest.approx(302.22, abs=0.01)


def test_text_slots_are_bounded_deterministic_and_alike_for_coded_cells() -> None:
    cells = ["Refund my broken order please", None, "great service, thanks!", "Refund my broken order please"]
    block = text_slots(np.asarray(cells, dtype=object), 6, 10)
    assert block.shape == (4, 32)
    assert not block[1].any()  # a missing text: no n-grams
    np.testing.assert_array_equal(block[0], block[3])
    weights = block[:, 16:]
    assert np.allclose((weights[0, :6] ** 2).sum(), 1) and np.allclose((weights[0, 6:] ** 2).sum(), 1)
    coded = Coded(np.array([0, -1, 1, 0]), [cells[0], cells[2]])
    np.testing.assert_array_equal(text_slots(coded, 6, 10), block)


def ticket_table(tmp_path: Path, n: int = 200) -> tuple[object, list[str], list[list[str]]]:
    header, rows = jt.tickets(n, seed=3)
    path = jt.write_csv(tmp_path / "tickets.csv", header, rows)
    return read_table(path, "csv", "data"), header, rows


def test_a_request_row_encodes_as_the_table_row_does(tmp_path: Path) -> None:
    table, header, rows = ticket_table(tmp_path)
    kinds = infer_kinds(table, "urgent")  # type: ignore[arg-type]
    assert {k: v.kind for k, v in kinds.items()} == {"amount": "number", "message": "text", "sent": "datetime"}
    schema = fit_schema(table, "urgent", kinds, "classification", ["no", "yes"], None, np.arange(150))  # type: ignore[arg-type]
    from_table = encode_columns(schema, table.columns).x  # type: ignore[attr-defined]
    requests = [
        {h: (None if v == "" else float(v) if h == "amount" else v) for h, v in zip(header, r) if h != "urgent"}
        for r in rows
    ]
    np.testing.assert_array_equal(encode_rows(schema, requests).x, from_table)
    assert schema.n_features == from_table.shape[1] and len(schema.stats()[0]) == schema.n_features
    again = type(schema).from_json(schema.to_json())
    np.testing.assert_array_equal(encode_columns(again, table.columns).x, from_table)  # type: ignore[attr-defined]


def test_bad_words_and_dates_are_one_line_errors(tmp_path: Path) -> None:
    numbers = np.asarray([str(i) for i in range(30)], dtype=object)
    with pytest.raises(DataError, match=r"'n' is set to \"text\" in data.columns but holds only numbers"):
        infer_kind("n", numbers, "text")
    with pytest.raises(DataError, match="set to 'datetime' in data.columns but no cell is such a date"):
        infer_kind("n", np.asarray(["soon", "later"] * 15, dtype=object), "datetime")
    table, _, _ = ticket_table(tmp_path, 40)
    table.columns["message"] = np.asarray([None] * 40, dtype=object)  # type: ignore[attr-defined]
    kinds = infer_kinds(table, "urgent", {"message": "text"})  # type: ignore[arg-type]
    with pytest.raises(DataError, match="column 'message' is all missing"):
        fit_schema(table, "urgent", kinds, "classification", ["no", "yes"], None, np.arange(30))  # type: ignore[arg-type]
