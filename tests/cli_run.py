"""The command line as the tests run it: ``python -m core ARGS`` in a child process, with this suite's
interpreter, and (with ``core_env()``) this checkout's ``core`` importable from any folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def core_command(*args: str) -> list[str]:
    """The argument list of ``python -m core ARGS``."""
    return [sys.executable, "-m", "core", *args]


def core_env(**extra: str) -> dict[str, str]:
    """This process's environment with the checkout on PYTHONPATH, and ``extra`` on top."""
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def run_core(
    *args: str, timeout: float, capture_output: bool = True, text: bool = True, check: bool = False, **kwargs: Any
) -> subprocess.CompletedProcess[Any]:
    """``python -m core ARGS`` run to its end, at most ``timeout`` seconds; its stdout and stderr captured as text
    unless told otherwise. The other keywords (env, cwd, ...) go to ``subprocess.run`` as they are."""
    return subprocess.run(
        core_command(*args), capture_output=capture_output, text=text, timeout=timeout, check=check, **kwargs
    )


def start_core(*args: str, **kwargs: Any) -> subprocess.Popen[Any]:
    """``python -m core ARGS`` started and left running; the keywords (pipes, env, cwd, ...) go to
    ``subprocess.Popen`` as they are."""
    return subprocess.Popen(core_command(*args), **kwargs)
