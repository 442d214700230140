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
    from sklearn.model_selection import train_test_split

    y = np.asarray(y, dtype=np.int64)
    idx = np.arange(len(y))
    if val_fraction <= 0 or len(y) == 0:
        return idx, idx[:0]
    single = np.bincount(y)[y] < 2
    lone, rest = idx[single], idx[~single]
    train, val = (idx[:0], lone) if int(round(val_fraction)) >= 1 else (lone, idx[:0])
    if len(rest):
        k = len(np.unique(y[rest]))
        n_val = min(max(math.ceil(len(rest) * val_fraction), k), len(rest) - k)
        tr, va = train_test_split(rest, test_size=n_val, random_state=seed, shuffle=True, stratify=y[rest])
        train, val = np.concatenate([train, tr]), np.concatenate([val, va])
    return np.sort(train), np.sort(val)


def random_split(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split without strata (a numeric target): sorted indices of training and validation."""
    idx = np.arange(n)
    if val_fraction <= 0 or n < 2:
        return idx, idx[:0]
    n_val = min(max(1, math.ceil(n * val_fraction)), n - 1)
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])
