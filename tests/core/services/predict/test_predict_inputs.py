"""The input registry (core.readers.inputs): every kind predict reads, the same rows in a CSV, a Parquet
or a JSON lines file predict the same, and a file of no kind is one error naming the kinds."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import DataError
from core.readers import INPUT_KINDS, estimated_rows, find_input_kind, input_kind
from core.services.predict import predict, read_input
from tests.core.services.test_export import run_cli
from tests.trained_run import make_run, table_run

N_FEATURES = 6


@pytest.fixture(scope="module")
def npz_model(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny model trained on an NPZ (features f0..f5, classes 0-2), its export, and rows to predict."""
    from core.services.export import export_run

    root = tmp_path_factory.mktemp("npz_model")
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, 300)
    x = (rng.normal(0, 1, (300, N_FEATURES)) + y[:, None] * 1.5).astype(np.float32)
    np.savez(root / "train.npz", x=x, y=y)
    run_dir = make_run(root / "runs", source=f"npz:{root / 'train.npz'}", steps=30)
    model = export_run(run_dir, "safetensors", root / "m.safetensors").path
    return {"root": root, "run": run_dir, "model": model}


def _rows(seed: int = 5, n: int = 40) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n).tolist()
    x = (rng.normal(0, 1, (n, N_FEATURES)) + np.asarray(labels)[:, None] * 1.5).astype(np.float32)
    return x, labels


def _write(root: Path, names: list[str], x: np.ndarray, labels: list[int]) -> dict[str, Path]:
    """The same rows (an id, the features under ``names``, the label) as .csv, .parquet and .jsonl."""
    ids = [f"r{i}" for i in range(len(x))]
    paths = {k: root / f"rows.{k}" for k in ("csv", "parquet", "jsonl")}
    with paths["csv"].open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", *names, "label"])
        for i, row in enumerate(x):
            w.writerow([ids[i], *(repr(float(v)) for v in row), labels[i]])
    columns = {"id": ids, **{n: x[:, j].astype(np.float64) for j, n in enumerate(names)}, "label": labels}
    pq.write_table(pa.table(columns), paths["parquet"])
    with paths["jsonl"].open("w") as fh:
        for i, row in enumerate(x):
            fh.write(json.dumps({"id": ids[i], **{n: float(v) for n, v in zip(names, row)}, "label": labels[i]}) + "\n")
    return paths


def test_parquet_and_json_lines_predict_as_the_same_rows_in_a_csv(
    npz_model: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x, labels = _rows()
    names = [f"f{j}" for j in range(N_FEATURES)]
    order = [names[j] for j in (3, 0, 5, 1, 4, 2)]  # out of training order: matched by name
    paths = _write(tmp_path, order, x[:, [3, 0, 5, 1, 4, 2]], labels)
    model = npz_model["model"]
    outputs = {}
    for kind, path in paths.items():
        out = tmp_path / f"pred-{kind}.csv"
        code, _out, err = run_cli(capsys, "predict", str(model), str(path), "--out", str(out), "--workers", "1")
        assert code == 0, err
        outputs[kind] = out.read_text()
    assert outputs["parquet"] == outputs["csv"] and outputs["jsonl"] == outputs["csv"]
    assert outputs["csv"].splitlines()[1].startswith("r0,")
    res = predict(model, paths["parquet"])
    assert res.labels == [str(v) for v in labels]  # the label column makes a test set, as in a CSV
    # the same rows from the NPZ the model was trained on the kind of
    np.savez(tmp_path / "rows.npz", x=x, y=np.asarray(labels))
    np.testing.assert_allclose(predict(model, tmp_path / "rows.npz").probs, res.probs, rtol=1e-6, atol=1e-7)
    run = predict(npz_model["run"], paths["parquet"])  # a run directory reads them the same
    np.testing.assert_allclose(run.probs, res.probs, rtol=1e-5, atol=1e-6)


def test_parquet_columns_by_position_and_their_errors(npz_model: dict[str, Path], tmp_path: Path) -> None:
    from core.services.predict import ColumnNamesDiffer

    x, labels = _rows(7, 12)
    renamed = _write(tmp_path, [f"c{j}" for j in range(N_FEATURES)], x, labels)["parquet"]
    (tmp_path / "named").mkdir()
    named = _write(tmp_path / "named", [f"f{j}" for j in range(N_FEATURES)], x, labels)["csv"]
    by_name = predict(npz_model["model"], named)
    with pytest.raises(ColumnNamesDiffer):
        predict(npz_model["model"], renamed)
    by_position = predict(npz_model["model"], renamed, by_position=True)
    np.testing.assert_allclose(by_position.probs, by_name.probs, rtol=1e-6)
    text = pa.table({f"f{j}": ["1.5", "abc", "2"] if j == 2 else [1.0, 2.0, 3.0] for j in range(N_FEATURES)})
    pq.write_table(text, tmp_path / "text.parquet")
    with pytest.raises(DataError, match=r"column 'f2' is not numeric \(row 2: 'abc'\)"):
        predict(npz_model["model"], tmp_path / "text.parquet")
    holes = pa.table({f"f{j}": [1.0, None, 3.0] if j == 4 else [1.0, 2.0, 3.0] for j in range(N_FEATURES)})
    pq.write_table(holes, tmp_path / "holes.parquet")
    with pytest.raises(DataError, match=r"column 'f4' has no value \(row 2"):
        predict(npz_model["model"], tmp_path / "holes.parquet")


def test_an_unknown_suffix_is_one_error_naming_the_kinds(
    npz_model: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "rows.xlsx").write_text("not a table")
    code, out, err = run_cli(capsys, "predict", str(npz_model["model"]), str(tmp_path / "rows.xlsx"))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    for kind in INPUT_KINDS:
        assert kind.label in err and all(s in err for s in kind.suffixes), (kind, err)
    with pytest.raises(DataError, match="not an input; give a CSV file"):
        input_kind(tmp_path / "rows.xlsx")
    assert find_input_kind(tmp_path / "rows.xlsx") is None and estimated_rows(tmp_path / "rows.xlsx", 10) is None
    with pytest.raises(DataError, match="not an input"):
        read_input(tmp_path / "rows.xlsx", {"input": {"shape": [N_FEATURES]}})


def test_each_kind_estimates_its_rows_without_reading_them(tmp_path: Path) -> None:
    x, labels = _rows(9, 500)
    paths = _write(tmp_path, [f"f{j}" for j in range(N_FEATURES)], x, labels)
    assert estimated_rows(paths["parquet"], 0) == 500  # the footer says
    for kind in ("csv", "jsonl"):  # the size over the first row's
        assert 400 <= (estimated_rows(paths[kind], 0) or 0) <= 600, kind
    assert find_input_kind(tmp_path / "x.NDJSON") is find_input_kind(paths["jsonl"])
    assert find_input_kind(tmp_path).name == "images"


def test_a_table_model_reads_parquet_and_json_lines_like_its_csv(tmp_path: Path) -> None:
    """A model trained on a table with a schema: the same raw rows in any column kind predict the same."""
    islands = ("Biscoe", "Dream", "Torgersen")
    rows = []
    for i in range(60):
        rows.append(
            {
                "row_id": 1000 + i,
                "size": None if i % 7 == 0 else 1.5 + (i % 9) * 0.25,
                "island": islands[i % 3],
                "label": ("adelie", "gentoo")[(i % 3 == 0) ^ (i % 2)],
            }
        )
    lines = ["row_id,size,island,label"] + [
        f"{r['row_id']},{'' if r['size'] is None else repr(r['size'])},{r['island']},{r['label']}" for r in rows
    ]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    run = table_run(tmp_path / "train.csv", tmp_path / "runs")
    new = [dict(r, island="Unseen") if i == 3 else r for i, r in enumerate(rows[:20])]
    (tmp_path / "new.csv").write_text(
        "\n".join(
            lines[:1]
            + [f"{r['row_id']},{'' if r['size'] is None else repr(r['size'])},{r['island']},{r['label']}" for r in new]
        )
        + "\n"
    )
    pq.write_table(pa.Table.from_pylist(new), tmp_path / "new.parquet")
    (tmp_path / "new.jsonl").write_text("".join(json.dumps(r) + "\n" for r in new))
    by_csv = predict(run, tmp_path / "new.csv")
    for kind in ("parquet", "jsonl"):
        res = predict(run, tmp_path / f"new.{kind}")
        assert res.csv_text() == by_csv.csv_text(), kind
        assert res.labels == by_csv.labels and res.notes == by_csv.notes and res.notes, kind
