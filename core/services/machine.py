"""This machine as a face needs it: the cores a run may use, the memory habit of a long command, and progress
bars on a terminal."""

from __future__ import annotations

from core.host.machine import keep_freed_memory, skip_pandas, usable_cores
from core.host.progress import note, progress

__all__ = ["keep_freed_memory", "note", "progress", "skip_pandas", "usable_cores"]
