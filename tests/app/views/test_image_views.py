"""An image model is tried with image files in the window: the Serve tab's try-it form and the Predict tab take
them from a dialog or a drop, and show the picture with its top classes, the ones `traindesk predict` gives."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QFileDialog, QPushButton, QWidget
from pytestqt.qtbot import QtBot

from app.views.predict import PredictView
from app.views.serve import ServeView
from tests.cli_run import core_env, run_core
from tests.trained_run import make_run

ROOT = Path(__file__).resolve().parents[3]
START_MS = 120_000
COLOURS = {"blue": (40, 60, 200), "green": (50, 180, 60), "red": (200, 50, 40)}


def _image_folder(root: Path, size: int = 16, per_class: int = 8) -> Path:
    """Class folders of small noisy PNGs, one colour per class."""
    rng = np.random.default_rng(0)
    for name, colour in COLOURS.items():
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            noise = rng.integers(-60, 60, (size, size, 3))
            pixels = np.clip(np.array(colour)[None, None] + noise, 0, 255).astype("uint8")
            Image.fromarray(pixels).save(root / name / f"{name}{i}.png")
    return root


@pytest.fixture(scope="module")
def image_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """A CNN trained on an image folder, the folder, and each file's class by `traindesk predict`."""
    base = tmp_path_factory.mktemp("images")
    images = _image_folder(base / "images")
    run = make_run(base / "runs", source=f"images:{images}", kind="cnn", steps=12)
    env = core_env()
    out = run_core(
        "predict",
        str(run),
        str(images),
        "--workers",
        "1",
        env=env,
        timeout=300,
        check=True,
    ).stdout
    predicted = {row["id"]: row["predicted"] for row in csv.DictReader(io.StringIO(out))}
    return run, images, predicted


def drop_files(target: QWidget, paths: list[Path]) -> bool:
    """Drag ``paths`` over ``target`` and drop them there, the events Qt sends; whether the drag was taken."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    at = target.rect().center()
    enter = QDragEnterEvent(
        at, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(target, enter)
    if not enter.isAccepted():
        return False
    drop = QDropEvent(
        QPointF(at), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(target, drop)
    return drop.isAccepted()


def _answer_files(monkeypatch: pytest.MonkeyPatch, files: list[Path]) -> list[str]:
    """The Open dialog answers ``files``; the filters it was given are kept."""
    asked: list[str] = []

    def open_files(parent: Any, title: str, start: str, filters: str) -> tuple[list[str], str]:
        asked.append(filters)
        return [str(f) for f in files], filters

    monkeypatch.setattr(QFileDialog, "getOpenFileNames", open_files)
    return asked


def test_the_serve_forms_image_model_takes_dropped_and_chosen_images(
    qtbot: QtBot, monkeypatch: pytest.MonkeyPatch, image_run: tuple[Path, Path, dict[str, str]]
) -> None:
    run, images, predicted = image_run
    view = ServeView()
    qtbot.addWidget(view)
    view.resize(1000, 700)
    view.show()
    view.set_model(run)
    view.spin_port.setValue(0)
    view.spin_workers.setValue(1)
    with qtbot.waitSignal(view.url_ready, timeout=START_MS):
        view.start()
    try:
        qtbot.waitUntil(lambda: view.button_send.isEnabled(), timeout=30_000)
        pick = view.findChild(QPushButton, "button_serve_pick_images")
        assert pick is not None and view.try_form.takes_images and view.image_answer.isVisible()
        assert pick.focusPolicy() & Qt.FocusPolicy.TabFocus  # reachable by the keyboard

        first = images / "red" / "red3.png"
        with qtbot.waitSignal(view.answered, timeout=30_000) as answer:
            assert drop_files(view.try_form, [first])
        assert answer.args[0].startswith("HTTP 200\nclass: ")
        shown = view.table_serve_top_classes
        assert shown.objectName() == "table_serve_top_classes"
        assert view.image_answer.top_class() == predicted["red/red3.png"]
        assert view.label_serve_image.pixmap() is not None and not view.label_serve_image.pixmap().isNull()
        top = shown.shown()
        assert (
            len(top) == 3
            and top == sorted(top, key=lambda cp: -cp[1])
            and sum(p for _c, p in top) == pytest.approx(1, abs=2e-3)
        )
        assert "base64 -w0" in view.edit_curl.text() and str(first) in view.edit_curl.text()

        chosen = [images / "blue" / "blue1.png", images / "green" / "green5.png"]
        asked = _answer_files(monkeypatch, chosen)
        with qtbot.waitSignal(view.answered, timeout=30_000):
            qtbot.mouseClick(pick, Qt.MouseButton.LeftButton)
        assert "*.png" in asked[0]
        assert view.try_form.images == chosen and view.try_form.list_images is not None
        assert view.image_answer.top_class() == predicted["blue/blue1.png"]
        view.try_form.list_images.setCurrentRow(1)  # the other image sent: its own answer
        assert view.image_answer.top_class() == predicted["green/green5.png"]
        assert view.image_answer.path == chosen[1]
    finally:
        with qtbot.waitSignal(view.stopped, timeout=30_000):
            view.stop()


def test_a_table_models_serve_form_takes_no_images(qtbot: QtBot) -> None:
    """A model of named columns: a field per column, no image button, drops refused."""
    view = ServeView()
    qtbot.addWidget(view)
    number = {"type": "number"}
    spec = {
        "components": {
            "schemas": {
                "PredictRequest": {
                    "oneOf": [
                        {"properties": {"inputs": {"description": "samples"}}},
                        {"properties": {"rows": {"items": {"properties": {"a": number, "b": number}}}}},
                    ]
                }
            }
        }
    }
    view.show_spec(spec)
    assert [name for name, _w in view.fields] == ["a", "b"]
    assert view.findChild(QPushButton, "button_serve_pick_images") is None
    assert not view.image_answer.isVisibleTo(view)
    assert not drop_files(view.try_form, [Path(__file__)])


def test_the_predict_tab_predicts_chosen_and_dropped_images_and_shows_each(
    qtbot: QtBot, monkeypatch: pytest.MonkeyPatch, image_run: tuple[Path, Path, dict[str, str]]
) -> None:
    run, images, predicted = image_run
    view = PredictView()
    qtbot.addWidget(view)
    view.show()
    view.set_model(run)
    qtbot.waitUntil(lambda: view.button_pick_images.isVisible(), timeout=30_000)  # the model takes images
    assert view.button_pick_images.objectName() == "button_predict_pick_images"
    assert view.button_pick_images.focusPolicy() & Qt.FocusPolicy.TabFocus

    chosen = [images / "green" / "green2.png", images / "red" / "red6.png"]
    _answer_files(monkeypatch, chosen)
    with qtbot.waitSignal(view.predicted, timeout=60_000):
        qtbot.mouseClick(view.button_pick_images, Qt.MouseButton.LeftButton)
    assert view.table.model().rowCount() == 2 and view.image_answer.isVisible()
    assert view.image_answer.path == chosen[0]
    assert view.image_answer.top_class() == predicted["green/green2.png"]
    assert view.label_predict_image.pixmap() is not None and not view.label_predict_image.pixmap().isNull()
    view.table.selectRow(1)
    assert view.image_answer.path == chosen[1]
    assert view.table_predict_top_classes.shown()[0][0] == predicted["red/red6.png"]

    with qtbot.waitSignal(view.predicted, timeout=60_000):  # a folder dropped: every image in it
        assert drop_files(view.table.viewport(), [images / "blue"])
    assert view.table.model().rowCount() == 8 and view.edit_input.text() == str(images / "blue")
    view.table.selectRow(4)
    assert view.image_answer.path == images / "blue" / "blue4.png"
    assert view.image_answer.top_class() == predicted["blue/blue4.png"]

    one = images / "red" / "red1.png"
    with qtbot.waitSignal(view.predicted, timeout=60_000):  # one file dropped on the input field
        assert drop_files(view.edit_input, [one])
    assert view.image_answer.path == one and view.image_answer.top_class() == predicted["red/red1.png"]
    assert view.wait()


def test_the_predict_tab_offers_no_image_button_for_a_table_model(qtbot: QtBot, tmp_path: Path) -> None:
    view = PredictView()
    qtbot.addWidget(view)
    view.show()
    view.set_model(make_run(tmp_path / "runs", source="builtin:iris"))
    qtbot.waitUntil(lambda: "Takes 4 columns" in view.label_columns.text(), timeout=30_000)
    assert not view.button_pick_images.isVisible() and not view.image_answer.isVisible()
    assert view.wait()


def test_predict_reads_one_image_file_as_its_folder_does(image_run: tuple[Path, Path, dict[str, str]]) -> None:
    from core.services.predict import predict, predict_images

    run, images, predicted = image_run
    one = predict(run, images / "green" / "green0.png", workers=1)
    assert list(one.ids) == ["green0.png"] and one.predicted == [predicted["green/green0.png"]]
    both = predict_images(run, [images / "green" / "green0.png", images / "red" / "red0.png"])
    assert both.predicted == [predicted["green/green0.png"], predicted["red/red0.png"]]
    assert np.allclose(both.probs[0], one.probs[0], atol=1e-6)  # a batch of 2, a batch of 1: rounding apart


def _turned_photo(path: Path) -> Path:
    """A JPEG stored 48 wide and 24 high, top half red, whose EXIF orientation (6) says it is seen turned a
    quarter clockwise: upright it is 24 wide and 48 high, its red half on the right."""
    pixels = np.zeros((24, 48, 3), dtype=np.uint8)
    pixels[:12] = (220, 30, 30)
    pixels[12:] = (30, 30, 220)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(pixels).save(path, "JPEG", quality=95, exif=exif)
    return path


def _is_upright(pixmap: Any) -> bool:
    """Taller than wide, the red half on the right: the photo as its EXIF orientation says it is seen."""
    image = pixmap.toImage()
    w, h = image.width(), image.height()
    left, right = image.pixelColor(w // 4, h // 2), image.pixelColor(3 * w // 4, h // 2)
    return h > w and right.red() > right.blue() and left.blue() > left.red()


def test_a_turned_photo_is_shown_upright_in_predict_and_in_serves_try_it(
    qtbot: QtBot, monkeypatch: pytest.MonkeyPatch, image_run: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    run, _images, _predicted = image_run
    photo = _turned_photo(tmp_path / "turned.jpg")

    predict = PredictView()
    qtbot.addWidget(predict)
    predict.show()
    predict.set_model(run)
    qtbot.waitUntil(lambda: predict.button_pick_images.isVisible(), timeout=30_000)
    _answer_files(monkeypatch, [photo])
    with qtbot.waitSignal(predict.predicted, timeout=60_000):
        qtbot.mouseClick(predict.button_pick_images, Qt.MouseButton.LeftButton)
    assert predict.image_answer.path == photo and _is_upright(predict.label_predict_image.pixmap())
    assert predict.wait()

    serve = ServeView()  # the try-it form of a server of an image model (none started: the picture alone)
    qtbot.addWidget(serve)
    serve.show()
    image_spec = {"properties": {"images": {"description": "base64 PNG or JPEG files"}}}
    serve.show_spec({"components": {"schemas": {"PredictRequest": {"oneOf": [image_spec]}}}})
    assert serve.try_form.takes_images and serve.try_form.list_images is not None
    serve.try_form.set_images([photo])
    assert serve.image_answer.path == photo and _is_upright(serve.label_serve_image.pixmap())
    icon = serve.try_form.list_images.item(0).icon()
    assert _is_upright(icon.pixmap(icon.availableSizes()[0]))


def test_the_evaluate_tab_shows_a_head_only_runs_mistakes(qtbot: QtBot, tmp_path: Path) -> None:
    """A timm backbone's head trained on its cached features (no image left in its validation split): the
    gallery shows the image files it got wrong, as a run on the images themselves does."""
    from app.views.evaluate import EvaluateView

    rng = np.random.default_rng(1)
    for name in ("a", "b", "c"):  # the same noise in every class: mistakes there must be
        (tmp_path / "photos" / name).mkdir(parents=True)
        for i in range(8):
            Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(
                tmp_path / "photos" / name / f"{i}.png"
            )
    sets = [
        "model.kind=timm:test_resnet.r160_in1k",  # timm's own tiny test network
        "model.finetune=head",
        "model.weights=none",
        f"data.source=images:{tmp_path / 'photos'}",
        "data.image_size=32",
        "train.epochs=1",
    ]
    args = ["train", "--runs-dir", str(tmp_path / "runs"), "--strategy", "single"]
    for s in sets:
        args += ["--set", s]
    done = run_core(*args, env=core_env(HF_HUB_OFFLINE="1"), timeout=300)
    assert done.returncode == 0, done.stderr
    run = Path(done.stdout.strip().splitlines()[-1])

    view = EvaluateView()
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.evaluated, timeout=60_000) as shown:
        view.load_run(run)
    total = shown.args[0]["misclassified_total"]
    assert total > 0
    assert view.list_misclassified.count() == min(48, total)
    icon = view.list_misclassified.item(0).icon()
    assert not icon.isNull() and view.list_misclassified.item(0).text().startswith("true ")

    # an evaluation written before it named the files: the split rebuilt names them
    from core.services.evaluate_run import misclassified_images

    full = shown.args[0]
    assert all(Path(m["path"]).is_file() for m in full["misclassified"])
    unnamed = [{k: v for k, v in m.items() if k != "path"} for m in full["misclassified"]]
    assert len(misclassified_images(run, {**full, "misclassified": unnamed})) == min(48, total)
