"""The inputs a model answers, as a face offers them: the kinds of file (tables, arrays, image folders) with their
suffixes and an Open dialog's filters, and the words a table's yes/no column takes. Constants: no torch."""

from __future__ import annotations

from core.readers.inputs import IMAGE_SUFFIXES, INPUT_FILTERS, INPUT_KINDS
from core.schema import FALSE_WORDS, TRUE_WORDS

__all__ = ["FALSE_WORDS", "IMAGE_SUFFIXES", "INPUT_FILTERS", "INPUT_KINDS", "TRUE_WORDS"]
