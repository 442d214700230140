"""Classification scores: scikit-learn's figures, computed without importing it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from core.training.scores import _sklearn_scores, classification_scores, label_scores


@pytest.mark.parametrize("seed", range(8))
def test_classification_scores_are_scikit_learns(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 13))
    n = int(rng.integers(1, 400))
    # some classes never true, some never predicted: the zero divisions
    y_true = rng.choice(rng.permutation(k)[: max(1, k - 2)], n)
    y_pred = np.where(rng.random(n) < 0.6, y_true, rng.choice(rng.permutation(k)[: max(1, k - 3)], n))
    classes = [f"c{j}" for j in range(k)]
    assert classification_scores(y_true, y_pred, classes) == _sklearn_scores(y_true, y_pred, classes)


def test_values_that_index_no_class_count_as_scikit_learn_counts_them() -> None:
    got = classification_scores([0, 1, 5, 1], [0, 1, 1, -1], ["a", "b"])
    assert got == _sklearn_scores(np.array([0, 1, 5, 1]), np.array([0, 1, 1, -1]), ["a", "b"])
    assert got["n"] == 4 and got["confusion"] == [[1, 0], [0, 1]]


def test_scores_leave_scikit_learn_unimported() -> None:
    """A run's evaluation scores its classes at its end: scikit-learn and scipy held ~100 MB there."""
    code = (
        "import sys\n"
        "from core.training.scores import classification_scores, label_scores\n"
        "classification_scores([0, 1, 1, 2], [0, 1, 2, 2], ['a', 'b', 'c'])\n"
        "label_scores(['a', 'b', 'x'], ['a', 'a', 'b'], ['a', 'b'])\n"
        "print('sklearn' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_label_scores_add_unknown_true_classes() -> None:
    got = label_scores(["a", "b", "x"], ["a", "a", "b"], ["a", "b"])
    assert [c["class"] for c in got["per_class"]] == ["a", "b", "x"]
    assert got["confusion"] == [[1, 0, 0], [1, 0, 0], [0, 1, 0]]
