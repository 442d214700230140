"""The run: one state machine, the worker processes, the record reducer, run recording.

- :mod:`core.session.session`: :class:`Session`, the run's lifecycle and control API.
- :mod:`core.session.handle`: :class:`RunHandle`, the face Session and AttachedSession share.
- :mod:`core.session.attached`: :class:`AttachedSession`, following another process's run.
- :mod:`core.session.start_point`: where a run starts (fresh, resumed, forked).
- :mod:`core.session.machinery.context`: :class:`RunContext`, what the run's pieces share.
- :mod:`core.session.machinery.facts`: :class:`RunFacts`, what the session shows that its pieces learn.
- :mod:`core.session.machinery.collector`: the collector thread (records in, reactions out).
- :mod:`core.session.machinery.checkpoints`: the consistent-checkpoint protocol.
- :mod:`core.session.machinery.health`: dead, stalled and unreadable workers.
- :mod:`core.session.machinery.ending`: the final checkpoint, summary and evaluation.
- :mod:`core.session.live`: what a paused run may change.
- :mod:`core.session.state`: the state machine (states and transitions).
- :mod:`core.session.reading.stats`: a pure reducer of records into run statistics.
- :mod:`core.session.machinery.recording`: run directory, checkpoints, summary.
- :mod:`core.session.machinery.processes`: liveness and ending of worker processes.
- :mod:`core.session.machinery.receive`: reading record batches that a killed worker may have left half-sent.
- :mod:`core.session.machinery.buffer`: :class:`RecordBuffer`, records from the run's thread to a consumer's.

``Session``, ``AttachedSession`` and ``RecordBuffer`` are imported on first use, so the torch-free
parts (state, stats) load without torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AttachedSession", "RecordBuffer", "Session"]


def __getattr__(name: str) -> Any:
    """The heavy classes, imported when first asked for (each by its import, so the import contracts see it)."""
    if name == "Session":
        from core.session.session import Session

        return Session
    if name == "AttachedSession":
        from core.session.attached import AttachedSession

        return AttachedSession
    if name == "RecordBuffer":
        from core.session.machinery.buffer import RecordBuffer

        return RecordBuffer
    raise AttributeError(f"module 'core.session' has no attribute {name!r}")
