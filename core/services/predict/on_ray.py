"""``traindesk predict SOURCE INPUT --on ray``: Ray Data reads the input in blocks, a pool of predictor actors
(``--workers`` of them, one compute thread each) predicts them, and this process writes the same output as
local ``predict``: the same rows, in the same order, the same text.

The blocks: a CSV, Parquet or JSON lines file is read by Ray Data's readers (a CSV with the conversion the
local reader uses); an NPZ is cut into row ranges that each actor reads from the file; an image folder is
a list of files that the actors decode. Each block goes through the very code local ``predict`` runs on a
whole input (the column plan, the schema's encoding, the model's batches), so the answers cannot differ.
The input must be reachable at the same path from every node of the cluster.
"""

from __future__ import annotations

import json
import logging
import math
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import DataError, UserError
from core.readers.inputs import NPZ, input_kind
from core.services.formats import load_predictor, read_model_meta, resolve_model_path
from core.services.formats.predictor import output_names
from core.services.predict.batches import BATCH_ROWS, predict_chunk
from core.services.predict.inputs import CsvPlanner, PredictInput, RowNumbers, read_image_input, reads_table
from core.services.predict.output import Predictions, format_rows

NPZ_BLOCKS_PER_WORKER = 4
READ_CPUS = 0  # a read task takes no CPU of the actors' (each actor one): --workers actors on as many CPUs still read


class BlockPredictor:
    """A Ray Data actor: the model loaded once; each block of the input in, its rows' answers out."""

    def __init__(self, model_path: str, input_path: str, scheme: str, by_position: bool, batch_rows: int) -> None:
        self.predictor = load_predictor(Path(model_path), threads=1)
        self.meta = self.predictor.meta
        self.path = Path(input_path)
        self.scheme = scheme
        self.by_position = by_position
        self.batch_rows = batch_rows
        self._npz: Any = None
        self._images = read_image_input(self.path, self.meta) if scheme == "images" else None

    def __call__(self, block: Any) -> dict[str, np.ndarray]:
        """A block's answers: probabilities, and the ids, true labels and unseen counts its rows carry (an id
        of None: the row is numbered by its place in the input)."""
        inp, unseen = self._input(block)
        n = len(inp)
        probs, _ = predict_chunk(self.predictor, inp, 0, n, self.batch_rows)
        numbered = isinstance(inp.ids, RowNumbers)
        return {
            "probs": probs,
            "id": np.asarray([""] * n if numbered else [str(i) for i in inp.ids], dtype=object),
            "numbered": np.full(n, numbered),
            "label": np.asarray(inp.labels if inp.labels is not None else [None] * n, dtype=object),
            "unseen": np.asarray([json.dumps(unseen)] + [""] * (n - 1) if n else [], dtype=object),
        }

    def _input(self, block: Any) -> tuple[PredictInput, dict[str, int]]:
        shape = tuple(int(s) for s in self.meta["input"]["shape"])
        if self.scheme == "npz":
            lo, hi = int(block["lo"][0]), int(block["hi"][0])
            x = self._npz_rows(lo, hi, shape)
            return PredictInput(RowNumbers(range(lo, hi)), x=x), {}
        if self.scheme == "images":
            assert self._images is not None
            paths = [str(p) for p in block["path"].to_pylist()]
            images = PredictInput(
                [Path(p).relative_to(self.path).as_posix() for p in paths],
                paths=tuple(paths),
                image_shape=self._images.image_shape,
                pixel_scale=self._images.pixel_scale,
            )
            return images, {}
        if reads_table(self.meta):
            from core.schema import Schema
            from core.schema.table import arrow_block_columns
            from core.services.predict.table import table_parts

            schema = Schema.from_json(self.meta["schema"])
            parts, unseen = table_parts(
                self.meta, arrow_block_columns(block, self.scheme, f"predict: {self.path}", schema.missing_values)
            )
            ids = parts["ids"] if parts["ids"] is not None else RowNumbers(range(len(parts["x"])))
            return PredictInput(ids, x=parts["x"], labels=parts["labels"]), unseen
        from core.readers.arrow_file import table_columns

        planner = CsvPlanner(self.path, self.meta, self.by_position)
        data = table_columns(block, self.path, "predict", planner)
        plan = planner.plan
        assert plan is not None
        x = data.x.reshape((data.x.shape[0], *shape))
        ids = data.text[plan.id_col].tolist() if plan.id_col is not None else RowNumbers(range(x.shape[0]))
        labels = [str(v) for v in data.text[plan.label_col].tolist()] if plan.label_col is not None else None
        return PredictInput(ids, x=x, labels=labels), {}

    def _npz_rows(self, lo: int, hi: int, shape: tuple[int, ...]) -> np.ndarray:
        """Rows ``lo``..``hi`` of the NPZ's ``x``: read where the file keeps them uncompressed (as the local
        pool's processes read theirs), else from the whole array, read once per actor."""
        from core.readers import StoredArray, read_npz, stored_npz_x

        if self._npz is None:
            self._npz = stored_npz_x(self.path) or read_npz(self.path, "predict", labels=False).x
        x = self._npz.rows(lo, hi) if isinstance(self._npz, StoredArray) else self._npz[lo:hi]
        return np.asarray(x, dtype=np.float32).reshape((hi - lo, *shape))


# ---------------------------------------------------------------------------- this process


def _dataset(path: Path, scheme: str, meta: dict[str, Any], workers: int, by_position: bool) -> tuple[Any, Any]:
    """The input as a Ray dataset of blocks, and the whole image folder's listing (None for a file)."""
    import ray.data

    if scheme == "images":
        images = read_image_input(path, meta)
        return ray.data.from_items([{"path": p} for p in images.paths]), images
    if scheme == "npz":
        from core.readers import read_npz, stored_npz_x

        stored = stored_npz_x(path)  # its header says how many rows; else the whole read (a compressed file)
        n = stored.shape[0] if stored is not None else int(read_npz(path, "predict", labels=False).x.shape[0])
        step = max(1, math.ceil(n / (workers * NPZ_BLOCKS_PER_WORKER)))
        ranges = [{"lo": lo, "hi": min(lo + step, n)} for lo in range(0, n, step)]
        return ray.data.from_items(ranges), None
    if scheme == "csv":
        from core.readers import Columns
        from core.readers.csv_columns import convert_options, first_record

        header = first_record(path)
        if header is None:
            raise DataError(f"predict: {path} has no header line")
        if reads_table(meta):
            from core.readers.csv_typed import typed_convert_options
            from core.schema import Schema

            convert = typed_convert_options(Schema.from_json(meta["schema"]).missing_values)
        else:
            planner = CsvPlanner(path, meta, by_position)
            cols: Columns = planner([h.strip() for h in header])
            convert = convert_options(header, cols)
        return ray.data.read_csv(str(path), convert_options=convert, num_cpus=READ_CPUS), None
    if scheme == "parquet":
        return ray.data.read_parquet(str(path), num_cpus=READ_CPUS), None
    return ray.data.read_json(str(path), lines=True, num_cpus=READ_CPUS), None


def _actor_cpus(actors: int) -> float:
    """Each actor's CPU share: one (it computes on one thread), less where the cluster has no CPU left
    beside them for Ray Data's own tasks (listing and reading files), which would otherwise wait forever."""
    import ray

    total = float(ray.cluster_resources().get("CPU", 1.0))
    return max(0.1, min(1.0, (total - 1.0) / actors))


def _cause(exc: BaseException) -> BaseException:
    """The error a Ray task raised, out of Ray's wrappers."""
    seen = exc
    for _ in range(8):
        inner = getattr(seen, "cause", None) or seen.__cause__
        if inner is None or inner is seen:
            break
        seen = inner
    return seen


def predict_on_ray(
    model_path: Path,
    input_path: Path,
    workers: int | None = None,
    batch_rows: int = BATCH_ROWS,
    checkpoint: str | None = None,
    by_position: bool = False,
    address: str | None = None,
) -> Predictions:
    """``predict`` on a Ray cluster (``address``, else ``RAY_ADDRESS``, else a Ray of this machine's own):
    the same :class:`Predictions` as local ``predict`` for the same model and input."""
    from core.services.ray_cluster import connected

    t0 = time.perf_counter()
    if workers is not None and workers < 1:
        raise UserError(f"predict: --workers must be at least 1, got {workers}")
    model_path = resolve_model_path(Path(model_path), checkpoint)
    input_path = Path(input_path).expanduser().resolve()
    if not input_path.exists():
        raise DataError(f"predict: input not found: {input_path}")
    meta = read_model_meta(model_path)
    kind = None if input_path.is_dir() else input_kind(input_path)
    scheme = "images" if kind is None else ("npz" if kind is NPZ else kind.name)
    if kind is not None and kind.read is None and kind is not NPZ:
        raise DataError(f"predict: {input_path}: {kind.spelled} is read as a folder")
    actors = workers or 2
    with connected(address, "predict"):
        import ray
        import ray.data

        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True  # the output's rows in the input's order
        ctx.enable_progress_bars = False  # this command's one line says what was done
        ctx.print_on_execution_start = False
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", module="ray.data")  # its advice on block counts, not the user's
        ds, images = _dataset(input_path, scheme, meta, actors, by_position)
        predicted = ds.map_batches(
            BlockPredictor,
            fn_constructor_args=(str(model_path), str(input_path), scheme, by_position, batch_rows),
            batch_format="pyarrow" if scheme in ("csv", "parquet", "jsonl", "images") else "numpy",
            batch_size=None if scheme == "npz" else batch_rows,
            compute=ray.data.ActorPoolStrategy(size=actors),
            num_cpus=_actor_cpus(actors),
        )
        probs: list[np.ndarray] = []
        ids: list[Any] = []
        labels: list[Any] = []
        unseen: dict[str, int] = {}
        try:
            for batch in predicted.iter_batches(batch_size=None, batch_format="numpy"):
                probs.append(np.asarray(batch["probs"], dtype=np.float32).reshape(len(batch["id"]), -1))
                ids.extend(None if numbered else i for i, numbered in zip(batch["id"].tolist(), batch["numbered"]))
                labels.extend(batch["label"].tolist())
                for text in batch["unseen"].tolist():
                    if text:
                        for column, count in json.loads(text).items():
                            unseen[column] = unseen.get(column, 0) + int(count)
        except ray.exceptions.RayError as exc:
            cause = _cause(exc)
            if isinstance(cause, (DataError, UserError)):
                raise type(cause)(str(cause)) from None
            text = " ".join(str(cause).split())
            mark = text.find("predict: ")
            raise UserError(text[mark:][:300] if mark >= 0 else f"predict --on ray: {text[:300]}") from None
    classes = output_names(meta)
    out = np.concatenate(probs) if probs else np.empty((0, len(classes)), np.float32)
    n = len(out)
    row_ids: Any = RowNumbers(range(n)) if all(i is None for i in ids) else ["" if i is None else i for i in ids]
    true: list[str] | None = None
    if images is not None:
        row_ids, true = images.ids, images.labels
    elif scheme == "npz":
        from core.services.predict.inputs import _npz_labels

        true = _npz_labels(input_path, n, meta)
    elif labels and all(v is not None for v in labels):
        true = [str(v) for v in labels]
    notes: tuple[str, ...] = ()
    if unseen:
        from core.schema import Encoded, unseen_note

        notes = (unseen_note(Encoded(np.empty((0, 0), np.float32), unseen, {})),)
    chunks = [format_rows(row_ids, out, classes)] if n else []
    return Predictions(row_ids, classes, out, chunks, model_path, actors, time.perf_counter() - t0, true, notes)


__all__ = ["BlockPredictor", "predict_on_ray"]
