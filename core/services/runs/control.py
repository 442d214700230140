"""Steering a run another process runs: a command into its control file, and the wait for its answer.

``traindesk pause|resume|stop`` and an attached window do this; the run's collector acknowledges in its log.
"""

from __future__ import annotations

from core.runfiles.control_file import COMMANDS, send, wait_acknowledged

__all__ = ["COMMANDS", "send", "wait_acknowledged"]
