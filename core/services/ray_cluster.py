"""Joining a Ray cluster for ``serve --on ray`` and ``predict --on ray``: its address, or a Ray of this
machine's own; each way it fails said in one line.

Ray is an extra (``pip install 'traindesk[ray]'``): nothing here imports it before :func:`connect`.
On one machine every Ray process stays on loopback (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray
use 127.0.0.1 instead of the machine's own address).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from core.errors import UserError

REACH_TIMEOUT_S = 5.0  # a cluster's address that does not take a connection in this long is nobody's
LOOPBACK = ("127.0.0.1", "localhost", "::1")
INSTALL = "pip install 'traindesk[ray]' (Ray Serve and Ray Data)"


def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def require_ray(where: str) -> None:
    """Ray is installed, or one line that says how to install it."""
    if not ray_installed():
        raise UserError(f"{where} --on ray: Ray is not installed here: {INSTALL}")


def cluster_address(address: str | None) -> str | None:
    """The address given, else ``RAY_ADDRESS``, else None (a Ray of this machine's own)."""
    return address or os.environ.get("RAY_ADDRESS") or None


def _host_port(address: str) -> tuple[str, int] | None:
    """The GCS host and port of ``host:port`` (or ``ray://host:port``); None for ``auto`` and the like."""
    text = address.split("://", 1)[-1]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def check_reachable(address: str, where: str) -> None:
    """Someone takes a connection at the address within :data:`REACH_TIMEOUT_S`, or one line naming it."""
    target = _host_port(address)
    if target is None:
        return
    try:
        socket.create_connection(target, timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise UserError(
            f"{where} --on ray: nobody answers at {address} ({reason}); is the cluster up? "
            f"`ray status --address {address}` tells"
        ) from None


@contextmanager
def connected(address: str | None, where: str) -> Iterator[bool]:
    """Join the cluster at ``address`` (or ``RAY_ADDRESS``), or start a Ray of this machine's own, for the
    time of the block; yields whether it is this machine's own (it stops with the block)."""
    require_ray(where)
    address = cluster_address(address)
    target = _host_port(address) if address else None
    if address is None or (target is not None and target[0] in LOOPBACK):
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every Ray process on 127.0.0.1
    if address is not None:
        check_reachable(address, where)
    import ray

    try:
        if address is None:
            ray.init(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
        else:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except Exception as exc:
        raise UserError(_init_failure(exc, address, where)) from None
    try:
        yield address is None
    finally:
        ray.shutdown()


def _init_failure(exc: BaseException, address: str | None, where: str) -> str:
    text = " ".join(str(exc).split())
    if "auth" in text.lower() or "token" in text.lower():
        return (
            f"{where} --on ray: the cluster at {address} asks for a token (`ray start` turns token authentication "
            "on): set RAY_AUTH_MODE=token, with the token in RAY_AUTH_TOKEN or the file `ray start` wrote"
        )
    at = f"the cluster at {address}" if address else "a Ray of this machine's own"
    return f"{where} --on ray: could not join {at}: {text[:240] or type(exc).__name__}"
