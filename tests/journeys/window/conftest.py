"""The window tests' setup (tests/app/conftest.py) for the journeys through the window: offscreen Qt, private
settings, and no leftover threads or processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.conftest import (  # fixtures: the window tests' own, for these tests too
    QT_LOG_IGNORE,
    _live_children_fixture,
    _no_leftovers,
    _private_settings,
    make_window,
)

__all__ = ["_live_children_fixture", "_no_leftovers", "_private_settings", "make_window"]

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.qt_log_ignore(*QT_LOG_IGNORE))
