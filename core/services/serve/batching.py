"""The batching queue in front of a server's inference processes: requests in, batches out.

Requests wait in one bounded queue (rows). :meth:`RequestQueue.next_batch`
says what an idle worker takes now: a batch once the queue holds
``max_batch`` rows, its oldest request has waited ``max_wait_s``, or no
batch is being computed at all (a lone request on an idle server goes at
once); otherwise it arms one timer that asks again. A request still
waiting at its deadline gets 504 and is never computed; a request back from
a crashed worker goes alone, at the front. Everything here runs on the
event loop's thread.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


class ServeError(Exception):
    """A request that gets an error answer: its HTTP status, one line, and extra headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


@dataclass(frozen=True)
class Limits:
    max_batch: int = 64  # rows per batch
    max_wait_s: float = 0.0  # how long a batch may wait for more rows while another one computes
    queue_rows: int = 1024  # rows waiting at most; more get 429
    timeout_s: float = 10.0  # a request's deadline unless it sends X-Request-Timeout


class Request:
    """Rows of one HTTP request, waiting for their probabilities."""

    __slots__ = ("x", "n", "future", "deadline", "timer", "crashes", "queued", "t0")

    def __init__(self, x: np.ndarray, future: asyncio.Future[np.ndarray], deadline: float, t0: float) -> None:
        self.x = x
        self.n = len(x)
        self.future = future
        self.deadline = deadline
        self.timer: asyncio.TimerHandle | None = None
        self.crashes = 0
        self.queued = True
        self.t0 = t0


class Batch:
    """Requests sent together to one worker: ``rows`` rows under one batch id."""

    __slots__ = ("id", "requests", "rows")

    def __init__(self, batch_id: int, requests: list[Request], rows: int) -> None:
        self.id = batch_id
        self.requests = requests
        self.rows = rows

    def resolve(self, probs: np.ndarray) -> None:
        """Each request gets its own rows of the answer."""
        start = 0
        for r in self.requests:
            if not r.future.done():
                r.future.set_result(probs[start : start + r.n])
            if r.timer is not None:
                r.timer.cancel()
            start += r.n


class RequestQueue:
    """The waiting requests, their row count and deadlines, and the batching rule."""

    def __init__(self, limits: Limits, first_id: int, on_waited: Callable[[], None]) -> None:
        self.limits = limits
        self.loop: asyncio.AbstractEventLoop | None = None  # set once the server's loop runs
        self.rows = 0  # rows waiting
        self._queue: collections.deque[Request] = collections.deque()
        self._next_id = first_id
        self._wait_timer: asyncio.TimerHandle | None = None
        self._on_waited = on_waited  # the batching wait is over: offer batches again

    def submit(self, x: np.ndarray, timeout_s: float) -> asyncio.Future[np.ndarray]:
        """Queue rows ``x``; the future gets their probabilities, or a ServeError (429 at once when full)."""
        assert self.loop is not None
        n = len(x)
        limit = self.limits.queue_rows
        if n > limit:
            raise ServeError(413, f"the request has {n} rows; at most {limit} fit in the queue")
        if self.rows + n > limit:
            raise ServeError(
                429, f"the queue is full ({self.rows} of {limit} rows waiting); retry later", {"Retry-After": "1"}
            )
        loop = self.loop
        now = loop.time()
        r = Request(x, loop.create_future(), now + timeout_s, now)
        r.timer = loop.call_at(r.deadline, self._expire, r, timeout_s)
        self._queue.append(r)
        self.rows += n
        return r.future

    def _expire(self, r: Request, timeout_s: float) -> None:
        if r.future.done():
            return
        where = "in the queue" if r.queued else "while the model computed it"
        self.fail(r, ServeError(504, f"the deadline of {timeout_s:g} s passed {where}"))

    def fail(self, r: Request, error: ServeError) -> None:
        if r.queued:
            r.queued = False
            self.rows -= r.n
        if r.timer is not None:
            r.timer.cancel()
        if not r.future.done():
            r.future.set_exception(error)
            r.future.exception()  # retrieved: a request whose client left logs nothing

    def fail_batch(self, batch: Batch, error: ServeError) -> None:
        for r in batch.requests:
            self.fail(r, error)

    def close(self, error: ServeError) -> None:
        """Every waiting request gets ``error``; the batching timer stops."""
        if self._wait_timer is not None:
            self._wait_timer.cancel()
        for r in list(self._queue):
            self.fail(r, error)
        self._queue.clear()
        self.rows = 0

    def put_back(self, batch: Batch) -> None:
        """A batch whose worker died: each request back at the front, in its order, to go alone (see
        :meth:`_take`); one that took a worker down twice gets 500."""
        back: list[Request] = []
        for r in batch.requests:
            if r.future.done():
                continue
            r.crashes += 1
            if r.crashes >= 2:
                self.fail(r, ServeError(500, "the model process crashed on this input"))
            else:
                back.append(r)
        for r in reversed(back):
            r.queued = True
            self.rows += r.n
            self._queue.appendleft(r)

    def next_batch(self, computing: bool) -> Batch | None:
        """The batch an idle worker takes now, or None: nothing waits, or the batching rule says wait
        (``computing``: another batch is being computed)."""
        queue = self._queue
        while queue and not queue[0].queued:  # answered already (deadline): dropped here
            queue.popleft()
        if not queue:
            return None
        if self.rows < self.limits.max_batch and queue[0].crashes == 0:
            assert self.loop is not None
            wait_until = queue[0].t0 + self.limits.max_wait_s
            if computing and self.loop.time() < wait_until:
                if self._wait_timer is None:
                    self._wait_timer = self.loop.call_at(wait_until, self._waited)
                return None
        return self._take()

    def _waited(self) -> None:
        self._wait_timer = None
        self._on_waited()

    def _take(self) -> Batch:
        """Requests from the front of the queue, up to max_batch rows (at least one request); a request
        back from a crash goes alone, so that it can only take its own batch down with it."""
        queue = self._queue
        taken: list[Request] = []
        rows = 0
        while queue:
            r = queue[0]
            if not r.queued:
                queue.popleft()
                continue
            if taken and (rows + r.n > self.limits.max_batch or r.crashes or taken[0].crashes):
                break
            queue.popleft()
            r.queued = False
            self.rows -= r.n
            taken.append(r)
            rows += r.n
        batch_id = self._next_id
        self._next_id += 1
        return Batch(batch_id, taken, rows)
