"""The export dialog, the evaluate view and the predict view against the real engine (offscreen)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PySide6.QtCore import Qt

from app.views.evaluate import EvaluateView
from app.views.export_dialog import ExportDialog
from app.views.predict import PredictView
from core import cli
from tests.trained_run import make_run


@pytest.fixture(scope="module")
def run_and_input(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run and an NPZ of raw digits features to predict."""
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("gui-export")
    digits = load_digits()
    np.savez(root / "digits.npz", x=digits.data[:50].astype(np.float32), y=digits.target[:50])
    return make_run(root / "runs"), root / "digits.npz"


def _wait(qtbot: Any, widget: Any) -> None:
    qtbot.waitUntil(lambda: not widget.busy, timeout=60_000)


@pytest.mark.parametrize("fmt", ["safetensors", "onnx", "onnx-int8"])
def test_dialog_writes_a_file_the_cli_predicts_with(
    fmt: str, qtbot: Any, run_and_input: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if fmt.startswith("onnx"):
        pytest.importorskip("onnxscript", reason="the optional extra 'onnx' is not installed")
        pytest.importorskip("onnxruntime", reason="the optional extra 'onnx' is not installed")
    run_dir, npz = run_and_input
    dialog = ExportDialog(run_dir)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.edit_path.text() == str(run_dir / "exports" / "model.safetensors")
    dialog.set_format(fmt)
    suffix = {"safetensors": ".safetensors", "onnx": ".onnx", "onnx-int8": ".onnx"}[fmt]
    assert dialog.edit_path.text().endswith("model-int8.onnx" if fmt == "onnx-int8" else f"model{suffix}")
    assert dialog.check_accept_loss.isEnabled() == (fmt == "onnx-int8")
    target = tmp_path / f"from-gui{suffix}"
    dialog.set_path(target)
    with qtbot.waitSignal(dialog.exported, timeout=60_000) as blocker:
        qtbot.mouseClick(dialog.button_export, Qt.MouseButton.LeftButton)
        assert not dialog.button_export.isEnabled()  # busy while it runs off the GUI thread
    result = blocker.args[0]
    assert result.path == target and target.is_file() and (tmp_path / "model.json").is_file()
    assert "Verified" in dialog.label_result.text() and "max abs difference" in dialog.label_result.text()
    assert "Cost: accuracy" in dialog.label_result.text() and "rows/s" in dialog.label_result.text()
    assert dialog.button_export.isEnabled()

    code = cli.main(["predict", str(target), str(npz)])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert len(rows) == 51 and rows[0][:2] == ["id", "predicted"]
    truth = [str(v) for v in np.load(npz)["y"]]
    assert sum(r[1] == t for r, t in zip(rows[1:], truth)) >= 40  # a briefly trained model, mostly right


def test_dialog_shows_an_error_in_one_line(qtbot: Any, run_and_input: tuple[Path, Path], tmp_path: Path) -> None:
    run_dir, _ = run_and_input
    dialog = ExportDialog(run_dir)
    qtbot.addWidget(dialog)
    dialog.set_path(tmp_path / "missing-folder" / "m.safetensors")
    with qtbot.waitSignal(dialog.failed, timeout=30_000) as blocker:
        dialog.start_export()
    assert "does not exist" in blocker.args[0] and "\n" not in blocker.args[0]
    assert dialog.label_result.text().startswith("✗ Export failed")


def test_evaluate_view_shows_confusion_matrix_and_gallery(qtbot: Any, run_and_input: tuple[Path, Path]) -> None:
    run_dir, _ = run_and_input
    view = EvaluateView()
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.evaluated, timeout=60_000) as blocker:
        view.load_run(run_dir)
    full = blocker.args[0]
    table = view.table_confusion
    assert table.rowCount() == table.columnCount() == 10
    counts = [[int(table.item(i, j).text()) for j in range(10)] for i in range(10)]
    assert counts == full["confusion"] and sum(map(sum, counts)) == full["n"]
    assert view.table_per_class.rowCount() == 10
    assert view.list_misclassified.count() == min(48, full["misclassified_total"])
    assert (run_dir / "eval.json").is_file()
    assert "Accuracy" in view.label_summary.text()
    # classes in class order under an ascending arrow
    header = view.table_per_class.horizontalHeader()
    assert header.sortIndicatorSection() == 0 and header.sortIndicatorOrder() == Qt.SortOrder.AscendingOrder
    assert [view.table_per_class.item(r, 0).text() for r in range(10)] == [str(c) for c in range(10)]
    view.table_per_class.sortByColumn(0, Qt.SortOrder.DescendingOrder)
    assert view.table_per_class.item(0, 0).text() == "9"
    # mistakes are drawn as the digits look (0-16 pixels), not as standardised values stretched per image
    icon = view.list_misclassified.item(0).icon().pixmap(72, 72).toImage()
    greys = {icon.pixelColor(x, y).value() for x in range(0, 72, 9) for y in range(0, 72, 9)}
    assert min(greys) == 0 and len(greys) > 2  # background black, strokes in several greys


def test_confusion_matrix_follows_the_theme(qtbot: Any, run_and_input: tuple[Path, Path]) -> None:
    from PySide6.QtWidgets import QApplication

    from app.shell.theme import apply_theme

    run_dir, _ = run_and_input
    view = EvaluateView()
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.evaluated, timeout=60_000):
        view.load_run(run_dir)
    empty = next(view.table_confusion.item(0, j) for j in range(10) if view.table_confusion.item(0, j).text() == "0")
    assert empty.background().color().lightness() > 200
    app = QApplication.instance()
    try:
        apply_theme(app, "dark")
        view.refresh_colors()
        empty = next(
            view.table_confusion.item(0, j) for j in range(10) if view.table_confusion.item(0, j).text() == "0"
        )
        assert empty.background().color().lightness() < 100
    finally:
        apply_theme(app, "light")


def test_predict_view_predicts_and_saves(qtbot: Any, run_and_input: tuple[Path, Path], tmp_path: Path) -> None:
    from core.services.export import export_run

    run_dir, npz = run_and_input
    model = export_run(run_dir, "torch-export", tmp_path / "m.pt2").path
    view = PredictView()
    qtbot.addWidget(view)
    view.set_model(model)
    view.set_input(npz)
    with qtbot.waitSignal(view.predicted, timeout=60_000):
        qtbot.mouseClick(view.button_predict, Qt.MouseButton.LeftButton)
    assert view.table.model().rowCount() == 50 and view.table.model().columnCount() == 12
    assert view.button_save.isEnabled()
    with qtbot.waitSignal(view.saved, timeout=30_000):
        view.save(tmp_path / "p.csv")
    assert (tmp_path / "p.csv").read_text() == view.result.csv_text()
    # the NPZ has y: it is a test set
    assert view.test_panel.isVisibleTo(view) and "accuracy" in view.label_test.text()
    assert view.table_test_confusion.rowCount() == 10 and view.table_test_per_class.rowCount() == 10
    assert view.evaluation["n"] == 50
    view.set_input(tmp_path / "nothing.csv")
    with qtbot.waitSignal(view.failed, timeout=30_000) as blocker:
        view.run()
    assert "input not found" in blocker.args[0]
    _wait(qtbot, view)
    # nothing of the previous input stays next to the error
    assert view.table.model().rowCount() == 0 and not view.button_save.isEnabled()
    assert not view.test_panel.isVisibleTo(view)


# ----------------------------------------------------------------------------- best or last checkpoint


@pytest.fixture
def run_with_best(tmp_path: Path) -> Path:
    from tests.trained_run import add_best

    run_dir = make_run(tmp_path / "runs")
    add_best(run_dir, epoch=3, value=0.25)
    return run_dir


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def test_export_dialog_offers_best_by_default_with_its_epoch(qtbot: Any, run_with_best: Path, tmp_path: Path) -> None:
    from core.training.checkpoint import load_checkpoint

    dialog = ExportDialog(run_with_best)
    qtbot.addWidget(dialog)
    combo = dialog.findChild(type(dialog.combo_checkpoint), "combo_checkpoint")
    assert combo is dialog.combo_checkpoint and combo.isEnabled() and combo.which == "best"
    qtbot.waitUntil(lambda: "epoch 3" in combo.currentText(), timeout=30_000)
    assert "val_loss 0.25" in combo.currentText()
    for which in ("best", "last"):
        combo.set_which(which)
        dialog.set_path(tmp_path / which / "m.safetensors")
        (tmp_path / which).mkdir()
        with qtbot.waitSignal(dialog.exported, timeout=60_000):
            dialog.start_export()
        want = load_checkpoint(run_with_best / "checkpoints" / f"{which}.pt")["model"]
        got = _weights(tmp_path / which / "m.safetensors")
        assert all(torch.equal(got[k], want[k]) for k in want), which
    _wait(qtbot, combo)


def test_without_best_only_last_is_offered(qtbot: Any, run_and_input: tuple[Path, Path]) -> None:
    dialog = ExportDialog(run_and_input[0])
    qtbot.addWidget(dialog)
    assert dialog.combo_checkpoint.count() == 1 and dialog.combo_checkpoint.which == "last"
    assert not dialog.combo_checkpoint.isEnabled()


def test_evaluate_view_evaluates_the_chosen_checkpoint(qtbot: Any, run_with_best: Path) -> None:
    view = EvaluateView()
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.evaluated, timeout=60_000) as blocker:
        view.load_run(run_with_best)
    best = blocker.args[0]
    assert best["checkpoint"]["which"] == "best" and best["checkpoint"]["epoch"] == 3
    # eval.json is the record of the run's model: best, once kept
    assert json.loads((run_with_best / "eval.json").read_text())["checkpoint"]["which"] == "best"
    assert "best checkpoint" in view.label_summary.text()
    with qtbot.waitSignal(view.evaluated, timeout=60_000) as blocker:
        view.combo_checkpoint.set_which("last")  # choosing evaluates that checkpoint, not kept
    last = blocker.args[0]
    assert last["checkpoint"]["which"] == "last"
    assert json.loads((run_with_best / "eval.json").read_text())["checkpoint"]["which"] == "best"
    assert last["confusion"] != best["confusion"]  # the halved weights predict differently
    _wait(qtbot, view)
    _wait(qtbot, view.combo_checkpoint)


def test_a_result_neither_squashes_the_fields_nor_outlives_its_format(
    qtbot: Any, run_and_input: tuple[Path, Path], tmp_path: Path
) -> None:
    run_dir, _ = run_and_input
    dialog = ExportDialog(run_dir)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    dialog.set_path(tmp_path / "m.safetensors")
    with qtbot.waitSignal(dialog.exported, timeout=60_000):
        dialog.start_export()
    fields = (dialog.combo_checkpoint, dialog.combo_format, dialog.combo_output, dialog.edit_path)

    def squashed() -> list[str]:
        return [w.objectName() for w in fields if w.height() < w.sizeHint().height()]

    label = dialog.label_result
    qtbot.waitUntil(lambda: not squashed() and label.height() >= label.heightForWidth(label.width()), timeout=5_000)
    assert "Verified" in label.text()
    dialog.set_format("state-dict")  # another format: the safetensors file's verification is not its result
    assert label.text() == "" and dialog.result is None
