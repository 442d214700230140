"""Predicting a stretch of rows, wherever it runs (this process or a pool process): fixed batches in,
probabilities and their CSV lines out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.services.formats.predictor import Predictor
from core.services.predict.inputs import PredictInput, RowNumbers
from core.services.predict.output import format_rows

if TYPE_CHECKING:
    import numpy as np

BATCH_ROWS = 2048  # fixed batch boundaries: results do not depend on --workers
# images a batch decodes and runs at once: a backbone's activations at 224 px are ~15 MB an image, so a batch
# of 2048 held gigabytes; 32 keeps a process at one small batch and still feeds its one compute thread whole
IMAGE_BATCH_ROWS = 32


def chunk_bounds(n_rows: int, batch_rows: int = BATCH_ROWS) -> list[tuple[int, int]]:
    """Fixed row ranges of one batch each: the same whatever the worker count, so the output is too."""
    return [(lo, min(lo + batch_rows, n_rows)) for lo in range(0, n_rows, batch_rows)]


def predict_chunk(
    predictor: Predictor, inp: PredictInput, start: int, stop: int, batch_rows: int = BATCH_ROWS
) -> tuple[np.ndarray, str]:
    """Probabilities and CSV lines for rows ``start:stop``, in batches of ``batch_rows`` from ``start``."""
    import numpy as np

    out = np.empty((stop - start, len(predictor.classes)), dtype=np.float32)
    for b in range(start, stop, batch_rows):
        e = min(b + batch_rows, stop)
        out[b - start : e - start] = predictor.probabilities(inp.rows(b, e, predictor.input_shape))
    return out, format_rows(inp.ids[start:stop], out, predictor.classes)


def predict_piece(
    predictor: Predictor, piece: Any, id_col: int | None, label_col: int | None, batch_rows: int
) -> tuple[np.ndarray, str, list[str], list[str]] | None:
    """Parse one CSV piece (core.readers.CsvRows) on this thread and predict it: probabilities, CSV lines,
    the id column's values and the true labels (empty when the CSV has none); None if it needs the whole read."""
    from core.readers import read_csv_rows

    table = read_csv_rows(piece)
    if table is None:
        return None
    rows = range(piece.first, piece.first + piece.count)
    own_ids: list[str] = table.text[id_col].tolist() if id_col is not None else []
    inp = PredictInput(
        own_ids if id_col is not None else RowNumbers(rows), x=table.x.reshape((piece.count, *predictor.input_shape))
    )
    probs, text = predict_chunk(predictor, inp, 0, piece.count, batch_rows)
    labels = [str(v) for v in table.text[label_col].tolist()] if label_col is not None else []
    return probs, text, own_ids, labels


def predict_table_piece(
    predictor: Predictor, piece: Any, typed: Any, batch_rows: int, threads: bool = False
) -> tuple[np.ndarray, str, list[str] | None, list[str] | None, dict[str, int]] | None:
    """Read one CSV piece (core.readers.CsvRows) of a table with its first piece's types (``typed``), encode
    it by the model's schema and predict it, on this thread (``threads``: reading and encoding on every
    core, the model on its own threads as ever): probabilities, CSV lines, the id column's
    values and the true labels (None when the table has none) and the unseen category values by column;
    None when the table must be read by blocks."""
    from pathlib import Path

    from core.schema import Schema, table_piece
    from core.services.predict.table import table_parts

    schema = Schema.from_json(predictor.meta["schema"])
    table = table_piece(Path(piece.path), piece.start, piece.stop, typed, "predict", (schema.target, "id"), threads)
    if table is None or table.n_rows != piece.count:  # a blank line (skipped), or the file changed
        return None
    parts, unseen = table_parts(predictor.meta, table, row0=piece.first, threads=None if threads else 1)
    ids = parts["ids"]
    inp = PredictInput(RowNumbers(range(piece.first, piece.first + piece.count)) if ids is None else ids, x=parts["x"])
    probs, text = predict_chunk(predictor, inp, 0, piece.count, batch_rows)
    return probs, text, ids, parts["labels"], unseen
