"""Where an input's pieces are predicted, in input order: a pool started at once (``--workers N``), this
process alone, or this process until the work it measured repays a pool (``AutoPool``), which then takes
the rest. Whichever it is, the pieces and so the output are the same."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from core.services.formats import load_predictor
from core.services.formats.predictor import Predictor
from core.services.predict import pool as pools
from core.services.predict.planning import AutoPool

IN_FLIGHT_PER_PROCESS = 3  # items the pool holds per process: one computing, the next ones queued


class Runner:
    def __init__(
        self,
        model_path: Path,
        processes: int,
        stack: contextlib.ExitStack,
        predictor: Predictor | None = None,
        auto: AutoPool | None = None,
    ) -> None:
        self.model_path = model_path
        self.processes = processes  # what the pieces are cut for
        self._stack = stack
        self._predictor = predictor
        self.auto = auto
        self.pool: Any = None
        self._pooled = 0  # pieces the pool predicted

    def predictor(self) -> Predictor:
        if self._predictor is None:  # the input is one batch after all (a pool was started for more)
            self._predictor = load_predictor(self.model_path)
        return self._predictor

    def start_pool(self) -> Any:
        self.pool = self._stack.enter_context(pools.open_pool(self.model_path, self.processes))
        return self.pool

    def used(self) -> int:
        """The processes that predicted: 1 (this one) or the pool's, at most one per piece it had."""
        return max(1, min(self.processes, self._pooled)) if self._pooled else 1

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

        The pool has at most ``IN_FLIGHT_PER_PROCESS`` items per process in flight: items are cut (read)
        only as results are taken, so what is held does not grow with the input."""
        items = iter(items)
        if self.pool is None:
            for item in items:
                began = time.perf_counter()
                result = here(item)
                if result is None:
                    yield None
                    return
                bar.update(len(result[0]))
                yield result
                if self.auto is not None and self.auto.hand_over(self, len(result[0]), time.perf_counter() - began):
                    break
            else:
                if void():
                    yield None
                return
        yield from pools.gather_window(
            self.pool, map(task, items), bar, IN_FLIGHT_PER_PROCESS * self.processes, void, self._count
        )

    def _count(self) -> None:
        self._pooled += 1
