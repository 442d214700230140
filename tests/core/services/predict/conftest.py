from __future__ import annotations

import pytest

from tests.predict_pools import take_the_pool_once_up


@pytest.fixture(autouse=True)
def _pool_once_up(monkeypatch: pytest.MonkeyPatch) -> None:
    take_the_pool_once_up(monkeypatch)
