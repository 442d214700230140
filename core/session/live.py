"""Settings a paused run may change (``Session.resume(changes)``): which keys, and what they must respect."""

from __future__ import annotations

from typing import Any

from core.config import LIVE_KEYS, Config, ConfigError
from core.session.start_point import config_value


def live_change(config: Config, changes: dict[str, Any], epochs_done: int) -> tuple[Config, dict[str, Any]]:
    """The config with ``changes`` applied, and what changed (``{key: {"from", "to"}}``, empty if nothing).

    ConfigError (one line naming the key) for a key that cannot change during a run, a bad value,
    or fewer epochs than the run has already done.
    """
    unknown = sorted(set(changes) - set(LIVE_KEYS))
    if unknown:
        raise ConfigError(f"config: {unknown[0]} cannot change during a run; these can: {', '.join(LIVE_KEYS)}")
    new = config.with_changes(changes)
    if new.train.epochs < max(1, epochs_done):
        raise ConfigError(
            f"config: train.epochs must be at least the {epochs_done} epoch(s) already done, got {new.train.epochs}"
        )
    diff = {
        k: {"from": config_value(config, k), "to": config_value(new, k)}
        for k in changes
        if config_value(config, k) != config_value(new, k)
    }
    return new, diff
