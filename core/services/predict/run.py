"""``predict``: an exported model (or a run) on every row of an input, in fixed batches, in this process
or a pool; the output is the same for any worker count, byte for byte."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import UserError
from core.readers.inputs import CSV, NPZ, find_input_kind
from core.services.formats import load_predictor, needs_torch, read_model_meta, resolve_model_path
from core.services.formats.predictor import output_names
from core.services.predict import planning
from core.services.predict import pool as pools
from core.services.predict.batches import BATCH_ROWS, chunk_bounds, predict_chunk, predict_piece
from core.services.predict.inputs import CsvPlanner, PredictInput, RowNumbers, check_shape, read_input, reads_table
from core.services.predict.output import Predictions
from core.services.predict.planning import AutoPool
from core.services.predict.runner import Runner

if TYPE_CHECKING:
    import numpy as np


def predict(
    model_path: Path,
    input_path: Path,
    workers: int | None = None,
    batch_rows: int = BATCH_ROWS,
    checkpoint: str | None = None,
    by_position: bool = False,
) -> Predictions:
    """Predict every row of ``input_path`` with the exported model (or run directory) at ``model_path``.

    ``checkpoint`` picks a run directory's ``best`` or ``last`` checkpoint (None: best once it exists).
    A CSV's columns are the model's features by name; ``by_position`` takes them in order instead (a
    CSV of the same columns under other names: :class:`ColumnNamesDiffer` says so).

    ``workers`` N runs N processes with one compute thread each (N = 1: this
    process, on one thread), which also format their rows and, for a CSV with
    one line per record, parse them (this process only indexes where rows
    start); results are put back in input order, so the output is the same
    for any N. None: this process on one thread, as N = 1, until the rows
    left repay a pool of one process per CPU core (``AutoPool``).
    """
    if workers is not None and (workers < 1 or workers > planning.MAX_WORKERS):
        raise UserError(f"predict: --workers must be from 1 to {planning.MAX_WORKERS}, got {workers}")
    t0 = time.perf_counter()
    model_path = resolve_model_path(Path(model_path), checkpoint)
    input_path = Path(input_path).expanduser()
    automatic = workers is None
    processes = workers or 1
    if automatic:  # this process, and a pool only once the work it measured says a pool repays its start
        cores = planning.worker_limit()
        processes = cores if cores > 1 and planning.looks_large(input_path, batch_rows) else 1
    if processes > 1:  # no more processes than batches (the pool starts before the input is read: an estimate,
        guess = planning.estimated_rows(input_path, processes * batch_rows)  # taken twice over, rows vary)
        processes = processes if guess is None else max(1, min(processes, math.ceil(2 * guess / batch_rows)))
    with contextlib.ExitStack() as stack:
        if processes > 1 and not automatic:
            runner = Runner(model_path, processes, stack)
            runner.start_pool()  # they start loading the model now, while this process reads the input
            meta = read_model_meta(model_path)
        else:
            if needs_torch(model_path):
                stack.enter_context(_compute_threads(1))
            predictor = load_predictor(model_path, threads=1)
            meta = predictor.meta
            rows_guess = planning.estimated_rows(input_path, 1 << 40) if processes > 1 else None
            auto = AutoPool(rows_guess, processes) if rows_guess else None
            if auto is not None:
                stack.callback(auto.close)
            runner = Runner(model_path, processes, stack, predictor, auto=auto)
        rows = None
        if (
            find_input_kind(input_path) is CSV and input_path.is_file() and not reads_table(meta)
        ):  # a table's columns are encoded whole
            rows = _predict_csv_pieces(runner, input_path, meta, batch_rows, by_position)
        if rows is None:
            rows = _predict_input(runner, input_path, meta, batch_rows, by_position)
    import numpy as np

    classes = output_names(meta)
    probs = np.concatenate(rows.probs) if rows.probs else np.empty((0, len(classes)), np.float32)
    return Predictions(
        rows.ids,
        classes,
        probs,
        rows.texts,
        model_path,
        rows.workers,
        time.perf_counter() - t0,
        rows.labels,
        rows.notes,
    )


@dataclass
class _Rows:
    """What the pieces of an input gave, in input order."""

    ids: Sequence[str]
    probs: list[np.ndarray]
    texts: list[str]
    labels: list[str] | None
    workers: int
    notes: tuple[str, ...] = ()


def _predict_input(
    runner: Runner, input_path: Path, meta: dict[str, Any], batch_rows: int, by_position: bool = False
) -> _Rows:
    """Read the whole input here, then predict fixed batches of it (in the pool, or in this process)."""
    inp = read_input(input_path, meta, by_position)
    check_shape(inp, meta, input_path)
    chunks = chunk_bounds(len(inp), batch_rows)
    stored = _stored_x(input_path, inp) if runner.processes > 1 else None  # the processes read their rows of
    # the file, not sent them

    def part(lo: int, hi: int) -> PredictInput:
        return PredictInput(
            inp.ids[lo:hi],
            x=None if inp.x is None or stored else inp.x[lo:hi],
            paths=inp.paths[lo:hi],
            image_shape=inp.image_shape,
            pixel_scale=inp.pixel_scale,
        )

    with _progress(len(inp)) as bar:
        results = runner.run(
            chunks,
            bar,
            here=lambda c: predict_chunk(runner.predictor(), inp, c[0], c[1], batch_rows),
            task=lambda c: (pools.predict_task, (part(*c), c[0], c[1], batch_rows, stored)),
        )
    assert results is not None  # these tasks never give None
    return _Rows(inp.ids, [r[0] for r in results], [r[1] for r in results], inp.labels, runner.used(), inp.notes)


def _predict_csv_pieces(
    runner: Runner, path: Path, meta: dict[str, Any], batch_rows: int, by_position: bool = False
) -> _Rows | None:
    """A CSV with one line per record, cut into pieces of whole batches that are parsed where they are
    predicted, in the pool while this process goes on cutting; None when it must be read whole (quotes,
    blank lines, or a value whose error the whole read reports)."""
    from core.readers import csv_split

    planner = CsvPlanner(path, meta, by_position)
    split = csv_split(path, planner)
    if split is None:
        return None
    plan = planner.plan
    assert plan is not None
    estimate = planning.estimated_rows(path, 0) or 1  # before the scan: it sizes the pieces
    workers = runner.processes
    per_worker = math.ceil(estimate / batch_rows / (workers * planning.PIECES_PER_WORKER))
    step = batch_rows * max(1, min(planning.PIECE_BATCHES, per_worker))  # whole batches: a whole read's batches
    # the last pieces (about TAIL_BATCHES batches per worker) are one batch each: the processes end together
    tail = min(0.5, planning.TAIL_BATCHES * workers * batch_rows / max(estimate, 1)) if workers > 1 else 0.0
    cut = {"tail_rows": batch_rows, "tail_bytes": int(tail * (split.data_end - split.data_start))}
    extra = (plan.id_col, plan.label_col, batch_rows)
    with _progress(estimate) as bar:
        results = runner.run(
            split.pieces(step, **cut),
            bar,
            here=lambda piece: predict_piece(runner.predictor(), piece, *extra),
            task=lambda piece: (pools.piece_task, (piece, *extra)),
            void=lambda: split.whole,
        )
        if split.whole or results is None:
            return None
    ids = [i for r in results for i in r[2]] if plan.id_col is not None else RowNumbers(range(split.n_rows))
    labels = [v for r in results for v in r[3]] if plan.label_col is not None else None
    return _Rows(ids, [r[0] for r in results], [r[1] for r in results], labels, runner.used())


@contextlib.contextmanager
def _compute_threads(threads: int) -> Iterator[None]:
    """Cap torch's compute threads in this process for a while (0: leave them), then put them back."""
    if threads <= 0:
        yield
        return
    import torch

    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _progress(total: int) -> Any:
    from core.host.progress import progress

    return progress(total, "predict", unit="rows", unit_scale=True)


def _stored_x(path: Path, inp: PredictInput) -> Any:
    """Where the input file keeps the features just read, uncompressed (np.savez), or None."""
    if inp.x is None or find_input_kind(path) is not NPZ:
        return None
    from core.readers import stored_npz_x

    stored = stored_npz_x(path)
    if stored is None or stored.shape[0] != len(inp) or math.prod(stored.shape[1:]) != math.prod(inp.x.shape[1:]):
        return None
    return stored
