"""What connects a worker to its session: the control word, the settings box and the record channel.

The control word is a shared integer read at batch boundaries (a plain memory
read): run, checkpoint, pause, stop; the ``run`` event wakes waiting workers.
Config changes made while paused reach the workers through a
:class:`SettingsBox`; records go back in batches through a
:class:`RecordSender`, about every 50 ms. Each launcher builds the
:class:`Channels` for its kind of worker (processes or threads).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from core.runfiles.records import log_record, state_record

# The control word. Ranks that must act together take the max, so a stop wins over
# a pause and a pause over a checkpoint.
RUN, CHECKPOINT, PAUSE, STOP = 0, 1, 2, 3
# Added by a worker to the word it reads while the settings box holds a change it has not taken
# (the session never writes it): ranks agree on it with the word and take the change at the same batch.
SETTINGS = 4
FLUSH_INTERVAL = 0.05  # seconds between queue puts at most (sooner when the queue is empty)
RECORD_INTERVAL = 0.01  # seconds between step records of one worker


@dataclass(frozen=True)
class Channels:
    """What connects a worker to its session: the metrics queue and the controls."""

    queue: Any  # multiprocessing Queue of lists of records
    command: Any  # multiprocessing RawValue('i'): RUN / CHECKPOINT / PAUSE / STOP
    run_event: Any  # multiprocessing Event: set while the command is RUN or STOP
    request: Any  # multiprocessing RawValue('i'): id of the latest checkpoint request
    settings: SettingsBox  # config changes made while paused


class SettingsBox:
    """Config changes handed to paused workers: a version number and a JSON text in shared memory."""

    SIZE = 16384

    def __init__(self, version: Any, text: Any) -> None:
        self.version = version  # RawValue('i')
        self.text = text  # RawArray('c', SIZE)

    def write(self, changes: dict[str, Any]) -> None:
        data = json.dumps(changes).encode()
        if len(data) >= self.SIZE:
            raise ValueError("config changes too large")
        self.text.value = data
        self.version.value += 1

    def read(self) -> dict[str, Any]:
        return dict(json.loads(self.text.value.decode() or "{}"))


class RecordSender:
    """Collects records and puts them on the queue in batches."""

    def __init__(self, queue: Any, worker: int) -> None:
        self.queue = queue
        self.worker = worker
        self.buffer: list[dict[str, Any]] = []
        self.last_flush = time.monotonic()

    def add(self, record: dict[str, Any]) -> None:
        self.buffer.append(record)

    def state(self, state: str, detail: str = "", **extra: Any) -> None:
        self.add(state_record(self.worker, state, detail, **extra))
        self.flush()

    def log(self, level: str, message: str) -> None:
        self.add(log_record(self.worker, level, message))

    def maybe_flush(self, now: float) -> None:
        """Put the buffer on the queue every FLUSH_INTERVAL, or sooner when the reader has caught up."""
        elapsed = now - self.last_flush
        if elapsed >= FLUSH_INTERVAL or (elapsed >= RECORD_INTERVAL and self._reader_idle()):
            self.flush(now)

    def _reader_idle(self) -> bool:
        try:
            return bool(self.queue.qsize() == 0)  # a semaphore read; the queue is drained
        except (AttributeError, NotImplementedError):  # queues without a size (macOS, in-process sinks)
            return False

    def flush(self, now: float | None = None) -> None:
        if self.buffer:
            self.queue.put(self.buffer)
            self.buffer = []
        self.last_flush = time.monotonic() if now is None else now


class EpochRestart(Exception):
    """The batches of the epoch in progress must be made anew (a settings word changed the batch size)."""
