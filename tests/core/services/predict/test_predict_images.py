"""An image folder is predicted a small batch at a time (what a process holds does not grow with the folder),
followed by a watch that counts the images, and cancelled at its next piece with its processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.services.predict import IMAGE_BATCH_ROWS, PredictInput, PredictionCancelled, PredictWatch, predict
from tests.trained_run import grey_image_folder, make_run

N_IMAGES = 70  # three batches: two whole and one short


@pytest.fixture(scope="module")
def image_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A cnn trained on a folder of small grey images in two classes, and a folder of 70 to predict."""
    root = tmp_path_factory.mktemp("images")
    train = grey_image_folder(root / "train", 10, seed=1)
    run = make_run(root / "runs", source=f"images:{train}", kind="cnn", steps=20)
    return run, grey_image_folder(root / "predict", N_IMAGES // 2, seed=2)


def test_an_image_folder_is_predicted_a_small_batch_at_a_time_and_counted(
    image_run: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run, folder = image_run
    batches: list[int] = []
    rows = PredictInput.rows

    def counted(self: PredictInput, start: int, stop: int, shape: Any) -> np.ndarray:
        batches.append(stop - start)
        return rows(self, start, stop, shape)

    monkeypatch.setattr(PredictInput, "rows", counted)
    watch = PredictWatch()
    res = predict(run, folder, workers=1, watch=watch)
    assert len(res.ids) == N_IMAGES and res.predicted.count("dark") == N_IMAGES // 2
    assert batches == [IMAGE_BATCH_ROWS, IMAGE_BATCH_ROWS, N_IMAGES - 2 * IMAGE_BATCH_ROWS]
    assert (watch.done, watch.total, watch.unit) == (N_IMAGES, N_IMAGES, "images")
    assert watch.describe().startswith(f"{N_IMAGES} of {N_IMAGES} images")


def test_a_cancelled_prediction_ends_at_its_next_piece_and_leaves_no_process(image_run: tuple[Path, Path]) -> None:
    import psutil

    run, folder = image_run

    class CancelAtFirst(PredictWatch):
        def advance(self, n: int) -> None:
            self.cancel()  # as the window's Cancel does, from its thread, once a piece is back
            super().advance(n)

    def children() -> set[int]:  # but the forkserver and the resource tracker, which stay for the next pool
        kept = ("forkserver", "resource_tracker")
        return {
            p.pid
            for p in psutil.Process().children(recursive=True)
            if not any(k in " ".join(p.cmdline()) for k in kept)
        }

    before = children()  # what other tests of this process left running (a server's, a tracker's)
    watch = CancelAtFirst()
    with pytest.raises(PredictionCancelled, match=f"cancelled after {IMAGE_BATCH_ROWS} of {N_IMAGES} images"):
        predict(run, folder, workers=2, watch=watch)
    assert children() - before == set()  # the pool was shut down with it


def test_a_serve_worker_runs_a_gathered_batch_of_images_a_small_batch_at_a_time() -> None:
    from core.services.serve.worker import _probabilities

    class Recording:
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def probabilities(self, x: np.ndarray) -> np.ndarray:
            self.sizes.append(len(x))
            return np.full((len(x), 2), 0.5, np.float64)

    images, rows = Recording(), Recording()
    out = _probabilities(images, np.zeros((70, 3, 4, 4), np.float32))
    assert images.sizes == [IMAGE_BATCH_ROWS, IMAGE_BATCH_ROWS, 6] and out.shape == (70, 2)
    assert out.dtype == np.float32
    _probabilities(rows, np.zeros((70, 5), np.float32))
    assert rows.sizes == [70]  # a table's rows: one call, as before
