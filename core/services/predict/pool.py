"""The prediction pool: processes that each load the model once, with one compute thread, and predict
whole batches (or read, encode and predict CSV pieces) sent to them; results come back in input order.

A pool process's state (its predictor, or the error loading it met) lives in the one
``PoolProcess`` of that process, set by the pool's initializer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
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
        from core.host.machine import keep_freed_memory, skip_pandas

        die_with_parent(parent_pid)
        keep_freed_memory()
        skip_pandas()
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


def fork_allowed() -> bool:
    """Whether a pool may start by forking this process (milliseconds, with the imports shared) rather than
    from the forkserver (a fresh interpreter importing them again: 0.3 s with onnxruntime, seconds with
    torch). On Linux, unless TRAINDESK_START_METHOD names another method, and only while this process runs
    no Python thread but this one (a command's process, not the window's): a thread holding a lock at the
    fork would leave it held in the child. The native threads the libraries start on import (OpenBLAS,
    Arrow's allocator, onnxruntime) are idle then and handle a fork themselves."""
    import multiprocessing
    import sys

    forced = os.environ.get("TRAINDESK_START_METHOD")
    return (
        sys.platform.startswith("linux")
        and forced in (None, "", "fork", "forkserver")
        and threading.current_thread() is threading.main_thread()
        and threading.active_count() == 1
        and "fork" in multiprocessing.get_all_start_methods()
    )


@contextlib.contextmanager
def open_pool(model_path: Path, workers: int, fork: bool = False) -> Iterator[Any]:
    """A pool of ``workers`` processes, each started at once and loading the model while the caller reads;
    ``fork`` (only where ``fork_allowed``): forked from this process, which imports what they need first."""
    from concurrent.futures import ProcessPoolExecutor

    if fork:
        import importlib
        import multiprocessing
        import sys

        for name in predict_preload(model_path):  # imported once, here, for this process and the pool
            importlib.import_module(name)
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
            stream.flush()
        ctx: Any = multiprocessing.get_context("fork")
    else:
        from core.launchers import local as launcher

        # the forkserver boots with what this model needs alone (inference needs neither torch._dynamo nor,
        # for ONNX, torch), unless a training run of this process started it already; no tensors pass
        launcher.warm_up(preload=predict_preload(model_path), tensors=False)
        ctx = launcher.get_context(tensors=False)
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(str(model_path), os.getpid())
    )
    try:
        for _ in range(workers):  # a process starts per task submitted while none is idle: all of them now
            pool.submit(ready)  # (forked: all at the first, before the pool's own thread starts)
        yield pool
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # a failed batch makes the rest pointless
        raise
    pool.shutdown(wait=True)


class PoolStart:
    """A pool of ``size`` processes started on a thread, since starting one waits until the forkserver has
    imported its preloads (a third of a second with onnxruntime, seconds with torch): the caller predicts
    meanwhile and takes the pool (``ready``) once every process has loaded the model."""

    def __init__(self, model_path: Path, size: int) -> None:
        self.size = size
        self.seconds = 0.0  # from the start until every process had loaded the model
        self._began = time.perf_counter()
        self._pool: Any = None  # the context manager of the pool, once the thread made it
        self._executor: Any = None
        self._loaded: list[Any] = []
        self._thread = threading.Thread(target=self._start, args=(model_path,), name="traindesk-pool-start")
        self._thread.daemon = True
        self._thread.start()

    def _start(self, model_path: Path) -> None:
        try:
            pool = open_pool(model_path, self.size)
            executor = pool.__enter__()
            self._pool = pool
            self._loaded = [executor.submit(ready) for _ in range(self.size)]  # done once each is up
            self._executor = executor
        except Exception:  # the caller goes on alone
            return

    def ready(self) -> Any:
        """The pool's executor once every process has loaded the model; None before, or when it could not
        start (the caller goes on alone)."""
        if self._thread.is_alive() or self._executor is None or not all(f.done() for f in self._loaded):
            return None
        if not self.seconds:
            self.seconds = time.perf_counter() - self._began
        return self._executor

    def wait(self, timeout: float | None = None) -> Any:
        """Wait until ``ready`` (or the start failed): its answer."""
        self._thread.join(timeout)
        for f in self._loaded:
            with contextlib.suppress(Exception):
                f.result(timeout)
        return self.ready()

    def close(self) -> None:
        """Wait for a pool still starting, and end it (its processes are idle by now)."""
        self._thread.join()
        if self._pool is not None:
            self._pool.__exit__(None, None, None)
            self._pool = self._executor = None
