"""What a worker runs: a :class:`WorkerLoop`, built from the worker's spec, data, models, channels and strategy.

A strategy names the class of its loop (a :class:`WorkerLoopClass`: mypy checks
both its constructor and what it builds).

The :class:`~core.worker.trainer.Trainer` is the loop of most strategies; a
strategy may name one of its own (the search's
:class:`~core.strategies.trials.TrialRunner`) as its ``loop``.
:func:`core.worker.process.run_worker` builds the strategy's loop, runs it
and reads from it where the worker continues from (its last record).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from core.data import PreparedData
    from core.strategies.base import Strategy
    from core.training.precision import Precision
    from core.training.shared_state import Shared
    from core.worker.channels import Channels, RecordSender
    from core.worker.position import Position
    from core.worker.spec import WorkerSpec


class WorkerLoop(Protocol):
    """A worker's loop: run it; then where to continue from (position, optimizer and precision states)."""

    epochs_done: int
    optimizer: torch.optim.Optimizer
    precision: Precision
    model: Any  # the model the optimizer steps (a trial's, for a search)
    net: Any  # the module the batch goes through (the model, or its DistributedDataParallel wrapper)

    def run(self) -> str:
        """Train until the end, a stop or a failure (raised); the worker's status: finished or stopped."""

    def position(self) -> Position:
        """Where the worker continues from."""

    def exchange_records(self) -> None:
        """The ranks end together: the last records reach rank 0 (nothing where no peers gather)."""


class WorkerLoopClass(Protocol):
    """What builds a worker's loop: a class of them (a strategy's ``loop``), its constructor checked too."""

    def __call__(
        self,
        spec: WorkerSpec,
        data: PreparedData,
        shared: list[Shared],
        ch: Channels,
        out: RecordSender,
        strategy: Strategy,
    ) -> WorkerLoop: ...
