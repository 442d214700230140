"""Batch prediction with an exported model: ``predict(MODEL, INPUT)`` (the command: ``core.cli.predict``).

MODEL is an export that runs on its own: ``.safetensors`` (core rebuilds the
module from the metadata it carries, or the ``model.json`` beside it), a
``.pt2`` torch.export program or an ``.onnx`` graph (onnxruntime); a ``.pt``
state dict is accepted when a ``model.json`` beside it describes it. MODEL may
also be a run directory (its best or last checkpoint, ``checkpoint``) or a
checkpoint file, rebuilt the way a ``.safetensors`` export is, so the
predictions are those of an export then ``predict``, byte for byte. The
formats themselves are ``core.services.formats``. INPUT is a table of columns (CSV,
Parquet, JSON lines), an NPZ or an image folder with the training features, raw
(unscaled): every predictor standardises with the statistics it carries. The
kinds of input are ``core.readers.INPUT_KINDS``.

The package's parts:

- ``inputs``: reading an input into ids, features (or image paths) and true labels;
- ``table``: an input of a model trained on a table, encoded by its schema;
- ``batches``: fixed batches of rows predicted and formatted, wherever they run;
- ``output``: ``Predictions`` and its CSV text;
- ``planning``: how many processes (the limits, the input's size, ``AutoPool``);
- ``pool``: the pool's processes and the tasks they run; ``runner``: where pieces go;
- ``progress``: how far a prediction has got (``PredictWatch``), and its cancel;
- ``run``: ``predict`` itself.

With ``workers`` N the rows are cut into fixed batches (the same batches
whatever N is) and whole batches go to N processes, this one and a pool of
N - 1, each with one compute thread and the model loaded once (N = 1: this
process, one thread); a CSV with one line per record goes in pieces of whole
batches that the processes parse themselves (a table's: read with the types
of its first piece and encoded there too), and an uncompressed NPZ's rows are
read by the processes from the file. The output is identical for every N,
byte for byte. The pool is forked from a process with no other thread (a
command's), up in milliseconds, and started from the forkserver otherwise.
Without ``workers`` a command forks one process per core at once for a large
input; elsewhere this process predicts as with 1 and starts the others only
when the rate it measured says they repay their start-up. Nothing here imports torch at module level (an ONNX
model never does).
"""

from __future__ import annotations

from core.services.formats import is_run_dir, load_predictor, needs_torch, read_model_meta, resolve_model_path, runtime
from core.services.formats.module import load_state_dict_file, rebuild_module, standardized
from core.services.formats.predictor import Predictor
from core.services.predict.batches import BATCH_ROWS, IMAGE_BATCH_ROWS, chunk_bounds, predict_chunk
from core.services.predict.inputs import ColumnNamesDiffer, PredictInput, RowNumbers, model_image_shape, read_input
from core.services.predict.output import Predictions, csv_header, format_rows
from core.services.predict.planning import MAX_WORKERS, busy_cores, pool_start_s, remember_pool_start, worker_limit
from core.services.predict.pool import predict_preload
from core.services.predict.progress import PredictionCancelled, PredictWatch
from core.services.predict.run import predict, predict_images

__all__ = [
    "BATCH_ROWS",
    "IMAGE_BATCH_ROWS",
    "ColumnNamesDiffer",
    "MAX_WORKERS",
    "PredictInput",
    "PredictWatch",
    "PredictionCancelled",
    "Predictions",
    "Predictor",
    "RowNumbers",
    "busy_cores",
    "chunk_bounds",
    "csv_header",
    "format_rows",
    "is_run_dir",
    "load_predictor",
    "load_state_dict_file",
    "model_image_shape",
    "needs_torch",
    "pool_start_s",
    "predict",
    "predict_chunk",
    "predict_images",
    "predict_preload",
    "read_input",
    "read_model_meta",
    "rebuild_module",
    "remember_pool_start",
    "resolve_model_path",
    "runtime",
    "standardized",
    "worker_limit",
]
