"""The int8 ONNX export: per-channel QDQ calibrated on the training split, its cost measured, a loss refused."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from core import cli
from core.errors import UserError
from core.services import export as export_service
from core.services.export import export_run
from core.services.formats.compact import weight_axes
from core.training.checkpoint import load_checkpoint, save_checkpoint
from tests.trained_run import make_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A digits cnn and a digits-as-a-table mlp (its schema in front of the graph), trained a little."""
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("int8")
    d = load_digits()
    table = root / "digits.csv"
    with table.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([f"p{j}" for j in range(64)] + ["label"])
        for row, y in zip(d.data, d.target):
            w.writerow([int(v) for v in row] + [int(y)])
    return {
        "cnn": make_run(root / "runs", kind="cnn", steps=150),
        "table": make_run(root / "runs", source=f"csv:{table}", steps=150, hidden=(64,)),
    }


@pytest.mark.parametrize("fmt", ["onnx-int8", "executorch-int8", "executorch"])
@pytest.mark.parametrize("kind", ["cnn", "table"])
def test_the_small_files_answer_as_the_trained_model_and_say_what_they_cost(
    kind: str, fmt: str, runs: dict[str, Path], tmp_path: Path
) -> None:
    result = export_run(runs[kind], fmt, tmp_path)
    name = {"onnx-int8": "model-int8.onnx", "executorch-int8": "model-int8.pte", "executorch": "model.pte"}[fmt]
    assert result.path == tmp_path / name
    cost = result.cost
    assert cost["metric"] == "accuracy" and cost["loss"] >= -1.0, cost
    assert cost["agreement"] >= 0.97 and result.agree >= 0.97 * result.rows_checked
    if fmt == "executorch":  # float: held to the tolerance as every float export is
        assert result.max_abs_diff <= 1e-4
    if fmt == "onnx-int8":
        axes = weight_axes(result.path)
        assert axes and all(n > 1 for n in axes.values())  # one scale per output channel: per-channel weights
    side = json.loads((tmp_path / "model.json").read_text())
    entry = side["files"][name]
    assert entry["format"] == fmt and entry["cost"]["size_bytes"] == result.path.stat().st_size
    assert entry["cost"]["rows_per_s"] > 0 and ("tolerance" in entry["verified"]) == (fmt == "executorch")
    assert "accuracy" in result.summary() and "rows/s" in result.summary()
    if kind == "table":  # predict takes it as it takes the float graph: raw columns in
        out = tmp_path / "predicted.csv"
        assert (
            cli.main(["predict", str(result.path), str(runs[kind].parent.parent / "digits.csv"), "--out", str(out)])
            == 0
        )
        with out.open() as fh:
            rows = list(csv.DictReader(fh))
        from sklearn.datasets import load_digits

        truth = load_digits().target
        assert len(rows) == 1797 and np.mean([r["predicted"] == str(t) for r, t in zip(rows, truth)]) > 0.8


def test_one_channel_with_a_thousandfold_weight_breaks_per_tensor_int8_but_not_per_channel(
    runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A weight of 1000 from pixel p0, which is 0 in every digit, to one hidden unit: the same function, but one
    int8 scale for the whole layer rounds its other weights (about 0.1) to zero; a scale per unit does not."""
    from sklearn.datasets import load_digits

    from core.services.formats import compact

    assert (load_digits().data[:, 0] == 0).all()
    run = tmp_path / "run"
    shutil.copytree(runs["table"], run)
    path = run / "checkpoints" / "last.pt"
    data = load_checkpoint(path)
    first = min((k for k in data["model"] if k.endswith(".weight") and data["model"][k].ndim == 2), key=lambda k: k)
    assert data["model"][first].shape[1] == 64  # pixels in, p0 first
    data["model"][first][0, 0] = 1000.0
    save_checkpoint(path, data)
    (tmp_path / "out").mkdir()
    result = export_run(run, "onnx-int8", tmp_path / "out")
    assert result.cost["loss"] >= -1.0, result.cost
    monkeypatch.setattr(compact, "PER_CHANNEL", False)
    with pytest.raises(UserError, match="loses"):
        export_run(run, "onnx-int8", tmp_path / "out", max_loss=5.0)


def test_a_broken_calibration_is_refused_with_its_figure_unless_accepted(
    runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = export_service.calibration_rows

    def constant(data: dict, fmt: str, rows: int) -> torch.Tensor:
        return torch.zeros_like(real(data, fmt, rows))  # every activation range measured on blank images

    monkeypatch.setattr(export_service, "calibration_rows", constant)
    with pytest.raises(UserError, match=r"onnx-int8 loses \d+\.\d\d points of accuracy .*--accept-loss") as err:
        export_run(runs["cnn"], "onnx-int8", tmp_path)
    assert "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []  # nothing written, no staging folder left
    result = export_run(runs["cnn"], "onnx-int8", tmp_path, accept_loss=True)
    assert result.path.exists() and result.cost["loss"] < -1.0


def test_int8_needs_a_validation_split_and_says_so(runs: dict[str, Path], tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(runs["table"], run)
    path = run / "checkpoints" / "last.pt"
    data = load_checkpoint(path)
    data["config"]["data"]["source"] = f"csv:{tmp_path / 'gone.csv'}"  # the run's data is no longer there
    save_checkpoint(path, data)
    assert cli.main(["export", str(run), "--format", "onnx-int8"]) == 2
    assert not (run / "exports" / "model-int8.onnx").exists()
    with pytest.raises(UserError, match="onnx-int8 is checked on the run's validation split, which is not there"):
        export_run(run, "onnx-int8", tmp_path)
