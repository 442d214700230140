"""The server's life around a :class:`~core.services.serve.app.Service`: the socket, uvicorn, drain on a signal, a lifeline.

``serve(options)`` binds the port (a port in use is said before any model loads), starts the model
processes, answers HTTP until Ctrl-C, SIGTERM or SIGHUP (the terminal closed; not under ``nohup``), or
until the process ``--die-with`` names ends, then drains: held requests are answered, new ones get 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from core.host.lifeline import alive, set_pdeathsig
from core.services.serve.app import ServeConfigError, ServeOptions, Service, StartError, check_options


def _uvicorn_server(service: Service, sock: Any) -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn that drains first on SIGTERM / Ctrl-C: new requests 503, held ones answered, then exit."""

        draining_task: asyncio.Task[None] | None = None

        def handle_exit(self, sig: int, frame: Any) -> None:  # a signal handler: runs between bytecodes
            if self.draining_task is not None:
                self.force_exit = self.force_exit or sig == signal.SIGINT
                return
            loop = asyncio.get_event_loop()
            loop.call_soon_threadsafe(self._begin_drain)

        def _begin_drain(self) -> None:
            if self.draining_task is None:
                service.options.log("serve: draining (held requests are answered, new ones get 503)")
                self.draining_task = asyncio.ensure_future(self._drain_then_exit())

        async def _drain_then_exit(self) -> None:
            await service.drain()
            self.should_exit = True

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            """Ctrl-C, SIGTERM and SIGHUP (the terminal closed; not when ``nohup`` ignores it) drain."""
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            sigs = [signal.SIGINT, signal.SIGTERM]
            if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
                sigs.append(signal.SIGHUP)
            before = {sig: signal.signal(sig, self.handle_exit) for sig in sigs}
            try:
                yield
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)

    config = uvicorn.Config(
        service.asgi,
        interface="asgi3",
        proxy_headers=False,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=5,
        server_header=False,
        date_header=False,
        loop="none",
        http="auto",
        backlog=2048,
    )
    return Server(config)


async def _follow(options: ServeOptions, server: Any) -> None:
    """Drain and stop once the process ``--die-with`` names is gone (checked twice a second; on Linux its
    death also sends SIGTERM when it is this server's parent)."""
    pid = options.die_with
    assert pid is not None
    if os.getppid() == pid:
        set_pdeathsig(signal.SIGTERM)
    while alive(pid):
        await asyncio.sleep(0.5)
    options.log(f"serve: the process that started this server (pid {pid}) is gone: stopping")
    server.handle_exit(signal.SIGTERM, None)


def bind(host: str, port: int) -> Any:
    """A listening socket on host:port (port 0: a free one), made before the workers start: a port in use
    is said at once."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServeConfigError(f"serve: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


async def serve_async(options: ServeOptions, on_ready: Callable[[str], None] | None = None) -> None:
    """Load the model in every worker, then answer HTTP until SIGTERM / Ctrl-C; returns once drained."""
    check_options(options)
    sock = bind(options.host, options.port)
    service = Service(options)
    try:
        await service.pool.start()
        service.describe_model()
        # what was imported and built so far lives as long as the server: out of the collector's sight,
        # a full collection under load scans the requests' objects only (tens of ms less in the tail)
        gc.collect()
        gc.freeze()
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        service.url = f"http://{shown}:{port}"
        server = _uvicorn_server(service, sock)
        if options.watch:
            service.start_watching()

        async def announce() -> None:
            while not server.started and not server.should_exit:
                await asyncio.sleep(0.01)
            if server.started and on_ready is not None:
                on_ready(service.url)

        announcing = asyncio.ensure_future(announce())
        watching = asyncio.ensure_future(_follow(options, server)) if options.die_with is not None else None
        await server.serve(sockets=[sock])
        announcing.cancel()
        if watching is not None:
            watching.cancel()
    finally:
        service.stop_watching()
        await service.pool.close()
        sock.close()


def serve(options: ServeOptions, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGTERM / Ctrl-C (drained); StartError / ServeConfigError say why it could not start."""
    try:
        import uvloop

        loop_factory: Any = uvloop.new_event_loop
    except ModuleNotFoundError:
        loop_factory = None
    run_loop(serve_async(options, on_ready), loop_factory)


def run_loop(main: Coroutine[Any, Any, None], loop_factory: Callable[[], asyncio.AbstractEventLoop] | None) -> None:
    """``asyncio.Runner`` (3.11+), or the same by hand on 3.10: one new loop, its async generators shut, closed."""
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(main)
        return
    loop = (loop_factory or asyncio.new_event_loop)()
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


__all__ = ["ServeConfigError", "StartError", "bind", "serve", "serve_async"]
