"""Launchers: how a run's worker processes come to exist.

- :mod:`core.launchers.local` starts them on this machine from a forkserver
  with torch preloaded (``spawn`` where there is none); the session owns them.
- :mod:`core.launchers.torchrun` is the other way round: PyTorch's own
  launcher (``torchrun``) started this process as one rank of a group.
- :mod:`core.launchers.base`: the ``Launcher`` protocol both satisfy, and
  ``WorkerHandle``, what the session holds of each worker they start.
"""

from __future__ import annotations

import os


def under_torchrun() -> bool:
    """Whether torchrun started this process as one rank of a group (known without importing torch)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"))
