"""A real MLflow tracking server for the tests: ``mlflow server`` on 127.0.0.1 with a sqlite store in a folder
of the test's, which a test may stop and start again (same port, same store)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

START_S = 180.0  # a loaded machine: the first start makes the store's tables


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MlflowServer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = folder / "server.log"

    def start(self) -> MlflowServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        mlflow = Path(sys.executable).with_name("mlflow")
        command = [str(mlflow)] if mlflow.exists() else [sys.executable, "-m", "mlflow"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    *command,
                    "server",
                    "--backend-store-uri",
                    f"sqlite:///{self.folder / 'mlflow.db'}",
                    "--artifacts-destination",
                    str(self.folder / "artifacts"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--workers",
                    "1",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its workers go with it
            )
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {self.log.read_text(errors='replace')[-2000:]}")
            if self.answers():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"mlflow server did not answer in {START_S:.0f} s")

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(30)
        deadline = time.monotonic() + 30
        while self.answers() and time.monotonic() < deadline:  # its port is closed
            time.sleep(0.1)

    def client(self) -> Any:
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.uri)
