"""A table's text columns as codes (core.schema.coded) and the CSV read in pieces (core.readers.csv_typed):
the same kinds, schema and encoded rows as the cell-by-cell path, whatever the pieces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.readers import ReadStopped, blocks, stop_reading_when
from core.readers.csv_typed import read_typed_csv
from core.schema import RawTable, class_codes, encode_table, fit_schema, infer_kinds, read_table
from core.schema.coded import Coded
from tests.journey_tables import census, gems, skewed, write_csv


def _cells(table: RawTable) -> RawTable:
    """The same table with every coded column as the object array it stands for."""
    columns = {k: (np.asarray(v) if isinstance(v, Coded) else v) for k, v in table.columns.items()}
    return RawTable(table.where, table.path, columns, table.n_rows, table.kind)


@pytest.mark.parametrize("make, target", [(census, "species"), (skewed, "churned"), (gems, "price")])
def test_coded_columns_give_what_cells_give(tmp_path: Path, make, target: str) -> None:
    header, rows = make(3000, seed=4)
    coded = read_table(write_csv(tmp_path / "t.csv", header, rows), "csv", "data")
    assert any(isinstance(v, Coded) for v in coded.columns.values())
    cells = _cells(coded)
    kinds = infer_kinds(coded, target)
    assert kinds == infer_kinds(cells, target)
    task = "regression" if target == "price" else "classification"
    classes = [] if task == "regression" else class_codes(coded.columns[target])[0]
    if task == "classification":
        names, y = class_codes(coded.columns[target])
        names2, y2 = class_codes(cells.columns[target])
        assert names == names2 and np.array_equal(y, y2)
    train = np.arange(0, 3000, 3)
    schemas = [fit_schema(t, target, kinds, task, classes, None, train) for t in (coded, cells)]
    assert schemas[0].to_json() == schemas[1].to_json()
    a, b = (encode_table(schemas[0], t) for t in (coded, cells))
    assert np.array_equal(a.x, b.x) and a.unseen == b.unseen and a.missing == b.missing
    sub = coded.take(np.arange(10, 50))  # a subset of rows stays coded, cell for cell
    for name, values in sub.columns.items():
        if isinstance(values, Coded):
            assert isinstance(values[3], (str, type(None)))
            assert values.tolist() == cells.columns[name][10:50].tolist(), name


def test_a_csv_is_read_in_pieces_with_the_first_pieces_types(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.csv as pacsv

    monkeypatch.setattr(blocks, "READ_BLOCK_BYTES", 1024)  # pieces of 4 KB: dozens of them
    n = 3000
    lines = [f"{i},{i % 7},{'a' if i % 3 else 'b'},{'' if i % 11 == 0 else i * 0.5}" for i in range(n)]
    lines[2500] = "2500,0.25,c,1"  # a fraction far after the first piece, in a column of integers until then
    path = tmp_path / "p.csv"
    path.write_text("id,k,word,half\n" + "\n".join(lines) + "\n")
    table = read_typed_csv(path, ["", "NA"])
    whole = pacsv.read_csv(path)
    assert table.num_rows == n
    assert table.column("k").to_pylist() == [float(v) for v in whole.column("k").to_pylist()]
    assert table.column("word").to_pylist() == whole.column("word").to_pylist()
    assert table.column("half").null_count == len(range(0, n, 11))
    asked: list[int] = []
    with stop_reading_when(lambda: asked.append(1) is None and len(asked) > 3), pytest.raises(ReadStopped):
        read_typed_csv(path, [""])
    assert len(asked) == 4  # asked once per piece until it said stop


def test_text_after_the_first_piece_is_read_as_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocks, "READ_BLOCK_BYTES", 1024)
    lines = [f"{i % 5},{i % 2}" for i in range(3000)]
    lines[2900] = "lots,1"
    path = tmp_path / "t.csv"
    path.write_text("n,label\n" + "\n".join(lines) + "\n")
    assert read_typed_csv(path, [""]) is None  # the pieces' types do not hold: the caller reads it as text
    table = read_table(path, "csv", "data")
    column = table.columns["n"]
    assert isinstance(column, Coded) and column[2900] == "lots" and column[0] == "0"
    assert infer_kinds(table, "label")["n"].kind == "number"  # one stray word in numbers: an error at fit


@pytest.mark.parametrize("n", [1, 2, 5, 19, 20, 21, 1000, 1001, 40_000])
def test_median_and_fences_are_numpys(n: int) -> None:
    from core.schema.fit import FENCE_IQRS, _fill_and_fences

    rng = np.random.default_rng(n)
    columns = [
        rng.standard_normal(n),
        rng.integers(0, 3, n),
        np.ones(n),
        np.where(rng.random(n) < 0.9, 0, rng.exponential(5, n)),
        np.append(rng.standard_normal(n - 1), 1e4),
    ]
    for x in (c.astype(np.float32) for c in columns):
        median, fences = _fill_and_fences(x.copy(), True)
        assert median == float(np.median(x))
        if n < 20:
            assert fences is None
            continue
        q01, q25, q75, q99 = np.quantile(x, [0.01, 0.25, 0.75, 0.99])
        spread = q75 - q25 if q75 > q25 else (q99 - q01) / 3.45
        low, high = q25 - FENCE_IQRS * spread, q75 + FENCE_IQRS * spread
        if not spread > 0 or (x.min() >= low and x.max() <= high):
            assert fences is None
        else:
            assert fences == pytest.approx((max(x.min(), low), min(x.max(), high)), rel=1e-6)
