"""An evaluation as a picture: the confusion matrix of a classification, predicted against actual of a regression.

The run's TensorBoard files (:mod:`core.runfiles.tensorboard_log`) carry it as an image at the run's end; it is
drawn from eval.json's report (``confusion`` and the class names, or the ``pairs`` of actual and predicted
values) with Pillow alone, as an RGB array of ``uint8`` (height, width, 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

WHITE = (255, 255, 255)
INK = (30, 30, 30)
BLUE = (31, 94, 168)
GRID = (200, 200, 200)
SIZE = 480  # the plot's side in pixels, labels aside
LABEL = 90  # room for the class names or the axes' numbers


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def evaluation_image(full: dict[str, Any]) -> tuple[str, np.ndarray] | None:
    """(what it shows, the picture) of an eval.json report; None when the report holds neither a matrix nor pairs."""
    if full.get("task") == "regression":
        pairs = full.get("pairs") or []
        return ("predicted_vs_actual", predicted_vs_actual(pairs)) if pairs else None
    matrix = full.get("confusion")
    if not matrix:
        return None
    classes = [str(c.get("class", k)) for k, c in enumerate(full.get("per_class") or [])]
    return "confusion_matrix", confusion_image(matrix, classes or [str(k) for k in range(len(matrix))])


def confusion_image(matrix: Sequence[Sequence[int]], classes: Sequence[str]) -> np.ndarray:
    """Rows the true class, columns the predicted one; a cell's shade its share of its row, its count written."""
    counts = np.asarray(matrix, dtype=np.float64)
    n = len(counts)
    cell = max(4, min(60, SIZE // max(n, 1)))
    side = cell * n
    image = Image.new("RGB", (LABEL + max(side + 10, 320), LABEL + side + 30), WHITE)
    draw = ImageDraw.Draw(image)
    small = _font(max(8, min(14, cell // 3)))
    rows = counts.sum(axis=1, keepdims=True)
    share = np.divide(counts, rows, out=np.zeros_like(counts), where=rows > 0)
    for i in range(n):
        for j in range(n):
            x0, y0 = LABEL + j * cell, LABEL + i * cell
            level = float(share[i, j])
            colour = tuple(int(w + (b - w) * level) for w, b in zip(WHITE, BLUE))
            draw.rectangle((x0, y0, x0 + cell - 1, y0 + cell - 1), fill=colour, outline=GRID)
            if cell >= 20:
                text = str(int(counts[i, j]))
                draw.text(
                    (x0 + cell / 2, y0 + cell / 2), text, fill=WHITE if level > 0.5 else INK, font=small, anchor="mm"
                )
    if cell >= 12:
        for k, name in enumerate(classes[:n]):
            short = name if len(name) <= 12 else name[:11] + "…"
            draw.text((LABEL - 4, LABEL + k * cell + cell / 2), short, fill=INK, font=small, anchor="rm")
            top = short[: max(3, cell // 8)]
            draw.text((LABEL + k * cell + cell / 2, LABEL - 4), top, fill=INK, font=small, anchor="md")
    draw.text((LABEL, LABEL + side + 8), "rows: true class, columns: predicted class", fill=INK, font=_font(12))
    return np.asarray(image, dtype=np.uint8)


def predicted_vs_actual(pairs: Sequence[Sequence[float]]) -> np.ndarray:
    """Each (actual, predicted) pair a dot, the line where they agree drawn across."""
    values = np.asarray(pairs, dtype=np.float64).reshape(-1, 2)
    values = values[np.isfinite(values).all(axis=1)]
    lo, hi = (float(values.min()), float(values.max())) if len(values) else (0.0, 1.0)
    if hi <= lo:
        lo, hi = lo - 1.0, hi + 1.0
    image = Image.new("RGB", (LABEL + SIZE + 10, SIZE + LABEL), WHITE)
    draw = ImageDraw.Draw(image)
    font = _font(12)

    def at(actual: float, predicted: float) -> tuple[float, float]:
        return LABEL + (actual - lo) / (hi - lo) * SIZE, SIZE - (predicted - lo) / (hi - lo) * SIZE

    draw.rectangle((LABEL, 0, LABEL + SIZE, SIZE), outline=GRID)
    draw.line((*at(lo, lo), *at(hi, hi)), fill=GRID, width=2)
    for actual, predicted in values:
        x, y = at(actual, predicted)
        draw.ellipse((x - 2, y - 2, x + 2, y + 2), fill=BLUE)
    draw.text((LABEL, SIZE + 6), f"{lo:.4g}", fill=INK, font=font)
    draw.text((LABEL + SIZE, SIZE + 6), f"{hi:.4g}", fill=INK, font=font, anchor="ra")
    draw.text((LABEL + SIZE / 2, SIZE + 30), "actual", fill=INK, font=font, anchor="ma")
    draw.text((LABEL - 6, SIZE), f"{lo:.4g}", fill=INK, font=font, anchor="rs")
    draw.text((LABEL - 6, 0), f"{hi:.4g}", fill=INK, font=font, anchor="rt")
    draw.text((LABEL - 6, SIZE / 2), "predicted", fill=INK, font=font, anchor="rm")
    return np.asarray(image, dtype=np.uint8)
