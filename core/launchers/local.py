"""Process start-up: one multiprocessing context for every worker.

On Linux a ``forkserver`` with torch and the worker module preloaded starts
workers in tens of milliseconds once warm; elsewhere ``spawn``. Workers are never
forked from the parent itself: it may own a QApplication or a CUDA context. The
command line's server alone is a fork of its process, taken while that has one
thread and has imported torch only (``prestart``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.launchers.base import WorkerHandle
    from core.worker.channels import Channels
    from core.worker.spec import WorkerSpec

# torch._dynamo (without triton: core.launchers.server_preload): the first optimizer a process makes imports
# it (~1 s); do it once, in the server; the strategies: a worker's spec carries its strategy, whose module
# unpickling it imports
PRELOAD = ["torch", "core.launchers.server_preload", "core.worker.process", "core.strategies"]
_lock = threading.Lock()
_ctx: Any = None


def start_method() -> str:
    forced = os.environ.get("TRAINDESK_START_METHOD")
    if forced:
        return forced
    return "forkserver" if sys.platform.startswith("linux") else "spawn"


def get_context(preload: list[str] | None = None, tensors: bool = True) -> Any:
    """The shared multiprocessing context (created once per process; the first caller picks the preload).

    ``tensors``: torch's reductions are registered, so that tensors pass as shared memory (this imports
    torch); a caller that passes none (prediction) leaves them out.
    """
    global _ctx
    with _lock:
        if tensors:
            import torch.multiprocessing  # noqa: F401 - registers torch's reductions
        if _ctx is None:
            import multiprocessing  # the contexts are the standard library's whether torch's are registered or not

            method = start_method()
            ctx = multiprocessing.get_context(method)
            if method == "forkserver":
                ctx.set_forkserver_preload(PRELOAD if preload is None else preload)
            _ctx = ctx
        return _ctx


def _ensure_forkserver() -> None:
    from multiprocessing import forkserver

    forkserver.ensure_running()


def prestart(preload: list[str] | None = None) -> None:
    """Start the forkserver for a command that will start workers, as a fork of this process once it has
    imported torch; the rest of the server's preloads (torch._dynamo, the worker module: about 1 s) run
    beside this process's data loading.

    A server of its own (a fresh interpreter) imports torch a second time: with torch's CUDA build that
    is about 260 MB of private memory (its Python objects, libtorch's registrations, cuBLASLt's
    zero-initialised tables) held by the server through the whole run, where the fork shares this
    process's copy with the server and every worker. A process with other threads (one may hold a lock
    the fork would copy held) starts a server of its own instead. The server is the one ``get_context``
    uses later.
    """
    if start_method() != "forkserver":
        return
    import multiprocessing

    modules = PRELOAD if preload is None else preload
    multiprocessing.get_context("forkserver").set_forkserver_preload(modules)
    if threading.active_count() == 1 and _forkable_server():
        import torch  # noqa: F401 - the pages the server and its workers share with this process

        from core.host.machine import drop_cuda_library_pages

        drop_cuda_library_pages()  # before the fork: no process of the run keeps them
        if threading.active_count() == 1:
            _start_server(lambda: _fork_server(modules))
            return
    _start_server()


# the standard library's forkserver as _fork_server knows it (3.10-3.12): a later one (an authentication
# key, other fields) starts a server of its own
_FORKABLE_FIELDS = {"_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid", "_inherited_fds", "_lock"}


def _forkable_server() -> bool:
    import inspect
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fields = set(vars(server)) - {"_preload_modules"} if server is not None else set()
    try:
        params = list(inspect.signature(forkserver.main).parameters)
    except (TypeError, ValueError):
        return False
    return fields == _FORKABLE_FIELDS and params[:3] == ["listener_fd", "alive_r", "preload"]


def _start_server(start: Callable[[], None] | None = None) -> None:
    # SIGINT is blocked, not ignored, while the server is created: the server inherits the mask, so a
    # Ctrl-C during its imports prints no KeyboardInterrupt traceback from it (it ignores SIGINT itself
    # once its imports are done), and one that reaches this process meanwhile stays pending and is
    # handled once the mask is restored (an ignored one would be lost, and the command would go on).
    # The resource tracker first: starting it unblocks SIGINT (the standard library blocks and unblocks
    # it around its own start), which would undo the block below.
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        (start or _ensure_forkserver)()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _fork_server(preload: list[str]) -> None:
    """``forkserver.ensure_running`` with the server forked from this process instead of executed: the
    same socket, alive pipe and fields, and the server left as a fresh one would be (no other file
    descriptor of this process, the signal handlers of a new interpreter, never this process's exit
    handlers)."""
    import socket
    from multiprocessing import connection, forkserver, util

    server: Any = forkserver._forkserver  # noqa: SLF001 — the standard library's server: no public handle
    with server._lock:  # noqa: SLF001
        if server._forkserver_pid is not None:  # noqa: SLF001
            return
        sys.stdout.flush()  # buffered output would be written again by the server's workers
        sys.stderr.flush()
        with socket.socket(socket.AF_UNIX) as listener:
            address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
            listener.bind(address)
            if not util.is_abstract_socket_namespace(address):
                os.chmod(address, 0o600)
            listener.listen()
            alive_r, alive_w = os.pipe()
            try:
                pid = os.fork()
            except BaseException:
                os.close(alive_w)
                os.close(alive_r)
                raise
            if pid == 0:
                _serve(listener.fileno(), alive_r, preload)
            os.close(alive_r)
        server._forkserver_address = address  # noqa: SLF001
        server._forkserver_alive_fd = alive_w  # noqa: SLF001
        server._forkserver_pid = pid  # noqa: SLF001


def _serve(listener_fd: int, alive_r: int, preload: list[str]) -> NoReturn:
    """The forked server's life: it never returns into the command's code."""
    code = 0
    try:
        low = 3  # the fds of a fresh server: 0-2, the socket and the alive pipe
        for fd in sorted((listener_fd, alive_r)):
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, os.sysconf("SC_OPEN_MAX"))
        for sig in signal.valid_signals():  # the command's handlers (its Ctrl-C count) are not the server's
            handler = signal.getsignal(sig)
            if callable(handler):
                signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        from multiprocessing import forkserver

        forkserver.main(listener_fd, alive_r, preload)
    except SystemExit:  # the last client has gone
        pass
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def warm_up(block: bool = False, preload: list[str] | None = None, tensors: bool = True) -> None:
    """Start the forkserver (torch preloaded) now, so the first Start is fast.

    Starting the server is a fork+exec (milliseconds); its imports run in the
    server, which starts with SIGINT blocked (see ``_start_server``).
    ``block`` waits until the server answers.
    """
    ctx = get_context(preload, tensors)
    if ctx.get_start_method() != "forkserver":
        return
    _start_server()
    if block:
        _wait_for_forkserver(ctx)


def _noop() -> None:
    pass


def _wait_for_forkserver(ctx: Any) -> None:
    """Start and join a trivial process: returns once the preloads are done."""
    proc = ctx.Process(target=_noop, name="traindesk-warmup")
    proc.start()
    proc.join()


# multiprocessing has no public way to ask for its forkserver's pid or to end it at once, nor its resource
# tracker: these are CPython's own names for them (3.10 to 3.13), read with getattr so that a version
# without one reads None; _forkserver() is the one place that takes the server itself.
_SERVER_FIELDS = ("_forkserver_pid", "_forkserver_address", "_forkserver_alive_fd")
_TRACKER_FIELDS = ("_fd", "_pid")


def _forkserver() -> Any:
    """This process's ``multiprocessing.forkserver`` server object; None when that module is not imported
    (then no server was started). Imports nothing: it may run in a signal handler, in the middle of an
    import."""
    module = sys.modules.get("multiprocessing.forkserver")
    if module is None or not hasattr(module, "_forkserver"):
        return None
    return module._forkserver  # noqa: SLF001 — the standard library's server: it has no public handle


def _clear(obj: Any, fields: tuple[str, ...]) -> None:
    for name in fields:
        setattr(obj, name, None)


def forkserver_pid() -> int | None:
    return getattr(_forkserver(), "_forkserver_pid", None)


def stop_forkserver() -> None:
    """End this process's forkserver now, if it runs, even in the middle of its preloads (which would
    otherwise keep it alive for seconds after this process exits), and its resource tracker; the next
    worker starts a new one. Imports nothing (it may run in a signal handler, in the middle of an
    import): a module not yet imported started no server."""
    if _end_server():
        _stop_resource_tracker()


def _end_server() -> bool:
    """End the forkserver, if it runs (SIGKILL: it holds nothing to save; its workers die with it); the
    resource tracker stays. True when there was one."""
    server = _forkserver()
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    alive = getattr(server, "_forkserver_alive_fd", None)
    _clear(server, _SERVER_FIELDS)
    if alive is not None:
        try:
            os.close(alive)
        except OSError:
            pass
    return True


def _stop_resource_tracker(wait_s: float = 0.5) -> None:
    """Let the resource tracker the forkserver started end (its pipe closed), and reap it: left to itself
    it would outlive this process for a moment. Without its lock: this may run in a signal handler."""
    import time

    tracker = getattr(sys.modules.get("multiprocessing.resource_tracker"), "_resource_tracker", None)
    fd, pid = (getattr(tracker, name, None) for name in _TRACKER_FIELDS)
    if fd is None or pid is None:
        return
    _clear(tracker, _TRACKER_FIELDS)
    try:
        os.close(fd)
        deadline = time.monotonic() + wait_s
        while os.waitpid(pid, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
            time.sleep(0.01)
    except (OSError, ChildProcessError):
        pass


class LocalLauncher:
    """Starts a run's workers as processes of this machine and makes their channels (a ``Launcher``)."""

    name = "local"

    def __init__(self) -> None:
        self.ctx = get_context()
        self._rendezvous_file: str | None = None
        self.server_ends_with_workers = False  # see end_server_with_workers

    def warm_up(self) -> None:
        warm_up()  # no-op when the forkserver already runs

    def channels(self, command: int) -> Channels:
        from core.worker.channels import Channels, SettingsBox

        ctx = self.ctx
        settings = SettingsBox(ctx.RawValue("i", 0), ctx.RawArray("c", SettingsBox.SIZE))
        return Channels(
            queue=ctx.Queue(),
            command=ctx.RawValue("i", command),
            run_event=ctx.Event(),
            request=ctx.RawValue("i", 0),
            settings=settings,
        )

    def rendezvous(self, uses_process_group: bool) -> str:
        """Where a process group meets: a FileStore in a fresh temp path (the store creates it)."""
        if not uses_process_group:
            return ""
        import tempfile

        fd, path = tempfile.mkstemp(prefix="traindesk-ddp-")
        os.close(fd)
        os.unlink(path)  # a stale file would confuse the store
        self._rendezvous_file = path
        return f"file://{path}"

    def start(self, specs: list[WorkerSpec], data: Any, shared: list[Any], channels: Channels) -> list[WorkerHandle]:
        """Start one process per spec; on any failure none is left running and the error is raised."""
        from core.worker.process import worker_main

        procs = [
            self.ctx.Process(
                target=worker_main,
                args=(spec, data, shared, channels),
                name=f"traindesk-worker-{spec.rank}",
                daemon=False,
            )
            for spec in specs
        ]
        try:
            for proc in procs:
                proc.start()
        except BaseException:
            for proc in procs:
                if proc.pid is not None:
                    proc.kill()
                    proc.join(5)
            raise
        return procs

    def attach(self, run_dir: Path) -> None:
        """The run directory is known (nothing to record for local processes)."""

    def end_server_with_workers(self) -> None:
        """This process runs one run and no other (``traindesk train``): the forkserver ends as soon as the
        run's workers have, instead of with the process. Its preloads (torch, torch._dynamo: half a GB) then
        stand beside neither the run's evaluation nor the command's exit; the window keeps its server warm
        for the next Start."""
        self.server_ends_with_workers = True

    def workers_ended(self) -> None:
        if self.server_ends_with_workers:
            _end_server()

    def summary_extra(self, nodes: list[str]) -> dict[str, Any]:
        return {}

    def cleanup(self) -> None:
        if self._rendezvous_file:
            try:
                os.unlink(self._rendezvous_file)
            except OSError:
                pass
            self._rendezvous_file = None
