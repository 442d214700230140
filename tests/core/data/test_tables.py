"""Tables as people have them: text categories, booleans, missing cells, numeric targets, skewed classes.

Every table is generated here; the assertions are on numbers (fill values,
levels, R², recall) and on the preprocessing travelling with the model into
predict and the raw-column ONNX graph.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from core import cli
from core.config import Config, apply_overrides
from core.data import load_data
from core.errors import DataError
from core.runfiles.writing import read_metrics
from core.schema import Schema, embedding_size, encode_columns, encode_rows, read_table
from core.session import Session
from core.training.checkpoint import load_checkpoint, model_from_checkpoint

COLORS = ("red", "green", "blue")


def _write(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def mixed_rows(n: int, seed: int, missing: float = 0.1) -> tuple[list[str], list[list[Any]]]:
    """customer (an id), age (number), color (category), member (bool), label (text class); ~10% empty cells."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        age = float(rng.normal(40, 12))
        color = COLORS[int(rng.integers(3))]
        member = bool(rng.random() < 0.5)
        score = (
            (age - 40) / 12 + (1.5 if color == "red" else -0.5 if color == "blue" else 0.0) + (0.8 if member else -0.8)
        )
        label = "buy" if score + rng.normal(0, 0.3) > 0 else "skip"
        cells: list[Any] = [f"c{i:05d}", f"{age:.2f}", color, "yes" if member else "no", label]
        for j in (1, 2, 3):
            if rng.random() < missing:
                cells[j] = ""
        rows.append(cells)
    return ["customer", "age", "color", "member", "label"], rows


def cfg_for(*overrides: str) -> Config:
    return apply_overrides(Config(), ["parallel.strategy=single", *overrides])


def run_to_end(cfg: Config, runs_dir: Path, timeout: float = 180) -> Session:
    session = Session(cfg, runs_dir=runs_dir)
    session.start()
    if session.wait(timeout) is None:
        session.stop(5)
        pytest.fail("run did not finish in time")
    assert session.error is None, session.error
    return session


@pytest.fixture(scope="module")
def mixed_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    header, rows = mixed_rows(400, seed=0)
    return _write(tmp_path_factory.mktemp("tables") / "people.csv", header, rows)


@pytest.fixture(scope="module")
def mixed_run(mixed_csv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = cfg_for(
        f'data.source="csv:{mixed_csv}"', "train.epochs=8", "optim.name=adam", "optim.lr=0.01", "model.hidden=[32]"
    )
    session = run_to_end(cfg, tmp_path_factory.mktemp("runs"))
    assert session.run_dir is not None
    return session.run_dir


# ----------------------------------------------------------------------------- the schema


def test_kinds_are_inferred_and_fitted_on_the_training_split(mixed_csv: Path) -> None:
    data = load_data(load_cfg(mixed_csv).data, seed=0, share=False)
    schema = Schema.from_json(data.info.schema)
    kinds = {c.name: c.kind for c in schema.columns}
    assert kinds == {"customer": "ignore", "age": "number", "color": "category", "member": "bool"}
    assert "distinct value in every row" in next(c.reason for c in schema.columns if c.name == "customer")
    # the fill value is the training rows' median, not the whole table's
    table = read_table(mixed_csv, "csv", "test")
    train_rows = _train_rows(table, data)
    ages = np.array([np.nan if v is None else float(v) for v in table.columns["age"][train_rows]])
    age = next(c for c in schema.columns if c.name == "age")
    assert age.fill == pytest.approx(float(np.nanmedian(ages)))
    assert age.indicator and age.missing == int(np.isnan(ages).sum()) > 0
    color = next(c for c in schema.columns if c.name == "color")
    assert color.levels == sorted(COLORS)
    assert schema.cardinalities == [3 + 2]  # plus the missing and unseen levels
    assert schema.feature_names == ["age", "member", "age_missing", "member_missing", "color"]
    assert data.info.categories == (5,)
    assert Schema.from_json(json.loads(json.dumps(schema.to_json()))).to_json() == schema.to_json()
    assert data.info.class_counts == tuple(int((data.train.y == k).sum()) for k in range(2))


def load_cfg(path: Path, *extra: str) -> Config:
    return apply_overrides(Config(), [f'data.source="csv:{path}"', *extra])


def _train_rows(table: Any, data: Any) -> np.ndarray:
    """The table rows of the training split: the seeded stratified split load_data makes."""
    from core.data import stratified_split

    y = np.array([data.info.class_names.index(v) for v in table.columns["label"]])
    train_idx, _ = stratified_split(y, 0.2, 0)
    assert len(train_idx) == data.info.n_train
    return train_idx


def test_a_table_is_described_by_its_columns_before_its_target_is_known(mixed_csv: Path) -> None:
    from core.data import describe_source

    info = describe_source(f"csv:{mixed_csv}", target="outcome")  # not one of its columns
    assert (
        info.needs_target and info.task == "" and info.table_columns == ("customer", "age", "color", "member", "label")
    )
    columns = {c["name"]: c for c in info.schema["columns"]}
    assert list(columns) == list(info.table_columns)  # every column, the future target's included
    assert columns["color"]["kind"] == "category" and columns["color"]["levels"] == sorted(COLORS)
    assert columns["customer"]["kind"] == "ignore" and "id" in columns["customer"]["reason"]
    assert columns["member"]["kind"] == "bool" and columns["age"]["missing"] > 0
    assert info.summary == "400 rows, 5 columns; choose the target column"
    assert "target column 'outcome' not found" in info.notes[0][1]
    full = describe_source(f"csv:{mixed_csv}", target="label")  # then the task, and the schema fitted
    assert not full.needs_target and full.task == "classification" and full.table_columns == info.table_columns
    assert [c["name"] for c in full.schema["columns"]] == ["customer", "age", "color", "member"]
    with pytest.raises(DataError, match="data.columns names 'nope'"):
        describe_source(f"csv:{mixed_csv}", target="outcome", columns={"nope": "category"})


@pytest.mark.parametrize(
    "names, kinds, proposed",
    [
        (("carat", "cut", "price", "x", "y", "z"), {}, "price"),  # y beside x and z is a coordinate
        (("x1", "x2", "y"), {}, "y"),
        (("bill_length_mm", "island", "Species", "sex"), {}, "Species"),  # an obvious name, whatever its case
        (("age", "city", "income", "notes"), {}, "income"),
        (("age", "city", "kind"), {}, "kind"),  # else the last column
        (("a", "b", "row_id"), {"row_id": "ignore"}, "b"),  # that is not ignored
    ],
)
def test_the_proposed_target_is_an_obvious_name_else_the_last_usable_column(
    names: tuple[str, ...], kinds: dict[str, str], proposed: str
) -> None:
    from core.data import propose_target

    assert propose_target([{"name": n, "kind": kinds.get(n, "number")} for n in names]) == proposed
    assert propose_target([]) == ""


def test_overrides_and_embedding_sizes(tmp_path: Path) -> None:
    rows = [[i % 4, i * 0.5, "xy"[i % 2]] for i in range(40)]
    path = _write(tmp_path / "t.csv", ["zone", "v", "label"], rows)
    data = load_data(load_cfg(path, 'data.columns={zone = "category"}').data, share=False)
    schema = Schema.from_json(data.info.schema)
    assert {c.name: c.kind for c in schema.columns} == {"zone": "category", "v": "number"}
    assert schema.categorical[0].levels == ["0", "1", "2", "3"]
    assert embedding_size(6) == round(1.6 * 6**0.56) and embedding_size(10**7) == 600


def test_encoding_takes_any_order_counts_unseen_and_names_bad_cells(mixed_csv: Path) -> None:
    data = load_data(load_cfg(mixed_csv).data, seed=0, share=False)
    schema = Schema.from_json(data.info.schema)
    cols = {
        "extra": ["a", "b", "c"],
        "member": ["no", "NA", "YES"],
        "color": ["purple", "red", ""],
        "age": [30.0, float("nan"), 50.0],
    }
    enc = encode_columns(schema, cols)
    age = next(c for c in schema.columns if c.name == "age")
    assert enc.unseen == {"color": 1} and enc.missing == {"member": 1, "age": 1, "color": 1}
    assert enc.x[:, 0].tolist() == pytest.approx([30.0, age.fill, 50.0])
    assert enc.x[:, 1].tolist() == [0.0, next(c for c in schema.columns if c.name == "member").fill, 1.0]
    assert enc.x[:, 2].tolist() == [0.0, 1.0, 0.0]  # age_missing
    assert enc.x[:, 4].tolist() == [1.0, 2.0 + sorted(COLORS).index("red"), 0.0]  # unseen, red, missing
    same = encode_rows(schema, [{"age": 30.0, "color": "purple", "member": "no"}])
    assert same.x[0].tolist() == enc.x[0].tolist()
    with pytest.raises(DataError, match="lacks column 'color'"):
        encode_columns(schema, {"age": [1.0], "member": ["yes"]})
    with pytest.raises(DataError, match=r"column 'age' is not numeric \(row 2: 'old'\)"):
        encode_columns(
            schema, {"age": np.array(["3", "old"], dtype=object), "member": ["yes", "no"], "color": ["red", "red"]}
        )


def test_missing_targets_are_dropped_and_counted(tmp_path: Path) -> None:
    rows = [[i, "xy"[i % 2] if i % 10 else ""] for i in range(50)]
    path = _write(tmp_path / "t.csv", ["v", "label"], rows)
    data = load_data(load_cfg(path).data, share=False)
    assert data.info.dropped_rows == 5 and data.info.n_samples == 45
    assert any("5 row(s)" in m and "left out" in m for _, m in data.info.notes)


def test_auto_task_picks_regression_for_a_fractional_target(tmp_path: Path) -> None:
    rows = [[i, i * 1.5 + 0.25] for i in range(30)]
    path = _write(tmp_path / "t.csv", ["v", "price"], rows)
    data = load_data(load_cfg(path, "data.target=price").data, share=False)
    assert data.info.task == "regression" and data.info.num_classes == 1
    assert any("task: regression" in m for _, m in data.info.notes)
    ints = _write(tmp_path / "i.csv", ["v", "label"], [[i, i % 3] for i in range(30)])
    assert load_data(load_cfg(ints).data, share=False).info.task == "classification"


def test_parquet_source_reads_typed_columns(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 60
    table = pa.table(
        {
            "size": [float(i) if i % 7 else None for i in range(n)],
            "kind": ["a" if i % 3 else None for i in range(n)],
            "flag": [bool(i % 2) for i in range(n)],
            "label": ["xy"[i % 2] for i in range(n)],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    data = load_data(apply_overrides(Config(), [f'data.source="parquet:{tmp_path / "t.parquet"}"']).data, share=False)
    kinds = {c["name"]: c["kind"] for c in data.info.schema["columns"]}
    assert kinds == {"size": "number", "kind": "category", "flag": "bool"}


# ----------------------------------------------------------------------------- training, predict, exports


def _trained_outputs(run_dir: Path, columns: dict[str, Any]) -> np.ndarray:
    """The trained model (checkpoint) on raw columns, encoded with its schema: probabilities."""
    ckpt = load_checkpoint(run_dir / "checkpoints" / "best.pt")
    model = model_from_checkpoint(ckpt)
    info = ckpt["info"]
    x = torch.from_numpy(encode_columns(info["schema"], columns).x)
    mean, std = torch.tensor(info["mean"]), torch.tensor(info["std"])
    with torch.no_grad():
        return torch.softmax(model((x - mean) / std), dim=1).numpy()


def test_mixed_table_trains_and_predicts_raw_rows_like_the_trained_model(
    mixed_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = json.loads((mixed_run / "summary.json").read_text())
    final = summary["final"]
    assert final["val_accuracy"] > 0.8
    assert 0 < final["val_balanced_accuracy"] <= 1 and 0 < final["val_macro_f1"] <= 1
    header, rows = mixed_rows(12, seed=5, missing=0.25)
    rows[0][2] = "purple"  # an unseen category
    order = [4, 3, 0, 2, 1]  # shuffled columns, the target included (a labelled test set)
    path = _write(
        tmp_path / "new.csv", [header[i] for i in order] + ["note"], [[r[i] for i in order] + ["x"] for r in rows]
    )
    out = tmp_path / "pred.csv"
    assert cli.main(["predict", str(mixed_run), str(path), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "1 category value(s) not seen in training" in err and "color: 1" in err
    with out.open() as fh:
        got = np.array([[float(v) for v in r[2:]] for r in list(csv.reader(fh))[1:]])
    cols = {h: [r[j] for r in rows] for j, h in enumerate(header)}
    cols["age"] = [float(v) if v else float("nan") for v in cols["age"]]
    want = _trained_outputs(mixed_run, cols)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_onnx_export_takes_raw_columns_in_a_bare_session(mixed_run: Path, tmp_path: Path) -> None:
    import onnxruntime as ort

    from core.services.export import export_run

    result = export_run(mixed_run, "onnx", tmp_path / "m.onnx", checkpoint="best")
    assert result.max_abs_diff <= 1e-4
    side = json.loads((tmp_path / "model.json").read_text())
    assert [i["name"] for i in side["files"]["m.onnx"]["inputs"]] == ["age", "color", "member"]
    assert side["schema"]["columns"][2]["levels"] == sorted(COLORS)
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    feed = {
        "age": np.array([25.0, np.nan, 61.5, 40.0], dtype=np.float32),
        "color": np.array(["red", "purple", "", "blue"], dtype=object),
        "member": np.array(["yes", "No", "NA", "TRUE"], dtype=object),
    }
    got = session.run(None, feed)[0]
    want = _trained_outputs(mixed_run, {k: list(v) for k, v in feed.items()})
    np.testing.assert_allclose(got, want, atol=1e-4)
    # predict with the .onnx file on a raw table: the schema encodes it, the graph's lookups run on its columns
    header, rows = mixed_rows(20, seed=9, missing=0.25)
    path = _write(tmp_path / "new.csv", header, rows)
    out = tmp_path / "pred.csv"
    assert cli.main(["predict", str(tmp_path / "m.onnx"), str(path), "--out", str(out), "--workers", "2"]) == 0
    with out.open() as fh:
        got_csv = np.array([[float(v) for v in r[2:]] for r in list(csv.reader(fh))[1:]])
    cols = {h: [r[j] for r in rows] for j, h in enumerate(header)}
    cols["age"] = [float(v) if v else float("nan") for v in cols["age"]]
    np.testing.assert_allclose(got_csv, _trained_outputs(mixed_run, cols), atol=1e-4)


@pytest.mark.parametrize("fmt", ["safetensors", "state-dict", "torch-export"])
def test_other_exports_carry_the_schema(fmt: str, mixed_run: Path, tmp_path: Path) -> None:
    from core.services.export import export_run

    (tmp_path / "out").mkdir()
    result = export_run(mixed_run, fmt, tmp_path / "out", checkpoint="best")
    assert result.max_abs_diff <= 1e-4
    side = json.loads((tmp_path / "out" / "model.json").read_text())
    assert side["schema"]["columns"][1]["kind"] == "number" and side["categories"] == [5]
    entry = next(iter(side["files"].values()))
    assert ("raw rows" if fmt == "torch-export" else "encoded rows") in entry["input"]
    if fmt == "safetensors":  # embedded beside the weights too
        from safetensors import safe_open

        with safe_open(str(result.path), "pt") as fh:
            assert json.loads(fh.metadata()["traindesk.model"])["schema"] == side["schema"]


def test_easy_regression_reaches_r2_above_0_9(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(600):
        a, b = rng.normal(size=2)
        zone = "nse"[int(rng.integers(3))]
        y = 3 * a - 2 * b + {"n": 2.0, "s": -1.0, "e": 0.0}[zone] + rng.normal(0, 0.2) + 100
        rows.append([f"{a:.4f}", f"{b:.4f}" if rng.random() > 0.1 else "", zone, f"{y:.4f}"])
    path = _write(tmp_path / "r.csv", ["a", "b", "zone", "y"], rows)
    cfg = cfg_for(
        f'data.source="csv:{path}"',
        "data.target=y",
        "train.epochs=12",
        "optim.name=adam",
        "optim.lr=0.01",
        "model.hidden=[32]",
    )
    session = run_to_end(cfg, tmp_path / "runs")
    assert session.run_dir is not None
    summary = json.loads((session.run_dir / "summary.json").read_text())
    final = summary["final"]
    assert final["val_r2"] >= 0.9, final
    assert summary["task"] == "regression"
    assert summary["evaluation"]["r2"] == pytest.approx(final["val_r2"], abs=1e-3)  # the same split, re-scored
    assert final["val_rmse"] < 1.5 and final["val_mae"] < final["val_rmse"] * 1.01
    evals = [r for r in read_metrics(session.run_dir / "metrics.jsonl") if r["kind"] == "eval"]
    assert len(evals) == 12 and all("val_rmse" in r and "val_r2" in r for r in evals)
    best = json.loads((session.run_dir / "summary.json").read_text())["best"]
    assert best["monitor"] == "val_rmse" and best["value"] == min(r["val_rmse"] for r in evals)
    # a labelled table given to predict is scored with the regression metrics, in the target's units
    from core.services.predict import predict

    result = predict(session.run_dir, path, workers=1)
    assert result.classes == ["y"] and result.csv_text().startswith("id,y\n0,")
    ev = result.evaluation()
    assert ev is not None and ev["n"] == 600 and ev["r2"] >= 0.9 and ev["rmse"] < 1.5


def test_builtin_diabetes_reaches_r2_0_4_with_the_default_model(tmp_path: Path) -> None:
    session = run_to_end(cfg_for("data.source=builtin:diabetes"), tmp_path)
    assert session.run_dir is not None
    evals = [r for r in read_metrics(session.run_dir / "metrics.jsonl") if r["kind"] == "eval"]
    best = min(evals, key=lambda r: r["val_rmse"])  # what best.pt holds
    assert best["val_r2"] >= 0.4, evals


def _skewed_csv(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    rows = []
    for i in range(660):
        minority = i % 11 == 0  # 60 of 660: a 10:1 split
        centre = 1.0 if minority else 0.0
        rows.append(
            [f"{rng.normal(centre, 1.0):.4f}", f"{rng.normal(centre, 1.0):.4f}", "rare" if minority else "common"]
        )
    return _write(tmp_path / "skew.csv", ["a", "b", "label"], rows)


def _minority_recall(run_dir: Path) -> float:
    ckpt = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    cfg = apply_overrides(Config(), [])
    from core.config import from_dict

    cfg = from_dict(ckpt["config"])
    data = load_data(cfg.data, seed=cfg.train.seed, share=False)
    model = model_from_checkpoint(ckpt)
    with torch.no_grad():
        pred = model(data.val.x).argmax(1)
    rare = data.info.class_names.index("rare")
    mask = data.val.y == rare
    return float((pred[mask] == rare).double().mean())


def test_balanced_class_weights_raise_minority_recall(tmp_path: Path) -> None:
    path = _skewed_csv(tmp_path)
    data = load_data(load_cfg(path).data, share=False)
    assert "imbalanced" in data.info.imbalance_warning
    recalls = {}
    for weights in ("none", "balanced"):
        cfg = cfg_for(
            f'data.source="csv:{path}"', f"train.class_weights={weights}", "train.epochs=6", "model.hidden=[16]"
        )
        session = run_to_end(cfg, tmp_path / weights)
        assert session.run_dir is not None
        final = json.loads((session.run_dir / "summary.json").read_text())["final"]
        assert {"val_balanced_accuracy", "val_macro_f1"} <= set(final)
        recalls[weights] = _minority_recall(session.run_dir)
    assert recalls["balanced"] > recalls["none"] + 0.2, recalls


def test_onnx_export_verifies_on_random_rows_when_the_table_is_gone(
    mixed_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import core.data
    from core.services.export import export_run

    def gone(*args: Any, **kwargs: Any) -> Any:
        raise DataError("data: file not found")

    monkeypatch.setattr(core.data, "load_data", gone)
    result = export_run(mixed_run, "onnx", tmp_path / "m.onnx", checkpoint="best")
    assert "random rows" in result.checked_on and result.max_abs_diff <= 1e-4


def test_sweep_and_search_pick_the_lowest_rmse_for_regression() -> None:
    from core.metric_names import search_metric, selection_metric
    from core.strategies import get_strategy

    cfg = apply_overrides(Config(), ["parallel.strategy=sweep", "parallel.workers=2", "parallel.sweep_lr=[0.01,0.1]"])
    sweep = get_strategy(cfg, task="regression")
    evals = {
        0: {"val_loss": 0.5, "val_rmse": 60.0, "val_r2": 0.4},
        1: {"val_loss": 0.4, "val_rmse": 55.0, "val_r2": 0.5},
    }
    assert sweep.result_worker(evals) == 1
    assert selection_metric(cfg, "regression") == "val_rmse" == search_metric(cfg, "regression")
    assert selection_metric(cfg.replace("train", select_by="val_r2"), "regression") == "val_r2"
    # what a user means by the best classifier: its accuracy, balanced on skewed classes; train.monitor wins
    assert selection_metric(cfg, "classification") == "val_accuracy"
    assert selection_metric(cfg, "classification", skewed=True) == "val_balanced_accuracy"
    assert selection_metric(cfg.replace("train", monitor="val_loss"), "classification", skewed=True) == "val_loss"
