"""Every export of a table's model takes the same raw numbers: the ONNX graph, the torch.export program and predict."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from core.services.export import export_run
from core.services.predict import predict
from tests.trained_run import make_run


@pytest.fixture(scope="module")
def digits_csv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """sklearn's digits as a CSV with a ``label`` target: a numeric table whose pixels have outlier fences."""
    from sklearn.datasets import load_digits

    d = load_digits()
    path = tmp_path_factory.mktemp("digits") / "digits.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([f"p{j}" for j in range(64)] + ["label"])
        for row, y in zip(d.data, d.target):
            w.writerow([int(v) for v in row] + [int(y)])
    return path, d.data.astype(np.float32)


@pytest.fixture(scope="module")
def digits_exports(digits_csv: tuple[Path, np.ndarray], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("digits_run")
    run_dir = make_run(root / "runs", source=f"csv:{digits_csv[0]}")
    (root / "out").mkdir()
    out = {"run": run_dir}
    for fmt in ("onnx", "torch-export"):
        result = export_run(run_dir, fmt, root / "out")
        assert result.max_abs_diff <= 1e-4
        out[fmt] = result.path
    return out


def test_onnx_and_torch_export_answer_the_same_on_raw_rows(
    digits_csv: tuple[Path, np.ndarray], digits_exports: dict[str, Path]
) -> None:
    import onnxruntime as ort

    path, raw = digits_csv
    side = json.loads((digits_exports["onnx"].parent / "model.json").read_text())
    fences = [c for c in side["schema"]["columns"] if c.get("clip")]
    assert fences, "the test needs columns with outlier fences"
    assert any((raw[:, int(c["name"][1:])] > c["clip"][1]).any() for c in fences)  # raw rows beyond a fence
    entry = side["files"][digits_exports["torch-export"].name]
    assert entry["layout"] == "raw rows" and [c["name"] for c in entry["columns"]] == [f"p{j}" for j in range(64)]

    session = ort.InferenceSession(str(digits_exports["onnx"]), providers=["CPUExecutionProvider"])
    onnx_probs = session.run(None, {f"p{j}": raw[:, j].copy() for j in range(64)})[0]
    program = torch.export.load(str(digits_exports["torch-export"])).module()  # no TrainDesk code involved
    with torch.no_grad():
        pt2_probs = program(torch.from_numpy(raw)).numpy()
    assert np.abs(onnx_probs - pt2_probs).max() <= 1e-4
    assert (onnx_probs.argmax(1) == pt2_probs.argmax(1)).all()
    for fmt in ("onnx", "torch-export"):  # predict reads the same CSV with either file: the same answers
        res = predict(digits_exports[fmt], path)
        assert np.abs(res.probs - onnx_probs).max() <= 1e-4, fmt


def test_torch_export_fills_missing_numbers_inside(digits_exports: dict[str, Path], tmp_path: Path) -> None:
    import onnxruntime as ort

    rows = np.full((3, 64), 4.0, dtype=np.float32)
    rows[0, :10] = np.nan
    rows[1, 5] = 1e6  # far past any fence
    session = ort.InferenceSession(str(digits_exports["onnx"]), providers=["CPUExecutionProvider"])
    onnx_probs = session.run(None, {f"p{j}": rows[:, j].copy() for j in range(64)})[0]
    program = torch.export.load(str(digits_exports["torch-export"])).module()
    with torch.no_grad():
        pt2_probs = program(torch.from_numpy(rows)).numpy()
    assert np.isfinite(pt2_probs).all()
    assert np.abs(onnx_probs - pt2_probs).max() <= 1e-4
