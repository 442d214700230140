"""Seeded train/validation splits: stratified by class, or at random for a numeric target."""

from __future__ import annotations

import math

import numpy as np


def stratified_split(y: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split keeping each class's share in both parts (sorted indices: training, validation).

    Each part holds at least as many samples as there are classes (sklearn needs
    that to stratify). A class with a single sample cannot be stratified: it
    goes to validation only when ``val_fraction`` rounds to 1, else to training.
    """
    y = np.asarray(y, dtype=np.int64)
    if val_fraction <= 0 or len(y) == 0:
        return np.arange(len(y)), np.arange(0)
    # the smallest types that hold the labels and the row numbers: the same split, in a fraction of the
    # memory (sklearn copies and sorts them several times over)
    y = y.astype(np.min_scalar_type(int(y.max())) if int(y.min()) >= 0 else np.int64)
    idx = np.arange(len(y), dtype=np.int32 if len(y) < 2**31 else np.int64)
    single = np.bincount(y)[y] < 2
    lone, rest = idx[single], idx[~single]
    train, val = (idx[:0], lone) if int(round(val_fraction)) >= 1 else (lone, idx[:0])
    if len(rest):
        k = len(np.unique(y[rest]))
        n_val = min(max(math.ceil(len(rest) * val_fraction), k), len(rest) - k)
        tr, va = _stratified_shuffle(rest, y[rest], n_val, seed)
        train, val = np.concatenate([train, tr]), np.concatenate([val, va])
    return np.sort(train).astype(np.int64), np.sort(val).astype(np.int64)


def _stratified_shuffle(rows: np.ndarray, y: np.ndarray, n_test: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``train_test_split(rows, test_size=n_test, random_state=seed, stratify=y)`` of scikit-learn, draw for
    draw (its StratifiedShuffleSplit), with the indices in arrays: scikit-learn gathers them in Python
    lists, 300 MB for 3 million rows."""
    from sklearn.utils.extmath import _approximate_mode

    classes, y_indices, class_counts = np.unique(y, return_inverse=True, return_counts=True)
    class_indices = np.split(np.argsort(y_indices, kind="stable"), np.cumsum(class_counts)[:-1])
    rng = np.random.RandomState(seed)
    n_i = _approximate_mode(class_counts, len(y) - n_test, rng)
    t_i = _approximate_mode(class_counts - n_i, n_test, rng)
    train, test = [], []
    for i in range(len(classes)):
        picked = class_indices[i].take(rng.permutation(class_counts[i]), mode="clip")
        train.append(picked[: n_i[i]])
        test.append(picked[n_i[i] : n_i[i] + t_i[i]])
    return rows[rng.permutation(np.concatenate(train))], rows[rng.permutation(np.concatenate(test))]


def random_split(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split without strata (a numeric target): sorted indices of training and validation."""
    idx = np.arange(n)
    if val_fraction <= 0 or n < 2:
        return idx, idx[:0]
    n_val = min(max(1, math.ceil(n * val_fraction)), n - 1)
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])
