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
    lone_class = np.bincount(y) < 2
    if lone_class.any():
        single = lone_class[y]
        lone, rest = idx[single], idx[~single]
    else:  # every class has company: no mask per row
        lone, rest = idx[:0], idx
    train, val = (idx[:0], lone) if int(round(val_fraction)) >= 1 else (lone, idx[:0])
    if len(rest):
        y_rest = y if len(rest) == len(y) else y[rest]
        k = len(np.unique(y_rest))
        n_val = min(max(math.ceil(len(rest) * val_fraction), k), len(rest) - k)
        tr, va = _stratified_shuffle(rest, y_rest, n_val, seed)
        del rest, y_rest
        train, val = np.concatenate([train, tr]), np.concatenate([val, va])
        del tr, va
    return np.sort(train).astype(np.int64), np.sort(val).astype(np.int64)


def _stratified_shuffle(rows: np.ndarray, y: np.ndarray, n_test: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``train_test_split(rows, test_size=n_test, random_state=seed, stratify=y)`` of scikit-learn, draw for
    draw (its StratifiedShuffleSplit), with the indices in arrays of ``rows``'s type: scikit-learn gathers
    them in Python lists, 300 MB for 3 million rows, and importing it (with scipy) kept 100 MB in the
    loading process."""
    classes, y_indices, class_counts = np.unique(y, return_inverse=True, return_counts=True)
    codes = y_indices.astype(np.min_scalar_type(len(classes)))
    del y_indices
    by_class = np.argsort(codes, kind="stable").astype(rows.dtype)  # positions, grouped by class
    del codes
    class_indices = np.split(by_class, np.cumsum(class_counts)[:-1])
    rng = np.random.RandomState(seed)
    n_i = _apportioned(class_counts, len(y) - n_test, rng)
    t_i = _apportioned(class_counts - n_i, n_test, rng)
    train, test = [], []
    for i in range(len(classes)):
        picked = class_indices[i].take(rng.permutation(class_counts[i]), mode="clip")
        train.append(picked[: n_i[i]])
        test.append(picked[n_i[i] : n_i[i] + t_i[i]])
    del class_indices, by_class
    train_rows = rows[rng.permutation(np.concatenate(train))]
    del train
    return train_rows, rows[rng.permutation(np.concatenate(test))]


def _apportioned(counts: np.ndarray, draws: int, rng: np.random.RandomState) -> np.ndarray:
    """``draws`` shared out among classes of ``counts`` in proportion (the largest remainders get the seats
    left, ties broken by ``rng``), drawing from ``rng`` as scikit-learn's stratified splits do."""
    share = counts / counts.sum() * draws
    seats = np.floor(share)
    left = int(draws - seats.sum())
    remainder = share - seats
    for value in np.unique(remainder)[::-1] if left > 0 else ():  # the largest remainders first
        tied = np.flatnonzero(remainder == value)
        take = min(len(tied), left)
        seats[rng.choice(tied, size=take, replace=False)] += 1
        left -= take
        if left == 0:
            break
    return seats.astype(int)


def random_split(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split without strata (a numeric target): sorted indices of training and validation."""
    idx = np.arange(n)
    if val_fraction <= 0 or n < 2:
        return idx, idx[:0]
    n_val = min(max(1, math.ceil(n * val_fraction)), n - 1)
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])
