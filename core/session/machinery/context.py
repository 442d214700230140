"""What the pieces of one run share: its state machine, directory, processes, channels, models and data.

The session builds one :class:`RunContext` and hands it to each of its pieces
(health, checkpoints, the end, the collector) with the other pieces each one
calls; they read and change the run through it, under the run's one lock and
state machine. What they learn of the run that the session shows (its best
evaluation, why it stopped early, its error and summary, the config of the
model it hands on) they write into the context's
:class:`~core.session.machinery.facts.RunFacts`, never into the session; of
the session they read what it shows everyone (its config, strategy, stats,
data facts) and call its control API.
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
    from core.session.machinery.facts import RunFacts
    from core.session.machinery.recording import RunRecorder
    from core.session.start_point import StartPoint
    from core.session.state import RunState
    from core.worker.channels import Channels

Emit = Callable[[list[dict[str, Any]]], None]


@dataclass
class RunContext:
    """One run's shared state; the session sets what it makes (channels, processes, models, data) as it starts."""

    run: RunState
    facts: RunFacts  # what the session shows of the run: the pieces write it here
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
