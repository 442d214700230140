"""The inputs a model answers, as a face offers them: the kinds of file (tables, arrays, image folders) with their
suffixes and an Open dialog's filters, the words a table's yes/no column takes, and an image file as a face shows
it (:func:`preview_image`: oriented as every model reads it). No torch."""

from __future__ import annotations

from core.readers.images import ImageError, preview_image
from core.readers.inputs import IMAGE_SUFFIXES, INPUT_FILTERS, INPUT_KINDS
from core.schema import FALSE_WORDS, TRUE_WORDS

__all__ = [
    "FALSE_WORDS",
    "IMAGE_SUFFIXES",
    "INPUT_FILTERS",
    "INPUT_KINDS",
    "TRUE_WORDS",
    "ImageError",
    "preview_image",
]
