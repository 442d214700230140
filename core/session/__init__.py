"""The run: one state machine, the worker processes, the record reducer, run recording.

- :mod:`core.session.session`: :class:`Session`, the run itself.
- :mod:`core.session.state`: the state machine (states and transitions).
- :mod:`core.session.stats`: a pure reducer of records into run statistics.
- :mod:`core.session.recording`: run directory, checkpoints, summary.
- :mod:`core.session.processes`: liveness and ending of worker processes.
- :mod:`core.session.receive`: reading record batches that a killed worker may have left half-sent.

``Session`` and ``RecordBuffer`` are imported on first use, so the torch-free
parts (state, stats) load without torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RecordBuffer", "Session"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from core.session import session

        return getattr(session, name)
    raise AttributeError(f"module 'core.session' has no attribute {name!r}")
