"""GUI test setup: offscreen Qt, private settings, and no leftover threads or processes."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"  # before anything imports Qt: no display on CI

import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from PySide6.QtCore import QCoreApplication, QEvent, QSettings, QThread

from app.shell.settings import APPLICATION, ORGANIZATION, AppSettings

HERE = Path(__file__).resolve().parent
# The offscreen platform warns about window size hints it cannot pass on: not a bug of ours.
QT_LOG_IGNORE = ["This plugin does not support propagateSizeHints", "propagateSizeHints"]
# Python threads that may outlive a test by design (daemon helpers of multiprocessing/torch).
ALLOWED_THREADS = ("traindesk-warmup", "QueueFeederThread", "pydevd", "Dummy-")

# -- QThread tracking: every QThread started during the tests is remembered ------------------
_started_qthreads: weakref.WeakSet[QThread] = weakref.WeakSet()
_original_start = QThread.start


def _tracking_start(self: QThread, *args: Any, **kwargs: Any) -> None:
    _started_qthreads.add(self)
    _original_start(self, *args, **kwargs)


QThread.start = _tracking_start  # type: ignore[method-assign]  # every QThread a test starts is tracked


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.qt_log_ignore(*QT_LOG_IGNORE))


# -- child processes -----------------------------------------------------------------------
def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


def _is_mp_helper(pid: int) -> bool:
    cmd = _cmdline(pid)
    return "multiprocessing.forkserver" in cmd or "multiprocessing.resource_tracker" in cmd


def live_children() -> list[int]:
    """Descendants of this process, minus the forkserver and resource tracker themselves
    (their children, the workers, do count)."""
    found: list[int] = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):  # exited, only waiting to be reaped
                continue
        except psutil.NoSuchProcess:
            continue
        if not _is_mp_helper(child.pid):
            found.append(child.pid)
    return found


def wait_for(cond: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.fixture(name="live_children")
def _live_children_fixture() -> Callable[[], list[int]]:
    return live_children


# -- autouse fixtures ----------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _private_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """QSettings and ./runs go to tmp_path: tests never touch the user's settings or the repo.

    A window starts from Config()'s defaults, not from the first-run config (half a minute of training):
    the tests that start runs set the short configs they need."""
    monkeypatch.setattr(AppSettings, "first_run_config", None)
    settings_dir = tmp_path / "settings"
    QCoreApplication.setOrganizationName(ORGANIZATION)
    QCoreApplication.setApplicationName(APPLICATION)
    for fmt in (QSettings.Format.IniFormat, QSettings.Format.NativeFormat):
        QSettings.setPath(fmt, QSettings.Scope.UserScope, str(settings_dir))
        QSettings.setPath(fmt, QSettings.Scope.SystemScope, str(settings_dir / "system"))
    monkeypatch.chdir(tmp_path)
    yield settings_dir


@pytest.fixture(autouse=True)
def _no_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that leaves a QThread, a Python thread or a child process running."""
    threads_before = set(threading.enumerate())
    yield
    app = QCoreApplication.instance()
    if app is not None:
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        app.processEvents()

    def running_qthreads() -> list[str]:
        out = []
        for t in list(_started_qthreads):
            try:
                if t.isRunning():
                    out.append(t.objectName() or type(t).__name__)
            except RuntimeError:  # the C++ object is gone: not running
                pass
        return out

    def new_threads() -> list[str]:
        return [
            t.name
            for t in threading.enumerate()
            if t not in threads_before and t.is_alive() and not t.name.startswith(ALLOWED_THREADS)
        ]

    # Short grace: a thread may be returning and a worker may be exiting right now.
    wait_for(lambda: not running_qthreads() and not new_threads() and not live_children(), 5.0)
    problems = []
    if running_qthreads():
        problems.append(f"QThreads still running: {running_qthreads()}")
    if new_threads():
        problems.append(f"threads still running: {new_threads()}")
    children = live_children()
    if children:
        problems.append(
            "child processes still alive: " + ", ".join(f"{pid} ({_cmdline(pid)[:80]})" for pid in children)
        )
        for pid in children:  # do not let one failure cascade into the next tests
            try:
                os.kill(pid, 9)
            except OSError:
                pass
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)


# -- windows ---------------------------------------------------------------------------------
@pytest.fixture
def make_window(qtbot: Any, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Build MainWindows with private settings and runs dir; closes them (stopping runs) after."""
    from app.main_window import MainWindow
    from app.shell.settings import AppSettings

    windows: list[Any] = []

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("runs_dir", str(tmp_path / "runs"))
        kwargs.setdefault("settings", AppSettings())
        window = MainWindow(**kwargs)
        window.ask_before_close = False
        window.ask_fork = lambda dialog: True  # Fork as the dialog proposes (tests that edit it replace this)
        window.show()
        qtbot.waitExposed(window)
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.ask_before_close = False
        if window.isVisible():
            window.close()
            # An active run is stopped first; the window closes when it has ended.
            qtbot.waitUntil(lambda w=window: not w.isVisible(), timeout=30_000)
        window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
