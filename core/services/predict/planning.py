"""How many processes predict an input: the limits, the input's size judged without reading it, and
the automatic choice (``AutoPool``) with the pool start-up it measured, kept in the user's cache.

Without ``--workers`` a command whose pool forks (``pool.fork_allowed``) starts one process per core at
once for a large input. Elsewhere this process predicts and measures its rate; when the rows left would
take long enough that a pool of the other cores saves ``AUTO_REPAY`` times its start-up (as last
measured on this machine) and the other cores are not busy, the pool starts on a thread and shares
the rest once every process has loaded the model. So a pool is never waited for, and a small
input never starts one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.services.formats import runtime

if TYPE_CHECKING:
    from core.services.predict.runner import Runner

MAX_WORKERS = 256
AUTO_POOL_BATCHES = 16  # an automatic worker count considers a pool from this many batches of rows on
AUTO_POOL_IMAGE_BATCHES = 2  # or of images, whose decoding is slow Python work a pool spreads
AUTO_MEASURE_S = 0.3  # this process predicts this long before it judges the work left
AUTO_REPAY = 2.0  # a pool is started when it would save this many times its start-up
POOL_START_S = {"onnx": 1.5, "torch": 3.0}  # a pool's start-up until it is measured here (forkserver cold)
PIECE_BATCHES = 4  # a CSV piece (what one process parses and predicts at a time) is at most this many batches
TABLE_PIECE_BATCHES = 16  # a table's, which is also encoded: read and encoded by the piece, 4 batches cost 8% more
PIECES_PER_WORKER = 4  # and pieces are cut small enough that each worker gets several: the last ones even out
TAIL_BATCHES = 2  # batches per worker at the end of the input that go out one at a time
BUSY_SAMPLE_S = 0.05  # how long the CPU time other processes use is measured, before a pool is started


def worker_limit() -> int:
    """The most ``--workers`` that make sense here: this process's usable cores, at most MAX_WORKERS."""
    from core.host.machine import usable_cores

    return max(1, min(MAX_WORKERS, usable_cores()))


def is_image_input(path: Path) -> bool:
    """Whether an input is images (a folder, or one image file): predicted a small batch at a time."""
    from core.readers.inputs import IMAGE_SUFFIXES

    return path.is_dir() or path.suffix.lower() in IMAGE_SUFFIXES


def looks_large(path: Path, batch_rows: int) -> bool:
    """Whether an input probably holds enough rows for a pool, judged without reading it all."""
    enough = batch_rows * (AUTO_POOL_IMAGE_BATCHES if path.is_dir() else AUTO_POOL_BATCHES)
    return (estimated_rows(path, enough) or 0) >= enough


def estimated_rows(path: Path, cap: int) -> int | None:
    """About how many rows an input holds (counted up to ``cap`` for an image folder), without reading it all;
    None when that cannot be told this way. Each input kind's own estimate (``core.readers.INPUT_KINDS``):
    a CSV by its size over its first row's length, a Parquet file by its footer, an NPZ by the shape in its
    ``x`` header, an image folder by its image files."""
    from core.readers.inputs import estimated_rows as kind_rows

    return kind_rows(path, cap)


def busy_cores(sample_s: float = BUSY_SAMPLE_S) -> float:
    """How many cores are busy now, this process counted as one (it is about to predict): the CPU time every
    other process used over the next ``sample_s`` seconds (psutil), plus one; 1 where that cannot be read.

    Not the load average: a one-minute average still counts the commands that ran just before, which had
    this command choose one process on an idle machine (1.7x slower on 2,000,000 rows)."""
    import time

    try:
        import psutil

        me = psutil.Process()
        t0, machine0, own0 = time.monotonic(), psutil.cpu_times(), me.cpu_times()
        time.sleep(sample_s)
        t1, machine1, own1 = time.monotonic(), psutil.cpu_times(), me.cpu_times()
    except (ImportError, OSError, RuntimeError):
        return 1.0
    used = _busy_s(machine1) - _busy_s(machine0) - (own1.user + own1.system - own0.user - own0.system)
    return 1.0 + max(0.0, used / max(t1 - t0, 1e-3))


def _busy_s(times: Any) -> float:
    """A machine's CPU seconds doing anything (guest time is already in user time, so it is not added)."""
    fields = ("user", "nice", "system", "irq", "softirq", "steal")
    return float(sum(getattr(times, f, 0.0) for f in fields))


def cores_busy(processes: int) -> bool:
    """Whether other work holds the cores a pool of ``processes`` would use: it would share them (2 workers
    on a loaded 2-core machine ran 0.69-1.10x one)."""
    return busy_cores() > processes - 0.5


def _start_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "traindesk" / "predict-pool.json"


def pool_start_s(kind: str) -> float:
    """A prediction pool's start-up for this runtime ("onnx", "torch"): as last measured here, else a guess."""
    try:
        kept = json.loads(_start_file().read_text(encoding="utf-8")).get(kind)
        if isinstance(kept, (int, float)) and 0 <= kept < 3600:
            return float(kept)
    except (OSError, ValueError, AttributeError):
        pass
    return POOL_START_S[kind]


def remember_pool_start(kind: str, seconds: float) -> None:
    """Keep a measured pool start-up for the next automatic choice; a cache that cannot be written is skipped."""
    from core.runfiles.writing import atomic_write_json

    path = _start_file()
    try:
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
            kept = kept if isinstance(kept, dict) else {}
        except (OSError, ValueError):
            kept = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {**kept, kind: round(seconds, 3)})
    except OSError:
        pass


class AutoPool:
    """The automatic worker count: this process predicts and measures its rate; when the rows left would
    take long enough that ``processes`` processes save ``AUTO_REPAY`` times the pool's start-up (as last
    measured on this machine, kept in the user's cache) and the other cores are not busy with other work
    (the load average), a pool of the other ``processes - 1`` starts (``pool.PoolStart``). This process
    goes on predicting meanwhile, and shares the rest with the pool once every process has loaded the
    model."""

    def __init__(self, total_rows: int, processes: int) -> None:
        self.total_rows = total_rows
        self.processes = processes
        self.rows = 0
        self.seconds = 0.0
        self.decided = False

    def measured(self, runner: Runner, rows: int, seconds: float) -> None:
        """Account a piece this process predicted; once enough is measured, start the pool if it repays."""
        self.rows += rows
        self.seconds += seconds
        if not self.decided and self.seconds >= AUTO_MEASURE_S:
            self.decided = True
            if self._repays(runner):
                runner.start_pool(self.processes - 1)

    def _repays(self, runner: Runner) -> bool:
        if self.processes < 2 or cores_busy(self.processes):
            return False
        left_s = max(0, self.total_rows - self.rows) * self.seconds / max(self.rows, 1)
        return left_s * (1 - 1 / self.processes) >= AUTO_REPAY * pool_start_s(runtime(runner.model_path))
