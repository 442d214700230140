"""Launchers: how a run's worker processes come to exist.

- :mod:`core.launchers.local` starts them on this machine from a forkserver
  with torch preloaded (``spawn`` where there is none); the session owns them.
- :mod:`core.launchers.torchrun` is the other way round: PyTorch's own
  launcher (``torchrun``) started this process as one rank of a group.
"""
