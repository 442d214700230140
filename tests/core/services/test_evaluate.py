"""Evaluation: metrics agree with scikit-learn; eval.json and summary.json for a run; the session hook."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm

from core.errors import RunError
from core.services.evaluate_run import (
    attach_evaluation,
    compact,
    evaluate_run,
    metrics,
    misclassified_images,
    report,
)
from tests.core.services.test_export import raw_validation, run_cli
from tests.trained_run import make_run


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 6).flatmap(
        lambda k: st.tuples(
            st.just(k), st.lists(st.tuples(st.integers(0, k - 1), st.integers(0, k - 1)), min_size=1, max_size=80)
        )
    )
)
def test_metrics_agree_with_sklearn(case: tuple[int, list[tuple[int, int]]]) -> None:
    k, pairs = case
    y_true = np.array([a for a, _ in pairs])
    y_pred = np.array([b for _, b in pairs])
    m = metrics(y_true, y_pred, [f"c{i}" for i in range(k)])
    assert m["confusion"] == skm.confusion_matrix(y_true, y_pred, labels=list(range(k))).tolist()
    assert m["confusion"] == _hand_confusion(y_true, y_pred, k)
    p, r, f, s = skm.precision_recall_fscore_support(y_true, y_pred, labels=list(range(k)), zero_division=0)
    assert m["accuracy"] == pytest.approx(skm.accuracy_score(y_true, y_pred))
    assert [c["precision"] for c in m["per_class"]] == pytest.approx(p)
    assert [c["recall"] for c in m["per_class"]] == pytest.approx(r)
    assert [c["f1"] for c in m["per_class"]] == pytest.approx(f)
    assert [c["support"] for c in m["per_class"]] == list(s)
    mp, mr, mf, _ = skm.precision_recall_fscore_support(
        y_true, y_pred, labels=list(range(k)), average="macro", zero_division=0
    )
    assert (m["macro"]["precision"], m["macro"]["recall"], m["macro"]["f1"]) == pytest.approx((mp, mr, mf))
    json.dumps(m, allow_nan=False)  # JSON-safe: no NaN for a class never predicted


def _hand_confusion(y_true: np.ndarray, y_pred: np.ndarray, k: int) -> list[list[int]]:
    cm = [[0] * k for _ in range(k)]
    for a, b in zip(y_true.tolist(), y_pred.tolist()):
        cm[a][b] += 1
    return cm


def test_metrics_match_the_hand_written_formulas() -> None:
    """The figures eval.json held before scikit-learn computed them: same values, same keys."""
    y_true = np.array([0, 0, 1, 1, 1, 2, 2, 3])
    y_pred = np.array([0, 1, 1, 1, 0, 2, 0, 0])  # class 3 never predicted right, never predicted at all
    m = metrics(y_true, y_pred, ["a", "b", "c", "d"])
    precision, recall = [1 / 4, 2 / 3, 1.0, 0.0], [1 / 2, 2 / 3, 1 / 2, 0.0]
    f1 = [2 * p * r / (p + r) if p + r else 0.0 for p, r in zip(precision, recall)]
    support = [2, 3, 2, 1]
    assert m["n"] == 8 and m["accuracy"] == pytest.approx(4 / 8)
    assert [c["class"] for c in m["per_class"]] == ["a", "b", "c", "d"]
    assert [c["precision"] for c in m["per_class"]] == pytest.approx(precision)
    assert [c["recall"] for c in m["per_class"]] == pytest.approx(recall)
    assert [c["f1"] for c in m["per_class"]] == pytest.approx(f1)
    assert [c["support"] for c in m["per_class"]] == support
    assert m["macro"]["f1"] == pytest.approx(sum(f1) / 4)
    assert m["weighted"]["recall"] == pytest.approx(sum(r * s for r, s in zip(recall, support)) / 8)
    assert m["confusion"] == _hand_confusion(y_true, y_pred, 4)
    assert set(m) == {"n", "accuracy", "per_class", "macro", "weighted", "confusion", "confusion_axes"}


def test_report_lists_the_most_confident_mistakes_first() -> None:
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6], [0.3, 0.7]], dtype=np.float32)
    full = report(np.array([0, 0, 0, 1]), probs, ["a", "b"], paths=["p0", "p1", "p2", "p3"])
    assert full["misclassified_total"] == 2
    assert [m["index"] for m in full["misclassified"]] == [1, 2]
    assert full["misclassified"][0] == {"index": 1, "true": "a", "predicted": "b", "confidence": 0.8, "path": "p1"}
    assert full["confusion"] == [[1, 2], [0, 1]]
    small = compact(full)
    assert (
        small["accuracy"] == 0.5 and small["file"] == "eval.json" and small["worst_class"] == {"class": "a", "f1": 0.5}
    )  # a tie: by name


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("evalruns"))


def test_evaluate_run_writes_eval_json_and_summary(digits_run: Path) -> None:
    full = evaluate_run(digits_run)
    _, y, probs = raw_validation(digits_run)  # the same seeded split, evaluated independently
    assert full["n"] == len(y) == 360
    assert full["accuracy"] == pytest.approx(float((probs.argmax(1) == y.numpy()).mean()))
    assert np.array(full["confusion"]).sum() == full["n"]
    on_disk = json.loads((digits_run / "eval.json").read_text())
    assert on_disk["per_class"] == full["per_class"] and on_disk["split"] == "validation"
    summary = json.loads((digits_run / "summary.json").read_text())
    assert summary["status"] == "finished"  # the rest of the summary is kept
    assert summary["evaluation"] == compact(full)
    assert len(json.dumps(summary["evaluation"])) < 400  # compact


def test_cli_evaluate(digits_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "evaluate", str(digits_run), "--no-write")
    assert code == 0, err
    assert out.startswith("accuracy ") and "confusion matrix (rows: true, columns: predicted)" in out
    code, out, err = run_cli(capsys, "evaluate", str(digits_run), "--json", "--no-write")
    assert code == 0 and json.loads(out)["format"] == "traindesk.eval"
    code, out, err = run_cli(capsys, "evaluate", str(tmp_path / "nope"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "run directory not found" in err


def test_changed_data_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "d.csv"
    src.write_text("a,b,label\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(40)))
    run_dir = make_run(tmp_path / "runs", source=f"csv:{src}", steps=5)
    assert evaluate_run(run_dir, write=False)["n"] == 8
    src.write_text("a,b,label\n" + "".join(f"{i * 10},{i % 3},{i % 2}\n" for i in range(40)))
    with pytest.raises(RunError, match="data source has changed"):
        evaluate_run(run_dir)


def test_session_hook_adds_evaluation_and_never_raises(digits_run: Path, tmp_path: Path) -> None:
    from core.config import from_dict
    from core.data import load_data
    from core.training.checkpoint import load_checkpoint, model_from_checkpoint

    ckpt = load_checkpoint(digits_run)
    model = model_from_checkpoint(ckpt)
    data = load_data(from_dict(ckpt["config"]).data, seed=0, share=False)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    summary = {"status": "finished", "final": {"val_accuracy": 0.9}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    new = attach_evaluation(run_dir, lambda: (model, "best", 3), data, summary, "val_accuracy")
    assert new is not None and new["evaluation"]["n"] == 360 and new["final"] == summary["final"]
    assert json.loads((run_dir / "summary.json").read_text()) == new
    full = json.loads((run_dir / "eval.json").read_text())
    assert full["checkpoint"] == {"which": "best", "epoch": 3}
    # the run's figure: the handed-on model's, as evaluate measures it, with the metric that chose it
    result = new["result"]
    assert result["checkpoint"] == "best" and result["epoch"] == 3 and result["select_by"] == "val_accuracy"
    assert result["val_accuracy"] == result["value"] == pytest.approx(full["accuracy"], abs=1e-6)
    assert result["val_balanced_accuracy"] == pytest.approx(full["macro"]["recall"], abs=1e-6)

    failed = {"status": "failed", "error": "worker died"}
    assert attach_evaluation(run_dir, lambda: (model, "last", 1), data, failed) is failed  # not evaluated

    wrong = torch.nn.Linear(3, 10)  # does not take 64 features: evaluation raises inside the hook
    broken = attach_evaluation(run_dir, lambda: (wrong, "last", 1), data, dict(summary))
    assert broken is not None and "error" in broken["evaluation"]
    assert json.loads((run_dir / "summary.json").read_text())["evaluation"] == broken["evaluation"]

    def no_model() -> tuple[torch.nn.Module, str, int]:
        raise RuntimeError("no model: the session has not started")

    assert "no model" in attach_evaluation(run_dir, no_model, data, dict(summary))["evaluation"]["error"]


def test_misclassified_images_for_digits(digits_run: Path) -> None:
    full = evaluate_run(digits_run, write=False)
    images = misclassified_images(digits_run, full, limit=5)
    assert len(images) == min(5, full["misclassified_total"])
    for img, caption in images:
        assert img.shape == (8, 8) and img.dtype == np.uint8 and caption.startswith("true ")


def test_image_folder_mistakes_come_with_their_files(tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(2)
    for cls, level in (("dark", 110), ("light", 140)):  # close levels: a briefly trained model errs
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(15):
            Image.fromarray(np.clip(rng.normal(level, 60, (6, 6, 3)), 0, 255).astype(np.uint8)).save(
                tmp_path / "imgs" / cls / f"{i}.png"
            )
    run_dir = make_run(tmp_path / "runs", source=f"images:{tmp_path / 'imgs'}", steps=1)
    full = evaluate_run(run_dir)
    assert full["n"] == 6 and all(Path(m["path"]).is_file() for m in full["misclassified"])
    images = misclassified_images(run_dir, full)
    assert len(images) == full["misclassified_total"] >= 1
    assert all(img.shape == (6, 6, 3) and img.dtype == np.uint8 for img, _ in images)


def test_a_regression_plots_sample_keeps_the_splits_extremes() -> None:
    """A plot of 2,000 of 12,000 rows reaches the split's highest target (18.8k), not a sample's 16.5k."""
    from core.training.validation import sample_rows

    values = np.random.default_rng(1).gamma(2.0, 1000.0, 12_000)
    values[7_777] = 18_823.0
    rows = sample_rows(len(values), 2_000, keep=[int(values.argmax()), int(values.argmin())])
    assert len(rows) == 2_000 and len(set(rows.tolist())) == 2_000 and list(rows) == sorted(rows)
    assert values[rows].max() == 18_823.0 and values[rows].min() == values.min()
    assert list(sample_rows(10, 20, keep=[3])) == list(range(10))
