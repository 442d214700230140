"""Consistent checkpoints of a live run: ask every worker for its part, write once all have answered.

A checkpoint holds one point of the run: the session raises the control word
to CHECKPOINT with a request id; each worker stops at its next batch
boundary, publishes its weights and sends its position and optimizer and RNG
states (a ``_snapshot`` record); once every live worker has answered (or
ended), the shared weights hold still, the session copies them and the
workers go on. A worker that does not answer within ``CHECKPOINT_TIMEOUT_S``
makes the session give that checkpoint up. Checkpoints are also asked every
``train.checkpoint_every`` seconds and written at the run's start and end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from core.runfiles.records import SNAPSHOT
from core.session.machinery.recording import checkpoint_payload, weights_finite
from core.worker.position import Position

if TYPE_CHECKING:
    from core.session.machinery.context import RunContext
    from core.session.reading.stats import RunStats
    from core.session.session import Session
    from core.strategies.base import Strategy

CHECKPOINT_TIMEOUT_S = 60.0  # a worker that does not answer a checkpoint request this long: give up on it


def result_model(strategy: Strategy, stats: RunStats) -> int:
    """The index of the model that is the run's result (the best one for a sweep)."""
    return strategy.model_index(strategy.result_worker(stats.last_eval))


@dataclass
class _Request:
    """A checkpoint being taken: which workers still have to send their part."""

    id: int
    waiting: set[int]
    parts: dict[int, dict[str, Any]] = field(default_factory=dict)
    since: float = field(default_factory=time.monotonic)


class CheckpointCoordinator:
    """The checkpoint protocol of one session (its collector thread and its control API call in)."""

    def __init__(self, session: Session, ctx: RunContext) -> None:
        self.session = session
        self.ctx = ctx
        self._request: _Request | None = None
        self._ids = 0
        self._last = time.monotonic()

    @property
    def pending(self) -> bool:
        """A checkpoint is being taken: the workers' control word says CHECKPOINT."""
        return self._request is not None

    def schedule(self) -> None:
        """Give up a request nobody answers; ask for the next one every ``train.checkpoint_every`` s."""
        s, ctx, now, request = self.session, self.ctx, time.monotonic(), self._request
        if request is not None:
            if now - request.since > CHECKPOINT_TIMEOUT_S:
                with ctx.run.lock:
                    self._request = None
                    ctx.apply_word()
                ctx.log(
                    "warning",
                    f"checkpoint skipped: worker(s) {sorted(request.waiting)} did not answer "
                    f"within {CHECKPOINT_TIMEOUT_S:g} s",
                )
            return
        every = s.config.train.checkpoint_every
        if every and now - self._last >= every:
            with ctx.run.lock:
                if ctx.run.value == "running":
                    self.request()

    def request(self) -> bool:
        """Ask every live worker for its part (the run's lock held); False when none can be asked now."""
        s, ctx = self.session, self.ctx
        if self._request is not None or ctx.channels is None or ctx.run.value not in ("running", "paused"):
            return False
        waiting = {r for r in range(s.num_workers) if r not in s.stats.done}
        if not waiting:
            return False
        self._ids += 1
        self._request = _Request(self._ids, waiting)
        ctx.channels.request.value = self._ids
        ctx.apply_word()
        return True

    def on_part(self, rec: dict[str, Any]) -> None:
        """A worker's ``_snapshot`` (or its last record, which also holds where it ended)."""
        request = self._request
        if request is None or (rec["kind"] == SNAPSHOT and rec["request"] != request.id):
            return  # an answer to a request given up on
        request.waiting.discard(rec["worker"])
        request.parts[rec["worker"]] = rec
        if request.waiting:
            return
        # every worker waits at a batch boundary (or has ended): the shared weights hold still
        s = self.session
        states = self.clone_states()
        with self.ctx.run.lock:
            self._request = None
            self.ctx.apply_word()
        self._last = time.monotonic()
        parts = [request.parts.get(r) or s.stats.done.get(r) or {} for r in range(s.num_workers)]
        if all(Position.holds(p) for p in parts):
            self.write(parts, states)

    def clone_states(self) -> list[dict[str, torch.Tensor]]:
        return [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in self.ctx.models]

    def write_start(self) -> bool:
        """The checkpoint a run that fails before its first one restarts from: where it starts."""
        n, start = self.session.num_workers, self.ctx.start
        parts = []
        for rank in range(n):
            optimizer, rng = start.states(rank, n)
            precision = start.precision_state(rank)
            parts.append({**start.position(rank).as_dict(), "optimizer": optimizer, "rng": rng, "precision": precision})
        return self.write(parts)

    def write(self, parts: list[dict[str, Any]], states: list[dict[str, torch.Tensor]] | None = None) -> bool:
        """The run's last checkpoint from each worker's part (position, optimizer, RNG and precision states) and the
        weights."""
        s = self.session
        assert s.info is not None
        states = states if states is not None else self.clone_states()
        if not weights_finite(states):
            self.ctx.log("error", "weights are not finite: the last checkpoint was kept as it was")
            return False
        lrs = [s.strategy.worker_lr(r) for r in range(s.num_workers)]
        payload = checkpoint_payload(s.config, s.info.as_dict(), states, result_model(s.strategy, s.stats), parts, lrs)
        self.ctx.recorder.checkpoint(payload)
        return True
