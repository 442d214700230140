"""This machine as a face needs it: the cores a run may use, the memory habit of a long command, and progress
bars on a terminal, the devices it can train on."""

from __future__ import annotations

from core.host.machine import (
    drop_cuda_library_pages,
    keep_freed_memory,
    skip_pandas,
    trim_freed_memory,
    usable_cores,
)
from core.host.progress import note, progress

__all__ = [
    "available_devices",
    "drop_cuda_library_pages",
    "keep_freed_memory",
    "note",
    "progress",
    "skip_pandas",
    "trim_freed_memory",
    "usable_cores",
]


def available_devices() -> list[str]:
    """The devices this machine can train on ("cpu", "cuda", "cuda:N", "mps"). It imports torch (seconds, the
    first time), which this module does not: a window asks it off its GUI thread."""
    from core.host.devices import available_devices as devices

    return devices()
