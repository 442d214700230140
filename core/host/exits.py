"""How a process ended, in words: the one reading of an exit code (a negative code is the signal that killed it).

Two phrasings of the same reading: a noun phrase for "worker 1 (pid 42) died: killed by SIGKILL" and a
verb phrase for "model process 1 was killed by SIGKILL". Standard library only: every layer may use it.
"""

from __future__ import annotations

import signal


def signal_name(number: int) -> str:
    """SIGKILL for 9; "signal 99" for a number that names no signal."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_reason(code: int | None) -> str:
    """ "exit code 3", "killed by SIGTERM", or "still running" (no exit code yet)."""
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {signal_name(-code)}"
    return f"exit code {code}"


def exit_clause(code: int | None) -> str:
    """ "exited with code 3", "was killed by SIGTERM", or "ended" (no exit code known)."""
    if code is None:
        return "ended"
    if code < 0:
        return f"was killed by {signal_name(-code)}"
    return f"exited with code {code}"
