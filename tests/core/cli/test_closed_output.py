"""Output nobody reads and a closed terminal never break a run or a server; a window's server dies with it.

Each test starts the real command as a user's script does (its stdout and stderr pipes), closes the pipes
(the reader went away: ``| head``, a dropped SSH session, a crashed window), then sends the signal a user or
the system sends. Generous timeouts; nothing is left running.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.cli_run import core_env, run_core, start_core
from tests.trained_run import make_run

ROOT = Path(__file__).resolve().parents[3]
ENV = core_env()


def _start_train(runs: Path, ignore_hup: bool = False) -> subprocess.Popen[bytes]:
    cmd = [
        "train",
        "--epochs",
        "100000",
        "--runs-dir",
        str(runs),
        "--set",
        "train.checkpoint_every=0",
    ]

    def hup(ignored: bool) -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN if ignored else signal.SIG_DFL)

    proc = start_core(
        *cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=ROOT, preexec_fn=lambda: hup(ignore_hup)
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # training has begun once an epoch line comes
        line = proc.stderr.readline()
        if not line or line.startswith(b"epoch "):
            break
    return proc


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()
    time.sleep(1.0)  # the run writes its next progress lines into the closed pipes meanwhile


def _end(proc: subprocess.Popen[bytes], timeout: float = 120) -> int | None:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()
        return None


def _run_dir(runs: Path) -> Path:
    [run] = [d for d in runs.iterdir() if d.is_dir() and not d.name.startswith(".")]
    return run


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_train_whose_readers_are_gone_stops_cleanly_on_a_signal(tmp_path: Path, sig: str) -> None:
    proc = _start_train(tmp_path / "runs")
    _close_pipes(proc)
    proc.send_signal(getattr(signal, sig))
    assert _end(proc) == 130  # stopped at the next batch
    run = _run_dir(tmp_path / "runs")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["epochs_done"] > 0
    assert (run / "checkpoints" / "last.pt").is_file()
    logs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"log"' in line]
    gone = [r["message"] for r in logs if "is gone" in r["message"]]
    assert len(gone) >= 1 and gone[0].startswith("stderr is gone (Broken pipe)")  # said once, in the run's log


@pytest.mark.slow
def test_sighup_is_ignored_under_nohup(tmp_path: Path) -> None:
    proc = _start_train(tmp_path / "runs", ignore_hup=True)
    _close_pipes(proc)
    proc.send_signal(signal.SIGHUP)
    time.sleep(2.0)
    assert proc.poll() is None  # nohup asked to keep running
    proc.send_signal(signal.SIGTERM)
    assert _end(proc) == 130
    assert json.loads((_run_dir(tmp_path / "runs") / "summary.json").read_text())["status"] == "stopped"


def test_a_reader_that_takes_one_line_gets_no_traceback(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for _ in range(2):
        make_run(runs)
    for cmd in (["runs", "--runs-dir", str(runs)], ["train", "--epochs", "200", "--runs-dir", str(runs), "--quiet"]):
        proc = start_core(*cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=ROOT)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()  # `| head -1`
        err = proc.stderr.read().decode()
        assert _end(proc) in (0, 130) and "Traceback" not in err and "Exception ignored" not in err, err


def _terminal_hup() -> None:
    """SIGHUP as a terminal's program has it, even when the suite itself runs under ``nohup``."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _start_serve(run: Path, *args: str) -> subprocess.Popen[bytes]:
    proc = start_core(
        "serve",
        str(run),
        "--port",
        "0",
        "--workers",
        "1",
        *args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        cwd=ROOT,
        preexec_fn=_terminal_hup,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline()
    assert url.startswith(b"http://"), (url, _end(proc, 10))
    return proc


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_serve_whose_readers_are_gone_drains_and_exits_0(tmp_path: Path, sig: str) -> None:
    proc = _start_serve(make_run(tmp_path / "runs"))
    children = psutil.Process(proc.pid).children(recursive=True)
    _close_pipes(proc)
    proc.send_signal(getattr(signal, sig))
    assert _end(proc, 60) == 0
    psutil.wait_procs(children, timeout=10)
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


def test_die_with_a_process_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    res = run_core(
        "serve",
        str(make_run(tmp_path / "runs")),
        "--port",
        "0",
        "--die-with",
        str(gone.pid),
        env=ENV,
        cwd=ROOT,
        timeout=120,
    )
    assert res.returncode == 2 and res.stderr.strip() == f"serve: --die-with {gone.pid}: no such process"


WINDOW = textwrap.dedent("""
    import os, sys, time
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtWidgets import QApplication
    app = QApplication([])
    from app.views.serve import ServeView
    view = ServeView()
    view.set_model(sys.argv[1])
    view.spin_port.setValue(0)
    view.spin_workers.setValue(1)
    view.url_ready.connect(lambda url: (print(view.process.processId(), url, flush=True)))
    view.start()
    app.exec()
""")


@pytest.mark.slow
def test_a_server_started_by_the_window_goes_when_the_window_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "window.py"
    script.write_text(WINDOW)
    window = subprocess.Popen(
        [sys.executable, str(script), str(make_run(tmp_path / "runs"))],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=ENV,
        cwd=ROOT,
    )
    server: Any = None
    try:
        assert window.stdout is not None
        line = window.stdout.readline().decode().split()
        assert len(line) == 2 and line[1].startswith("http://"), line
        server = psutil.Process(int(line[0]))
        model_processes = server.children(recursive=True)
        window.kill()  # a crash: nothing of the window's own closing runs
        window.wait(30)
        gone, alive = psutil.wait_procs([server, *model_processes], timeout=15)
        assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive
    finally:
        if window.poll() is None:
            window.kill()
            window.wait()
        if server is not None and server.is_running():
            for p in server.children(recursive=True) + [server]:
                p.kill()


def test_a_server_started_from_a_shell_outlives_nothing_it_was_not_told_to(tmp_path: Path) -> None:
    """Without --die-with a server keeps serving when the process that started it ends (a shell's nohup)."""
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import subprocess, sys
            p = subprocess.Popen([sys.executable, "-m", "core", "serve", {str(make_run(tmp_path / "runs"))!r},
                                  "--port", "0", "--workers", "1"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
            print(p.pid, p.stdout.readline().decode().strip(), flush=True)
        """),
        ],
        stdout=subprocess.PIPE,
        env=ENV,
        cwd=ROOT,
    )
    assert launcher.stdout is not None
    pid, url = launcher.stdout.readline().decode().split()
    launcher.wait(30)
    server = psutil.Process(int(pid))
    try:
        time.sleep(2.0)
        assert server.is_running() and server.status() != psutil.STATUS_ZOMBIE
        import httpx

        assert httpx.get(url + "/health", timeout=30).status_code == 200
    finally:
        server.send_signal(signal.SIGTERM)
        psutil.wait_procs([server], timeout=60)
