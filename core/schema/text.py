"""Free text as hashed n-grams: a fixed number of (bucket, weight) slots per row, never the vocabulary.

A ``text`` column's cells become two sets of hashed n-grams, each by scikit-learn's
:class:`~sklearn.feature_extraction.text.HashingVectorizer` (MurmurHash3, so any
language that has it computes the same buckets):

- words: ``HashingVectorizer(analyzer="word", ngram_range=(1, 2), n_features=WORD_BUCKETS,
  alternate_sign=False, norm=None)``, lower-cased, words of two or more letters;
- characters: the same with ``analyzer="char_wb", ngram_range=(3, 4)`` and ``CHAR_BUCKETS``,
  its buckets numbered after the words' (``+ WORD_BUCKETS``).

Each count becomes ``log(1 + count)``; a row keeps its ``words`` (then ``chars``) largest entries, ties
in bucket order, and each set's kept weights are scaled to unit length. The encoded row holds, per text
column, ``words + chars`` bucket numbers (float32, exact) and then as many weights; an empty or missing
text is all zeros (weight 0 takes no part). The model sums the buckets' learned embeddings by their
weights (``TabularNet``): a linear model of the hashed n-grams, projected to ``TEXT_DIM`` numbers.

How many slots a column has is fitted on the training rows (the 95th percentile of a row's n-grams,
within ``SLOT_RANGE``), so the memory a row takes is bounded whatever the vocabulary. Torch-free; this is
also the reference implementation of the pre-step the exported graphs take (``model.json`` names it).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

WORD_BUCKETS = 1 << 16
CHAR_BUCKETS = 1 << 16
BUCKETS = WORD_BUCKETS + CHAR_BUCKETS
TEXT_DIM = 32  # the width a text column takes in the model after its embedding bag
WORD_SLOTS = (4, 64)  # the fewest and the most word n-grams a row keeps
CHAR_SLOTS = (8, 128)
FIT_SAMPLE = 5_000  # training texts the slot counts are fitted on (a percentile: a sample tells it)
PRE_STEP = "core.schema.text.text_slots"


@functools.cache
def _vectorizers() -> tuple[Any, Any]:
    from sklearn.feature_extraction.text import HashingVectorizer

    words = HashingVectorizer(
        analyzer="word", ngram_range=(1, 2), n_features=WORD_BUCKETS, alternate_sign=False, norm=None
    )
    chars = HashingVectorizer(
        analyzer="char_wb", ngram_range=(3, 4), n_features=CHAR_BUCKETS, alternate_sign=False, norm=None
    )
    return words, chars


def describe_pre_step(words: int, chars: int) -> dict[str, Any]:
    """What a text column's input to an exported graph is: the pre-step, for ``model.json``."""
    return {
        "width": 2 * (words + chars),
        "pre_step": PRE_STEP,
        "layout": f"{words} word and {chars} character n-gram buckets, then their {words + chars} weights",
        "words": f"HashingVectorizer(analyzer='word', ngram_range=(1, 2), n_features={WORD_BUCKETS}, "
        "alternate_sign=False, norm=None)",
        "chars": f"HashingVectorizer(analyzer='char_wb', ngram_range=(3, 4), n_features={CHAR_BUCKETS}, "
        f"alternate_sign=False, norm=None), buckets + {WORD_BUCKETS}",
        "weights": "log(1 + count), the largest kept (ties in bucket order), each set scaled to unit length",
    }


def _texts(values: Any) -> list[str]:
    return ["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in values]


def fit_slots(values: Any) -> tuple[int, int]:
    """(word slots, character slots) for a text column: the 95th percentile of a training text's n-grams."""
    texts = _texts(values)
    if len(texts) > FIT_SAMPLE:
        pick = np.random.default_rng(0).choice(len(texts), FIT_SAMPLE, replace=False)
        texts = [texts[k] for k in np.sort(pick)]
    words, chars = _vectorizers()
    out = []
    for vec, (lo, hi) in ((words, WORD_SLOTS), (chars, CHAR_SLOTS)):
        counts = np.diff(vec.transform(texts).indptr) if texts else np.zeros(1)
        out.append(int(np.clip(np.ceil(np.percentile(counts, 95)), lo, hi)))
    return out[0], out[1]


def _top(matrix: Any, k: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` largest entries of a CSR count matrix: (buckets + offset, unit-length weights). A row
    with more keeps its largest (ties in bucket order); one with fewer keeps them all, in bucket order."""
    matrix.sum_duplicates()
    matrix.sort_indices()
    n = matrix.shape[0]
    counts = np.diff(matrix.indptr)
    rows = np.repeat(np.arange(n), counts)
    weights = np.log1p(matrix.data.astype(np.float64))
    order = np.arange(len(rows))
    crowded = counts[rows] > k
    if crowded.any():  # only the rows that must drop some are sorted by weight
        sub = np.flatnonzero(crowded)
        order[sub] = sub[np.lexsort((matrix.indices[sub], -weights[sub], rows[sub]))]
    rows_o = rows[order]
    pos = np.arange(len(order)) - matrix.indptr[rows_o]
    keep = pos < k
    ids = np.zeros((n, k), dtype=np.float32)
    w = np.zeros((n, k), dtype=np.float32)
    ids[rows_o[keep], pos[keep]] = matrix.indices[order][keep] + offset
    w[rows_o[keep], pos[keep]] = weights[order][keep]
    norm = np.sqrt((w.astype(np.float64) ** 2).sum(axis=1, keepdims=True))
    w /= np.where(norm > 0, norm, 1.0).astype(np.float32)
    return ids, w


def text_slots(values: Any, words: int, chars: int) -> np.ndarray:
    """A text column's encoded block: float32 (rows, 2 * (words + chars)), buckets then weights.

    ``values``: the cells (``str``, ``None`` or NaN for missing); each distinct text is hashed once."""
    from core.schema.coded import Coded

    if isinstance(values, Coded):
        block = text_slots(values.levels, words, chars)
        full = np.zeros((len(block) + 1, block.shape[1]), dtype=np.float32)
        full[:-1] = block
        return full[values.codes]
    texts = _texts(values)
    wv, cv = _vectorizers()
    w_ids, w_w = _top(wv.transform(texts), words, 0)
    c_ids, c_w = _top(cv.transform(texts), chars, WORD_BUCKETS)
    return np.concatenate([w_ids, c_ids, w_w, c_w], axis=1)


def several_words(texts: list[str]) -> bool:
    """Whether distinct texts read as free text: most have three or more words."""
    if not texts:
        return False
    sample = texts[:: max(1, len(texts) // 2000)]
    return sum(len(t.split()) >= 3 for t in sample) * 2 > len(sample)
