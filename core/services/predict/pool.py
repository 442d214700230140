"""The prediction pool: processes that each load the model once, with one compute thread, and predict
whole batches (or read, encode and predict CSV pieces) sent to them; results come back in input order.

A pool process's state (its predictor, or the error loading it met) lives in the one
``PoolProcess`` of that process, set by the pool's initializer.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import UserError
from core.services.formats import load_predictor, runtime
from core.services.formats.predictor import Predictor
from core.services.predict.batches import predict_chunk, predict_piece, predict_table_piece
from core.services.predict.inputs import PredictInput

if TYPE_CHECKING:
    import numpy as np

# what a pool process needs, imported once by the forkserver: a CSV piece parsed and its rows formatted
# (pyarrow alone takes 0.13 s to import), and the model's runtime: onnxruntime for an ONNX graph (torch is
# not imported at all then: 1.3-2.5 s of the pool's start here), torch and the model builders otherwise
PREDICT_PRELOAD = [
    "core.services.predict",
    "core.readers",
    "core.host.lifeline",
    "core.host.machine",
    "pyarrow.csv",
    "pyarrow.compute",
]
RUNTIME_PRELOAD = {
    "onnx": ["onnxruntime"],
    "torch": ["torch", "core.training.models", "core.training.checkpoint", "safetensors.torch"],
}


def predict_preload(model_path: Path) -> list[str]:
    """The modules a pool process for this model imports, preloaded once by the forkserver."""
    return PREDICT_PRELOAD + RUNTIME_PRELOAD[runtime(model_path)]


class PoolProcess:
    """What one pool process holds: the model, loaded once, or why it could not be."""

    def __init__(self) -> None:
        self.predictor: Predictor | None = None
        self.error: BaseException | None = None

    def start(self, model_path: str, parent_pid: int) -> None:
        """Pool process start: one compute thread, the model loaded once for every batch it gets."""
        from core.host.lifeline import die_with_parent
        from core.host.machine import keep_freed_memory

        die_with_parent(parent_pid)
        keep_freed_memory()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent ends us cleanly
        try:
            self.predictor = load_predictor(Path(model_path), threads=1)
        except BaseException as exc:  # reported by the first batch: an initializer error would only break the pool
            self.error = exc

    def ready(self) -> None:
        if self.error is not None:
            raise self.error

    def call(self, start: int, stop: int, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(predictor, *args)``; an unexpected error comes back as one line."""
        self.ready()
        assert self.predictor is not None
        try:
            return fn(self.predictor, *args)
        except UserError:
            raise
        except Exception as exc:  # the parent reports it as one line
            first = (str(exc).splitlines() or [""])[0]
            raise RuntimeError(f"predict: rows {start}-{stop}: {type(exc).__name__}: {first[:200]}") from None


_process = PoolProcess()  # this process's part in a pool (unused outside pool processes)


def _init_worker(model_path: str, parent_pid: int) -> None:
    _process.start(model_path, parent_pid)


def ready() -> None:
    """A pool task that returns once this process has loaded the model (or raises why it could not)."""
    _process.ready()


def predict_task(
    inp: PredictInput, start: int, stop: int, batch_rows: int, stored: Any = None
) -> tuple[np.ndarray, str]:
    """One batch in a pool process; ``inp`` holds just this batch's rows (ids, features or paths), or
    ``stored`` (core.readers.StoredArray) says where in the input file its features are."""
    if stored is not None:
        inp = replace(inp, x=_process.call(start, stop, _stored_rows, stored, start, stop))
    return _process.call(start, stop, predict_chunk, inp, 0, stop - start, batch_rows)


def _stored_rows(predictor: Predictor, stored: Any, start: int, stop: int) -> np.ndarray:
    return stored.rows(start, stop).reshape((stop - start, *predictor.input_shape))


def piece_task(piece: Any, id_col: int | None, label_col: int | None, batch_rows: int) -> Any:
    """One CSV piece in a pool process, parsed there (see ``predict_piece``)."""
    return _process.call(piece.first, piece.first + piece.count, predict_piece, piece, id_col, label_col, batch_rows)


def table_piece_task(piece: Any, typed: Any, batch_rows: int) -> Any:
    """One CSV piece of a table in a pool process, read and encoded there (see ``predict_table_piece``)."""
    return _process.call(piece.first, piece.first + piece.count, predict_table_piece, piece, typed, batch_rows)


@contextlib.contextmanager
def open_pool(model_path: Path, workers: int) -> Iterator[Any]:
    """A pool of ``workers`` processes, each started at once and loading the model while the caller reads."""
    from concurrent.futures import ProcessPoolExecutor

    from core.launchers import local as launcher

    # the forkserver boots with what this model needs alone (inference needs neither torch._dynamo nor, for
    # ONNX, torch), unless a training run of this process started it already; no tensors pass: no torch here
    launcher.warm_up(preload=predict_preload(model_path), tensors=False)
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=launcher.get_context(tensors=False),
        initializer=_init_worker,
        initargs=(str(model_path), os.getpid()),
    )
    try:
        for _ in range(workers):  # a process starts per task submitted while none is idle: all of them now
            pool.submit(ready)
        yield pool
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # a failed batch makes the rest pointless
        raise
    pool.shutdown(wait=True)


def gather_window(
    pool: Any,
    calls: Iterator[tuple[Callable[..., Any], tuple[Any, ...]]],
    bar: Any,
    window: int,
    void: Callable[[], bool] = lambda: False,
    submitted: Callable[[], None] = lambda: None,
) -> Iterator[Any]:
    """The results of ``calls`` run in ``pool``, yielded in their order, at most ``window`` of them in flight
    (the next one is taken only as one is yielded), ``bar`` advanced by each result's rows. A None result
    is yielded last, the rest cancelled; so is None when ``void()`` says so once ``calls`` is used up."""
    from collections import deque
    from concurrent.futures.process import BrokenProcessPool

    pending: deque[Any] = deque()
    calls = iter(calls)
    more = True
    try:
        while True:
            while more and len(pending) < max(1, window):
                call = next(calls, None)
                if call is not None:
                    pending.append(pool.submit(call[0], *call[1]))
                    submitted()
                    continue
                more = False
                if void():
                    yield None
                    return
            if not pending:
                return
            try:
                result = pending.popleft().result()
            except BrokenProcessPool:
                raise RuntimeError("predict: a worker process died (killed, or out of memory?)") from None
            if result is None:
                yield None
                return
            bar.update(len(result[0]))
            yield result
    finally:
        for future in pending:
            future.cancel()
