"""Where an input's pieces are predicted, in input order: this process and a pool of N - 1 processes started
at once (``--workers N``), this process alone, or this process until the work it measured repays a pool
(``AutoPool``), which then shares the rest with it. Whichever it is, the pieces and so the output are the
same."""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from core.services.formats import load_predictor, runtime
from core.services.formats.predictor import Predictor
from core.services.predict import pool as pools
from core.services.predict.planning import AutoPool, remember_pool_start
from core.services.predict.progress import PredictWatch

IN_FLIGHT_PER_PROCESS = 3  # items the pool holds per process: one computing, the next ones queued
HERE_AHEAD = 8  # results this process may hold beyond the pool's items while an earlier one is not back
_END = object()


class Runner:
    def __init__(
        self,
        model_path: Path,
        processes: int,
        stack: contextlib.ExitStack,
        predictor: Predictor | None = None,
        auto: AutoPool | None = None,
        watch: PredictWatch | None = None,
    ) -> None:
        self.model_path = model_path
        self.processes = processes  # what the pieces are cut for: this process and the pool's
        self._stack = stack
        self._predictor = predictor
        self.auto = auto
        self.watch = watch  # what the caller follows (and may cancel) of the rows
        self.starting: pools.PoolStart | None = None
        self.pool: Any = None
        self.pool_size = 0
        self._pooled = 0  # pieces the pool predicted
        self._here = 0  # pieces this process predicted

    def predictor(self) -> Predictor:
        if self._predictor is None:  # a caller that did not set it
            self._predictor = load_predictor(self.model_path, threads=1)
        return self._predictor

    def set_predictor(self, predictor: Predictor) -> None:
        self._predictor = predictor

    def start_pool(self, size: int) -> None:
        """Start the pool of ``size`` other processes now: forked from this process where that is allowed
        (``pool.fork_allowed``: up in milliseconds), else from the forkserver on a thread (``pool.PoolStart``):
        they import and load the model while this process predicts, and share the pieces left once they
        are all up."""
        if pools.fork_allowed():
            self.pool = self._stack.enter_context(pools.open_pool(self.model_path, size, fork=True))
            self.pool_size = size
            return
        starting = pools.PoolStart(self.model_path, size)
        self._stack.callback(starting.close)
        self.starting = starting

    def _take_pool(self) -> bool:
        """Whether the pool started is up now: then it shares the pieces left (and its start-up is kept)."""
        starting = self.starting
        pool = starting.ready() if starting is not None else None
        if starting is None or pool is None:
            return False
        remember_pool_start(runtime(self.model_path), starting.seconds)
        self.pool, self.pool_size = pool, starting.size
        return True

    def used(self) -> int:
        """The processes that predicted: this one if it did, and the pool's (at most one per piece it had)."""
        return max(1, (1 if self._here else 0) + min(self.pool_size, self._pooled))

    def here_threads(self) -> bool:
        """Whether a piece predicted here may read on every core: only while no pool shares the work."""
        return self.pool is None

    def run(
        self,
        items: Iterable[Any],
        bar: Any,
        here: Callable[[Any], Any],
        task: Callable[[Any], tuple[Callable[..., Any], tuple[Any, ...]]],
        void: Callable[[], bool] = lambda: False,
    ) -> Iterator[Any]:
        """``here(item)`` in this process or ``task(item)``'s call in the pool for each item, results yielded
        in order as they come, ``bar`` advanced by each result's rows; a None result (the input must be read
        another way) is yielded last, as is None when ``void()`` says so once the items are all cut.

        The pool has at most ``IN_FLIGHT_PER_PROCESS`` items per process in flight, and this process takes
        the next item itself whenever the pool's are all taken, holding at most ``HERE_AHEAD`` results
        beyond them: items are cut (read) only as results are taken, so what is held does not grow with
        the input, and no process waits for another while items are left."""
        items = iter(items)
        if self.pool is None:
            for item in items:
                began = time.perf_counter()
                result = here(item)
                self._here += 1
                if result is None:
                    yield None
                    return
                bar.update(len(result[0]))
                yield result
                if self.auto is not None:
                    self.auto.measured(self, len(result[0]), time.perf_counter() - began)
                if self._take_pool():
                    break
            else:
                if void():
                    yield None
                return
        yield from self._shared(items, bar, here, task, void)

    def _shared(
        self,
        items: Iterator[Any],
        bar: Any,
        here: Callable[[Any], Any],
        task: Callable[[Any], tuple[Callable[..., Any], tuple[Any, ...]]],
        void: Callable[[], bool],
    ) -> Iterator[Any]:
        """``run``'s items shared by the pool and this process, results in input order."""
        from concurrent.futures.process import BrokenProcessPool

        window = IN_FLIGHT_PER_PROCESS * max(1, self.pool_size)
        pending: deque[Any] = deque()  # a Future of the pool's, or a result of this process's, in input order
        more = True
        took = False  # this process took an item since the pool shares them

        def next_item() -> Any:
            nonlocal more
            item = next(items, _END)
            more = item is not _END
            return item

        try:
            while True:
                target = window if took else self.pool_size  # at first one item for each pool process, then
                # one for this process, then each pool process holds several
                while more and sum(isinstance(p, Future) and not p.done() for p in pending) < target:
                    item = next_item()
                    if item is not _END:
                        fn, args = task(item)
                        pending.append(self.pool.submit(fn, *args))
                        self._pooled += 1
                if not more and void():
                    yield None
                    return
                head_ready = pending and not (isinstance(pending[0], Future) and not pending[0].done())
                if more and (not took or (not head_ready and len(pending) < window + HERE_AHEAD)):
                    took = True
                    item = next_item()
                    if item is not _END:
                        pending.append(_Here(here(item)))
                        self._here += 1
                    continue
                if not pending:
                    return
                head = pending.popleft()
                try:
                    result = head.result()
                except BrokenProcessPool:
                    raise RuntimeError("predict: a worker process died (killed, or out of memory?)") from None
                if result is None:
                    yield None
                    return
                bar.update(len(result[0]))
                yield result
        finally:
            for p in pending:
                if isinstance(p, Future):
                    p.cancel()


class _Here:
    """A result this process predicted, held in input order beside the pool's futures."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value
