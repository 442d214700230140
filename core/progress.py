"""Progress bars for long CLI work (tqdm): on stderr when it is a terminal, silent for pipes, files and tests."""

from __future__ import annotations

import sys
from typing import Any


def progress(total: int, desc: str, unit: str = "it", **kwargs: Any) -> Any:
    """A tqdm bar on stderr, disabled unless stderr is a terminal; stdout is never touched."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False, file=sys.stderr,
                disable=not sys.stderr.isatty(), **kwargs)


def note(bar: Any, line: str) -> None:
    """Write one line to stderr without breaking a bar that is showing."""
    if bar.disable:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    else:
        bar.write(line, file=sys.stderr)
