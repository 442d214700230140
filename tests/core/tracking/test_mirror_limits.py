"""The MLflow mirror's limits: one writer per run, a deadline a silent server cannot stretch, the environment
left as it was."""

from __future__ import annotations

import fcntl
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.tracking.mlflow_mirror import MirrorError, MlflowMirror, _unreachable
from tests.trained_run import make_run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("mirror") / "runs", steps=5)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An HTTP address that takes connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not done.is_set():
            try:
                conn, _ = sock.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        done.set()
        thread.join()
        for conn in held:
            conn.close()
        sock.close()


def test_a_server_that_never_answers_holds_a_sync_no_longer_than_its_deadline(
    run: Path, silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    for key in ("MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES"):
        monkeypatch.delenv(key, raising=False)
    mirror = MlflowMirror(run, silent_server)
    t0 = time.monotonic()
    with pytest.raises(MirrorError, match="does not answer|did not take the rest in time"):
        mirror.sync(final=True, timeout=2.0)
    assert time.monotonic() - t0 < 8.0  # 2 s, a request's whole second of rounding, MLflow's own start
    assert "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ  # set around the mirror's calls only
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ


def test_a_second_process_mirroring_the_same_run_waits_for_the_first_then_says_so(run: Path) -> None:
    with (run / "mlflow.lock").open("a+") as held:  # another open file: another process, for flock
        fcntl.flock(held, fcntl.LOCK_EX)
        mirror = MlflowMirror(run, "sqlite:///" + str(run.parent / "never.db"))
        t0 = time.monotonic()
        with pytest.raises(MirrorError, match="another process is mirroring .* now"):
            mirror.sync(timeout=0.5)
        assert time.monotonic() - t0 < 5.0
        fcntl.flock(held, fcntl.LOCK_UN)
    assert not (run.parent / "never.db").exists()  # nothing was sent while the other held it


def test_a_server_that_is_not_there_is_known_by_the_errors_type() -> None:
    try:
        try:
            raise ConnectionRefusedError(111, "refused")
        except OSError as inner:
            raise RuntimeError("API request failed") from inner  # a library's own error around it
    except RuntimeError as exc:
        assert _unreachable(exc) == "no connection"
    assert _unreachable(TimeoutError()) == "timed out"
    assert _unreachable(ValueError("INVALID_PARAMETER_VALUE: bad key")) is None
