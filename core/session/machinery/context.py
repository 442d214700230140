"""What the pieces of one run share: its state machine, directory, processes, channels, models and data.

The session builds one :class:`RunContext` and hands it to each of its pieces
(health, checkpoints, the end, the collector) with the other pieces each one
calls; they read and change the run through it, under the run's one lock and
state machine, and through the session only what it shows everyone (its
config, strategy, stats, best evaluation, error and control API).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.runfiles.records import log_record
from core.session.machinery.processes import WorkerProcesses
from core.worker.channels import RUN

if TYPE_CHECKING:
    from torch import nn

    from core.data import PreparedData
    from core.session.machinery.recording import RunRecorder
    from core.session.start_point import StartPoint
    from core.session.state import RunState
    from core.worker.channels import Channels

Emit = Callable[[list[dict[str, Any]]], None]


@dataclass
class RunContext:
    """One run's shared state; the session sets what it makes (channels, processes, models, data) as it starts."""

    run: RunState
    recorder: RunRecorder
    start: StartPoint
    emit: Emit  # records to metrics.jsonl, the stats and the listeners
    apply_word: Callable[[], None]  # the workers' control word from what was asked (the run's lock held)
    procs: WorkerProcesses = field(default_factory=lambda: WorkerProcesses([]))
    channels: Channels | None = None
    models: list[nn.Module] = field(default_factory=list)
    data: PreparedData | None = None
    desired: int = RUN  # what the user asked: RUN, PAUSE or STOP
    stop_deadline: float | None = None  # a stop's deadline: then the workers are ended
    t_start: float = 0.0  # unix time the run was announced

    def log(self, level: str, message: str, worker: int | None = None) -> None:
        self.emit([log_record(worker, level, message)])
