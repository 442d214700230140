"""MetricsReader coalescing and RunController's lifecycle with a fake, instant session."""

from __future__ import annotations

import threading
import time
from typing import Any

from app.flows.metrics_reader import MetricsReader
from app.flows.run_controller import RunController
from core.config import Config
from core.errors import DataError
from core.session import RecordBuffer


def test_reader_coalesces_to_at_most_100_batches_a_second(qtbot: Any) -> None:
    buffer = RecordBuffer()
    reader = MetricsReader(buffer)
    batches: list[list[dict[str, Any]]] = []
    reader.records.connect(batches.append)
    reader.start()
    stop = threading.Event()
    total = 4000

    def produce() -> None:  # 4 "workers" putting small batches as fast as they can for ~1 s
        for i in range(total // 4):
            buffer.put([{"kind": "step", "t": time.time(), "worker": w, "step": i} for w in range(4)])
            time.sleep(0.001)
        stop.set()

    producer = threading.Thread(target=produce, name="producer")
    started = time.monotonic()
    producer.start()
    qtbot.waitUntil(lambda: stop.is_set() and sum(map(len, batches)) == total, timeout=60_000)
    elapsed = time.monotonic() - started
    producer.join()
    assert reader.stop()
    assert len(batches) <= 100 * elapsed + 2
    assert len(batches) < total // 4  # batches of several puts, not one call per put
    got = [r for b in batches for r in b]
    assert len(got) == total
    for w in range(4):  # per-worker order is kept
        steps = [r["step"] for r in got if r["worker"] == w]
        assert steps == sorted(steps)


class FakeSession:
    """Just enough of core.session.Session for the controller: its states, its records."""

    def __init__(self, cfg: Config, fail: Exception | None = None, start_delay: float = 0.0) -> None:
        self.config = cfg
        self.fail = fail
        self.start_delay = start_delay
        self.state = "idle"
        self.listeners: list[Any] = []
        self.run_dir = None
        self.summary: dict[str, Any] | None = None
        self.error = None
        self.num_workers = 1
        self.info = None
        self.calls: list[str] = []
        self.lock = threading.Lock()

    @property
    def active(self) -> bool:
        return self.state in ("starting", "running", "paused", "stopping", "finishing")

    def add_listener(self, fn: Any) -> None:
        self.listeners.append(fn)

    def _move(self, state: str) -> None:
        self.state = state
        for fn in self.listeners:
            fn([{"kind": "state", "t": time.time(), "worker": None, "state": state, "detail": ""}])

    def begin(self) -> None:
        self.calls.append("begin")
        self._move("starting")

    def start(self) -> None:
        time.sleep(self.start_delay)
        with self.lock:
            self.calls.append("start")
            if self.fail:
                self._move("failed")
                raise self.fail
            if self.state == "stopping":
                self._stopped()
            else:
                self._move("running")

    def _stopped(self) -> None:
        self.summary = {"status": "stopped"}
        self._move("stopped")

    def pause(self) -> None:
        self.calls.append("pause")
        if self.state == "running":
            self._move("paused")

    def resume(self) -> None:
        self.calls.append("resume")
        if self.state == "paused":
            self._move("running")

    def request_stop(self, timeout: float = 10.0) -> None:
        with self.lock:
            self.calls.append("stop")
            if self.state == "starting":
                self._move("stopping")  # start() ends it
            elif self.state in ("running", "paused"):
                self._move("stopping")
                self._stopped()

    def stop(self, timeout: float = 10.0) -> str:
        self.request_stop(timeout)
        return self.state

    def wait(self, timeout: float | None = None) -> str:
        return self.state

    def worker_pids(self) -> list[int]:
        return []


def _controller(sessions: list[FakeSession], **kwargs: Any) -> RunController:
    def factory(cfg: Config, runs_dir: str, name: str | None) -> tuple[Any, Any]:
        sessions.append(FakeSession(cfg, **kwargs))
        return sessions[-1], RecordBuffer()

    return RunController(session_factory=factory)


def test_stop_while_starting_stops_right_after_start(qtbot: Any) -> None:
    sessions: list[FakeSession] = []
    controller = _controller(sessions, start_delay=0.3)
    states: list[str] = []
    controller.state_changed.connect(states.append)
    with qtbot.waitSignal(controller.run_ended, timeout=10_000) as ended:
        controller.start(Config())
        controller.stop()  # still starting: must not race start()
    assert ended.args[0] == "stopped"
    assert sessions[0].calls == ["begin", "stop", "start"]  # start() sees the stop and spawns nothing
    assert states[0] == "starting" and states[-2:] == ["stopping", "stopped"]


def test_input_error_from_start_is_reported_not_raised(qtbot: Any) -> None:
    sessions: list[FakeSession] = []
    controller = _controller(sessions, fail=DataError("data: csv:x.csv: file not found"))
    with qtbot.waitSignal(controller.start_failed, timeout=10_000) as failed:
        controller.start(Config())
    assert failed.args == ["data: csv:x.csv: file not found"]
    assert controller.state == "idle" and not controller.active


def test_pause_resume_are_passed_through(qtbot: Any) -> None:
    sessions: list[FakeSession] = []
    controller = _controller(sessions)
    with qtbot.waitSignal(controller.run_started, timeout=10_000):
        controller.start(Config())
    controller.pause()
    assert controller.state == "paused"  # the session's state, not a copy
    controller.resume()
    assert controller.state == "running"
    with qtbot.waitSignal(controller.run_ended, timeout=10_000):
        controller.stop()
    assert sessions[0].calls == ["begin", "start", "pause", "resume", "stop"]
