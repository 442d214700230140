"""Where an input's pieces are predicted, in input order: a pool started at once (``--workers N``), this
process alone, or this process until the work it measured repays a pool (``AutoPool``), which then takes
the rest. Whichever it is, the pieces and so the output are the same."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from core.services.formats import load_predictor
from core.services.formats.predictor import Predictor
from core.services.predict import pool as pools
from core.services.predict.planning import AutoPool


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
    ) -> list[Any] | None:
        """``here(item)`` in this process or ``task(item)``'s call in the pool for each item, results in
        order, ``bar`` advanced by each result's rows; None as soon as one gives None."""
        items = iter(items)
        results: list[Any] = []
        if self.pool is None:
            for item in items:
                began = time.perf_counter()
                result = here(item)
                if result is None:
                    return None
                results.append(result)
                bar.update(len(result[0]))
                if self.auto is not None and self.auto.hand_over(self, len(result[0]), time.perf_counter() - began):
                    break
        if self.pool is None:
            return results
        futures = [self.pool.submit(fn, *args) for fn, args in map(task, items)]
        self._pooled = len(futures)
        rest = pools.gather(futures, bar, void())
        return None if rest is None else results + rest
