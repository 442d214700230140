"""A live run mirrored to MLflow as it trains: a thread of the session's process, never in the run's way.

Every ``INTERVAL_S`` the thread sends what the run has written since (:class:`MlflowMirror`). A server that is
down at the start or goes away mid-run costs the run nothing: one warning in its log, attempts further apart
(``RETRY_S``), and everything not sent goes when the server answers again. At the end, the last records, the
run's figures, files and status get ``END_S`` seconds; what still could not be sent is one more warning naming
the command that sends it (``traindesk runs --to-mlflow URI RUN``), and mlflow.json remembers how far it got.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.config import FIELDS, Config, ConfigError
from core.config.fields import check_tracking_uri
from core.tracking.mlflow_mirror import INSTALL, MirrorError, MlflowMirror, pending_bytes

INTERVAL_S = 2.0  # between two sends while the server answers
RETRY_S = (2.0, 5.0, 10.0, 30.0)  # between attempts while it does not
END_S = 15.0  # what the end may take to send the rest while the server does not answer

Note = Callable[[str, str], None]  # (level, message) into the run's log


def mlflow_uri(config: Config) -> str:
    """Where the run is mirrored: ``tracking.mlflow``, else ``MLFLOW_TRACKING_URI``, else "" (nowhere).

    ConfigError (one line, at the start) when that URI is not one, or MLflow's client is not installed."""
    uri = config.tracking.mlflow
    if not uri:
        uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
        if not uri:
            return ""
        try:
            check_tracking_uri(FIELDS["tracking.mlflow"], uri)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("config: tracking.mlflow", "MLFLOW_TRACKING_URI", 1)) from None
    if importlib.util.find_spec("mlflow") is None:
        raise ConfigError(f"config: {INSTALL}")
    return uri


class LiveMirror:
    """Mirrors one live run to one tracking URI until :meth:`finish`."""

    def __init__(self, run_dir: Path, uri: str, note: Note, parent: dict[str, Any] | None, continued: bool) -> None:
        self.uri = uri
        self.run_dir = run_dir
        self._mirror = MlflowMirror(run_dir, uri, parent)
        self._note = note
        self._continued = continued
        self._stop = threading.Event()
        self._failing = False
        self._retries = 0
        self._last_error = ""
        self._thread = threading.Thread(target=self._loop, name="traindesk-mlflow", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            delay = INTERVAL_S if self._attempt(final=False) else RETRY_S[min(self._retries - 1, len(RETRY_S) - 1)]

    def _attempt(self, final: bool, timeout: float | None = None) -> bool:
        """One send (no request past ``timeout`` seconds); False when the server did not take it (the first
        failure in a row is the one warning)."""
        try:
            if self._continued:
                self._mirror.sync(timeout=timeout)  # the run it continues exists there first
                self._mirror.reopen()
                self._continued = False
            self._mirror.sync(final=final, timeout=timeout)
        except MirrorError as exc:
            self._retries += 1
            if not self._failing:
                self._failing = True
                self._note("warning", f"{exc}; the run goes on, its records are sent when the server answers")
            self._last_error = str(exc)
            return False
        if self._failing:
            self._failing, self._retries = False, 0
            self._note("info", f"mlflow: {self.uri} answers again; what it had not had is sent")
        return True

    def finish(self, timeout: float | None = None) -> None:
        """Stop the thread, then send the rest and the run's end (at most ``timeout``, ``END_S`` by default, while
        the server is down)."""
        self._stop.set()
        self._thread.join()
        deadline = time.monotonic() + (END_S if timeout is None else timeout)
        while self._attempt(final=True, timeout=max(0.5, deadline - time.monotonic())):
            entry = self._mirror.entry
            self._note("info", f"mlflow: mirrored to {entry.link or self.uri} (run {entry.run_id})")
            return
        while not self._attempt(final=True, timeout=max(0.5, deadline - time.monotonic())):
            if time.monotonic() + 1.0 > deadline:
                left = pending_bytes(self.run_dir, self.uri)
                what = f"{left:,} bytes of its records and its end" if left else "its end"
                self._note(
                    "warning",
                    f"mlflow: {what} did not reach {self.uri} ({self._last_error}); "
                    f"`traindesk runs --to-mlflow {self.uri} {self.run_dir}` sends them",
                )
                return
            time.sleep(1.0)
