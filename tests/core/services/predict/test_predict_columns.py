"""Predict matches a CSV's columns by name, and by position when asked and the names differ."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from core.services.predict import ColumnNamesDiffer, predict, read_model_meta
from tests.core.services.predict import test_predict
from tests.core.services.test_export import raw_validation, run_cli

# test_predict's module fixtures, built again for this module: a digits run, its exports, its rows.
exported = test_predict.exported
inputs = test_predict.inputs


def _renamed_csv(run_dir: Path, path: Path, with_id: bool) -> Path:
    """The validation rows in training order under other names (f0..f63), a label column first."""
    raw, y, _ = raw_validation(run_dir)
    x = raw.numpy().reshape(len(raw), -1)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["label"] + [f"f{j}" for j in range(x.shape[1])] + (["id"] if with_id else []))
        for i, row in enumerate(x):
            w.writerow([int(y[i])] + [repr(float(v)) for v in row] + ([f"row-{i}"] if with_id else []))
    return path


def test_other_names_same_count_are_offered_by_position(
    exported: dict[str, Path], inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = exported[".safetensors"]
    renamed = _renamed_csv(exported["run"], tmp_path / "renamed.csv", with_id=True)
    with pytest.raises(ColumnNamesDiffer) as info:
        predict(model, renamed, workers=1)
    features = read_model_meta(model)["input"]["features"]
    assert info.value.expected == features and info.value.found == [f"f{j}" for j in range(64)]
    code, out, err = run_cli(capsys, "predict", str(model), str(renamed))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--by-position" in err and "'f0'" in err and repr(features[0]) in err

    by_name = predict(model, inputs["csv"], workers=1)
    for workers in (1, 2):  # the whole read and the pieces parsed by the workers
        by_position = predict(model, renamed, workers=workers, by_position=True)
        assert list(by_position.ids) == list(by_name.ids)
        np.testing.assert_allclose(by_position.probs, by_name.probs, rtol=1e-5, atol=1e-6)
        assert by_position.labels == by_name.labels  # the label column stays the label
    code, out, err = run_cli(capsys, "predict", str(model), str(renamed), "--by-position", "--workers", "1")
    assert code == 0 and out.splitlines()[0].startswith("id,")


def test_a_wrong_count_says_what_the_model_takes(
    exported: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = str(exported[".safetensors"])
    (tmp_path / "few.csv").write_text("a,b,c\n1,2,3\n")
    for extra in ([], ["--by-position"]):
        code, _out, err = run_cli(capsys, "predict", model, str(tmp_path / "few.csv"), *extra)
        assert code == 2 and len(err.strip().splitlines()) == 1
    assert "has 3 feature columns, the model takes 64" in err
    code, _out, err = run_cli(capsys, "predict", model, str(tmp_path / "few.csv"))
    assert "lacks 64 of the model's 64 feature columns" in err and "the model takes 'pixel_0_0'" in err
