"""Reading the workers' record batches without hanging on one that a killed worker left half-written.

A worker killed (SIGKILL, out of memory) while its queue's feeder thread was
writing a batch larger than the pipe could take at once leaves the first
part of that batch in the pipe: ``multiprocessing.Queue.get`` then waits
for the rest for ever, and the run never ends. :func:`receive` reads the
same framing (a 4-byte length, then the pickled batch) itself, and gives up
on a batch whose bytes stop coming while ``writer_gone()`` says a worker
has died. The dead worker also held the queue's write lock, so nothing more
can come through that queue: the caller stops reading it.
"""

from __future__ import annotations

import os
import queue as queue_mod
import struct
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.queues import Queue as ProcessQueue
from multiprocessing.reduction import ForkingPickler
from typing import Any

STALL_S = 1.0  # a batch whose bytes stop this long, with a worker dead, is given up


class QueueBroken(Exception):
    """A batch stopped in the middle and its writer is gone: the queue holds nothing readable any more."""


def receive(queue: Any, timeout: float, writer_gone: Callable[[], bool]) -> Any:
    """The next batch on ``queue`` within ``timeout`` seconds; ``queue.Empty`` when none began."""
    reader = getattr(queue, "_reader", None)
    if not isinstance(queue, ProcessQueue) or reader is None:  # in-process queues (torchrun) cannot tear
        return queue.get(timeout=timeout)
    if not reader.poll(timeout):
        raise queue_mod.Empty
    fd = reader.fileno()
    os.set_blocking(fd, False)  # read what is there; wait (bounded) only when a batch is not all there yet
    (size,) = struct.unpack("!i", _read(fd, 4, writer_gone))
    if size == -1:  # a batch of 2 GiB or more
        (size,) = struct.unpack("!Q", _read(fd, 8, writer_gone))
    return ForkingPickler.loads(_read(fd, size, writer_gone))


def _read(fd: int, n: int, writer_gone: Callable[[], bool]) -> bytes:
    buf = bytearray()
    last = time.monotonic()
    while len(buf) < n:
        try:
            chunk = os.read(fd, n - len(buf))
        except BlockingIOError:
            if not wait([fd], 0.1) and time.monotonic() - last > STALL_S and writer_gone():
                raise QueueBroken(f"a record batch stopped after {len(buf)} of {n} bytes") from None
            continue
        if not chunk:
            raise EOFError("the record queue was closed")
        buf += chunk
        last = time.monotonic()
    return bytes(buf)
