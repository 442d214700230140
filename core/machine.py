"""What this machine offers the process, from the standard library alone (no torch import)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The CPUs this process may run on: its affinity (a cgroup-pinned container), else the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
