"""The Predict tab follows a long prediction (images done of how many, the rate, the time left), clears the
previous answer while it runs, and Cancel ends it at its next piece."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.views.predict import PredictView
from tests.trained_run import grey_image_folder, make_run

N_IMAGES = 70  # three pieces of at most 32 images


@pytest.fixture(scope="module")
def image_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("predict-progress")
    train = grey_image_folder(root / "train", 8)
    run = make_run(root / "runs", source=f"images:{train}", kind="cnn", steps=10)
    return run, grey_image_folder(root / "predict", N_IMAGES // 2, seed=1)


def _view(qtbot: QtBot, run: Path) -> PredictView:
    view = PredictView()
    qtbot.addWidget(view)
    view.show()
    view.set_model(run)
    return view


def test_the_predict_tab_shows_progress_and_cancels_at_the_next_piece(
    qtbot: QtBot, monkeypatch: pytest.MonkeyPatch, image_run: tuple[Path, Path]
) -> None:
    import core.services.predict.run as predict_run

    run, folder = image_run
    view = _view(qtbot, run)
    view.set_input(folder)
    view.spin_workers.setValue(1)  # the pieces are predicted on the call's thread, where the test holds them
    assert not view.progress.isVisible() and not view.button_cancel.isVisible()
    with qtbot.waitSignal(view.predicted, timeout=60_000):
        view.run()
    assert view.table.model().rowCount() == N_IMAGES

    chunk = predict_run.predict_chunk
    gate, held = threading.Event(), threading.Event()
    pieces = 0

    def second_piece_waits(*args: Any, **kwargs: Any) -> Any:
        nonlocal pieces
        pieces += 1
        if pieces == 2:
            held.set()
            assert gate.wait(60), "the test never let the piece go"
        return chunk(*args, **kwargs)

    monkeypatch.setattr(predict_run, "predict_chunk", second_piece_waits)
    try:
        view.run()
        assert view.table.model().rowCount() == 0  # the previous answer is gone while this one runs
        qtbot.waitUntil(held.is_set, timeout=60_000)
        qtbot.waitUntil(lambda: "32 of 70 images" in view.label_status.text(), timeout=10_000)
        assert "images/s" in view.label_status.text() and "left" in view.label_status.text()
        assert view.progress.isVisible() and view.progress.value() == int(1000 * 32 / 70)
        assert view.button_cancel.isVisible() and not view.button_predict.isEnabled()
        qtbot.mouseClick(view.button_cancel, Qt.MouseButton.LeftButton)
        assert view.label_status.text().startswith("Cancelling…")
    finally:
        gate.set()
    qtbot.waitUntil(lambda: not view.busy, timeout=60_000)
    assert view.label_status.text() == f"Cancelled after 64 of {N_IMAGES} images"
    assert view.table.model().rowCount() == 0 and not view.button_save.isEnabled()
    assert not view.progress.isVisible() and not view.button_cancel.isVisible()
    assert view.button_predict.isEnabled() and pieces == 2  # the third piece was never predicted
    assert view.wait()


def test_another_model_clears_the_previous_answer_and_one_image_reads_as_one(
    qtbot: QtBot, image_run: tuple[Path, Path]
) -> None:
    run, folder = image_run
    view = _view(qtbot, run)
    view.set_input(folder / "dark" / "00.png")
    with qtbot.waitSignal(view.predicted, timeout=60_000):
        view.run()
    assert view.label_status.text().startswith("1 image predicted with ")
    assert view.table.model().rowCount() == 1 and view.button_save.isEnabled()
    view.set_model(run / "checkpoints" / "last.pt")  # another model: its answer is not on screen yet
    assert view.table.model().rowCount() == 0 and not view.button_save.isEnabled()
    assert view.label_status.text() == "" and not view.image_answer.isVisible()
    assert view.wait()
