"""The habits (pyproject.toml's [tool.ruff] and [tool.mypy]): lint, format and types have no findings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 600


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m ARGS`` from the repository root, with the interpreter (and so the tools) of this suite."""
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


@pytest.mark.timeout(TIMEOUT_S + 60)
@pytest.mark.parametrize(
    "args",
    [("ruff", "check", "."), ("ruff", "format", "--check", "."), ("mypy",)],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_no_findings(args: tuple[str, ...]) -> None:
    res = _run(*args)
    assert res.returncode == 0, f"{' '.join(args)} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
