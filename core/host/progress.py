"""Progress bars for long CLI work (tqdm): on stderr when it is a terminal, silent for pipes, files and tests."""

from __future__ import annotations

import functools
import sys
from typing import Any


@functools.cache
def _bar_class() -> type:
    from tqdm import tqdm

    class Bar(tqdm):
        # tqdm starts a monitor thread for every bar, shown or not; the window's export and predict
        # run on worker threads and must leave no thread behind
        monitor_interval = 0

    return Bar


def progress(total: int, desc: str, unit: str = "it", **kwargs: Any) -> Any:
    """A tqdm bar on stderr, disabled unless stderr is a terminal; stdout is never touched."""
    kwargs.setdefault("leave", False)
    return _bar_class()(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not sys.stderr.isatty(), **kwargs)


def note(bar: Any, line: str) -> None:
    """Write one line to stderr without breaking a bar that is showing."""
    if bar.disable:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    else:
        bar.write(line, file=sys.stderr)
