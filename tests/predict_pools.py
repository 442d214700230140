"""Prediction pools in tests: the pool a run starts takes its share at its next piece, whichever way it starts.

A pool forked from a thread-free process is up at once; one started from the forkserver (a test process
other tests left threads in, the window) comes up while this process predicts, and a small input may be
done before it is. Tests that count the processes that predicted make this process wait for the pool
at its next piece instead, so the count does not depend on the machine's speed.
"""

from __future__ import annotations

import pytest


def take_the_pool_once_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.services.predict.runner import Runner

    take = Runner._take_pool

    def once_up(self: Runner) -> bool:
        if self.starting is not None:
            self.starting.wait(120)
        return take(self)

    monkeypatch.setattr(Runner, "_take_pool", once_up)
