"""Faults with real processes and real signals: nothing hangs, leaks or loses the last checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

from core.config import Config, apply_overrides
from core.errors import RunError
from core.host.lifeline import sweep_orphan_segments
from core.runfiles.writing import read_metrics
from core.session import RecordBuffer, Session
from core.training.checkpoint import load_checkpoint, model_from_checkpoint, save_checkpoint
from tests.cli_run import core_env, run_core, start_core

ROOT = Path(__file__).resolve().parents[3]
ENV = core_env()


def cfg_for(*overrides: str) -> Config:
    return apply_overrides(Config(), list(overrides))


def wait_for_steps(buf: RecordBuffer, timeout: float = 60) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += buf.drain(0.1)
        if any(r["kind"] == "step" for r in seen):
            return seen
    raise AssertionError("no step records")


def started_session(cfg: Config, runs_dir: Path, **kwargs: Any) -> tuple[Session, RecordBuffer]:
    session = Session(cfg, runs_dir=runs_dir, **kwargs)
    buf = RecordBuffer()
    session.add_listener(buf.put)
    session.start()
    return session, buf


def custom_model(tmp_path: Path, body: str) -> str:
    """A custom model file whose forward runs ``body`` (with a call counter ``n``) first."""
    path = tmp_path / "faulty.py"
    path.write_text(
        textwrap.dedent("""
        import math, os, time
        import torch
        from torch import nn

        class Faulty(nn.Module):
            def __init__(self, shape, classes):
                super().__init__()
                self.lin = nn.Linear(math.prod(shape), classes)
                self.n = 0

            def forward(self, x):
                self.n += 1
                n = self.n
                if self.training:
        {body}
                return self.lin(x.flatten(1))

        def make(shape, classes):
            return Faulty(shape, classes)
    """).format(body=textwrap.indent(textwrap.dedent(body), " " * 12))
    )
    return f"model.kind=custom:{path}:make"


@pytest.mark.parametrize("strategy", ["hogwild", "ddp"])
def test_sigkilled_worker_fails_the_run_quickly(strategy: str, runs_dir: Path) -> None:
    session, buf = started_session(cfg_for(f"parallel.strategy={strategy}", "train.epochs=100000"), runs_dir)
    wait_for_steps(buf)
    victim = session.worker_pids()[1]
    os.kill(victim, signal.SIGKILL)
    t0 = time.monotonic()
    status = session.wait(30)
    assert status == "failed"
    records = buf.drain(0)
    failed_at = next(r["t"] for r in records if r["kind"] == "state" and r["worker"] == 1 and r["state"] == "failed")
    assert failed_at - (time.time() - (time.monotonic() - t0)) < 10.0  # noticed in seconds, not at a stall timeout
    assert "worker 1" in session.error and "SIGKILL" in session.error
    assert session.summary["status"] == "failed" and session.summary["error"] == session.error
    assert session.worker_pids() == []
    model_from_checkpoint(load_checkpoint(session.run_dir))  # the checkpoint is there and loads


def test_exception_in_user_code_is_reported_with_traceback(tmp_path: Path, runs_dir: Path) -> None:
    kind = custom_model(
        tmp_path,
        """
        if n == 30:
            raise ValueError("bad batch in user code")
    """,
    )
    session, buf = started_session(cfg_for(kind, "parallel.strategy=single", "train.epochs=50"), runs_dir)
    assert session.wait(60) == "failed"
    assert session.error == "worker 0: ValueError: bad batch in user code"
    logs = [r for r in read_metrics(session.run_dir / "metrics.jsonl") if r["kind"] == "log"]
    assert any("Traceback" in r["message"] and "faulty.py" in r["message"] for r in logs)


def test_cli_exits_1_with_one_line_reason_when_a_worker_fails(tmp_path: Path) -> None:
    kind = custom_model(
        tmp_path,
        """
        if n == 5:
            os.kill(os.getpid(), 9)
    """,
    )
    res = run_core(
        "train",
        "--set",
        kind,
        "--runs-dir",
        str(tmp_path / "r"),
        "--strategy",
        "hogwild",
        "--epochs",
        "5",
        timeout=120,
        env=ENV,
        cwd=tmp_path,
    )
    assert res.returncode == 1
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "died: killed by SIGKILL" in errors[0]
    assert "Traceback" not in res.stderr


def _shm() -> set[str]:
    """Named shared memory and semaphores; TrainDesk shares tensors by descriptor, so it adds none.

    scikit-learn's joblib (loky) creates named semaphores of its own, which no process
    can unlink once SIGKILLed, and other programs on the machine add theirs: not ours.
    """
    names = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    return {n for n in names if not n.startswith("sem.loky-")}


@pytest.mark.parametrize("loader_workers", [0, 2])
def test_workers_exit_when_the_parent_is_killed(tmp_path: Path, loader_workers: int) -> None:
    source = "builtin:digits"
    if loader_workers:
        from PIL import Image

        for cls in ("a", "b"):
            (tmp_path / "img" / cls).mkdir(parents=True)
            for i in range(40):
                Image.new("L", (8, 8), color=40 if cls == "a" else 200).save(tmp_path / "img" / cls / f"{i}.png")
        source = f"images:{tmp_path / 'img'}"
    before = _shm()
    proc = start_core(
        "train",
        "--epochs",
        "100000",
        "--runs-dir",
        str(tmp_path / "r"),
        "--set",
        f"data.source={source}",
        "--set",
        f"data.loader_workers={loader_workers}",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ENV,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        family: list[int] = []
        # forkserver + 2 workers (+ their loader workers) + resource tracker: all up once training has begun (a
        # worker may take its first step before the other worker's loader processes exist, on a loaded machine)
        expected = 3 + 2 * loader_workers
        while time.monotonic() < deadline:
            family = _descendants(proc.pid)
            metrics = list((tmp_path / "r").glob("*/metrics.jsonl"))
            if metrics and '"kind":"step"' in metrics[0].read_text() and len(family) >= expected:
                break
            time.sleep(0.2)
        family = _descendants(proc.pid)
        assert len(family) >= expected
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 5
        alive = family
        while alive and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = [p for p in family if _alive(p)]
        assert alive == [], f"processes outlived their parent by 5 s: {[_cmdline(p) for p in alive]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # a segment torch was naming at the kill (opened, not yet unlinked) is the next run's start to remove
    sweep_orphan_segments()
    assert _shm() - before == set()


def test_the_next_start_removes_segments_of_processes_that_are_gone(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan, live = tmp_path / f"torch_{dead.pid}_123_0", tmp_path / f"torch_{os.getpid()}_123_0"
    other = tmp_path / "sem.someone-else"
    for path in (orphan, live, other):
        path.write_bytes(b"x")
    assert sweep_orphan_segments(str(tmp_path)) == [orphan.name]
    assert not orphan.exists() and live.exists() and other.exists()


def _cmdline(pid: int) -> str:
    try:
        return f"{pid}: " + " ".join(psutil.Process(pid).cmdline())[:120]
    except psutil.Error:
        return f"{pid}: gone"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _descendants(root: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(root).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def test_stalled_worker_is_reported_and_stop_still_returns(tmp_path: Path, runs_dir: Path) -> None:
    kind = custom_model(
        tmp_path,
        """
        if n == 20:
            time.sleep(3600)  # a deadlock, as far as anyone can tell
    """,
    )
    session, buf = started_session(
        cfg_for(kind, "parallel.strategy=single", "train.epochs=1000", "parallel.stall_timeout=1.0"), runs_dir
    )
    try:
        deadline = time.monotonic() + 30
        warned = []
        while not warned and time.monotonic() < deadline:
            warned = [r for r in buf.drain(0.1) if r["kind"] == "log" and "stalled" in r["message"]]
        assert warned and warned[0]["worker"] == 0 and warned[0]["level"] == "warning"
        assert session.stalled == {0}
    finally:
        t0 = time.monotonic()
        status = session.stop(timeout=1.0)
    assert time.monotonic() - t0 < 30  # the worker sleeps an hour: stop did not wait for it
    assert status == "stopped"
    assert session.worker_pids() == []


def test_non_finite_weights_never_replace_the_last_checkpoint(runs_dir: Path) -> None:
    session = Session(cfg_for("parallel.strategy=single", "train.epochs=2"), runs_dir=runs_dir)
    session.start()
    assert session.wait(60) == "finished"
    path = session.run_dir / "checkpoints" / "last.pt"
    before = path.read_bytes()
    with torch.no_grad():
        next(session._ctx.models[0].parameters()).fill_(float("nan"))
    session._write_checkpoint(session._progress())
    assert path.read_bytes() == before


def test_resume_after_stop_reaches_the_uninterrupted_accuracy(runs_dir: Path) -> None:
    cfg = cfg_for("parallel.strategy=single", "train.epochs=12", "model.dropout=0.1", "train.seed=7")
    straight = Session(cfg, runs_dir=runs_dir / "a")
    straight.start()
    assert straight.wait(120) == "finished"

    first, buf = started_session(cfg, runs_dir / "b")
    deadline = time.monotonic() + 60
    epochs = 0
    while epochs < 4 and time.monotonic() < deadline:
        epochs = max([epochs] + [r["epoch"] for r in buf.drain(0.1) if r["kind"] == "eval"])
    assert first.stop(10) == "stopped"
    ckpt = load_checkpoint(first.run_dir)
    assert ckpt["optimizers"][0] is not None and ckpt["rng"][0] is not None
    assert 4 <= ckpt["progress"][0]["epoch"] <= 12

    resumed = Session.from_run(first.run_dir)
    resumed.start()
    assert resumed.wait(120) == "finished"
    assert resumed.run_dir == first.run_dir
    a = straight.summary["final"]["val_accuracy"]
    b = resumed.summary["final"]["val_accuracy"]
    assert resumed.summary["epochs_done"] == 12
    assert abs(a - b) <= 0.02, (a, b)
    states = [
        r["state"]
        for r in read_metrics(first.run_dir / "metrics.jsonl")
        if r["kind"] == "state" and r["worker"] is None
    ]
    assert states.count("starting") == 2 and states[-1] == "finished"


def test_resume_refuses_a_finished_run_and_bad_checkpoints(tmp_path: Path, runs_dir: Path) -> None:
    session = Session(cfg_for("parallel.strategy=single", "train.epochs=1"), runs_dir=runs_dir)
    session.start()
    assert session.wait(60) == "finished"
    with pytest.raises(RunError, match="already finished all 1 epochs; pass --epochs N"):
        Session.from_run(session.run_dir)
    assert Session.from_run(session.run_dir, epochs=2).config.train.epochs == 2
    truncated = tmp_path / "trunc.pt"
    truncated.write_bytes((session.run_dir / "checkpoints" / "last.pt").read_bytes()[:500])
    with pytest.raises(RunError, match="not a readable checkpoint"):
        Session.from_run(truncated)


def test_killed_mid_checkpoint_write_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"model": {"w": torch.zeros(10)}, "round": -1})
    code = textwrap.dedent(f"""
        import torch, sys
        from core.training.checkpoint import save_checkpoint
        big = torch.randn(8_000_000)  # ~32 MB: each write takes a while
        i = 0
        print("ready", flush=True)
        while True:
            print("writing", i, flush=True)
            save_checkpoint({str(path)!r}, {{"model": {{"w": big}}, "round": i}})
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert proc.stdout.readline().strip() == "ready"
        # freeze the writer while a temp file is being written, then kill it there
        deadline = time.monotonic() + 30
        caught = False
        while not caught and time.monotonic() < deadline:
            if list(tmp_path.glob(".last.pt.*.tmp")):
                os.kill(proc.pid, signal.SIGSTOP)
                while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED:
                    time.sleep(0.001)
                caught = bool(list(tmp_path.glob(".last.pt.*.tmp")))  # still mid-write once frozen
                if not caught:
                    os.kill(proc.pid, signal.SIGCONT)
            else:
                time.sleep(0.005)
        assert caught, "never caught a write in progress"
        proc.kill()
        proc.wait(10)
        assert proc.stdout is not None
        rounds = [int(line.split()[1]) for line in proc.stdout.read().splitlines() if line.startswith("writing")]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    killed_in = rounds[-1]  # the round being written when the writer was killed
    data = load_checkpoint(path)
    assert data["round"] == killed_in - 1  # the one before it, whole
    assert data["model"]["w"].numel() == (10 if killed_in == 0 else 8_000_000)


def test_runs_dir_problems_are_reported_before_training(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    res = run_core(
        "train",
        "--runs-dir",
        str(blocker / "runs"),
        timeout=120,
        env=ENV,
        cwd=tmp_path,
    )
    assert res.returncode == 2
    assert res.stderr.strip().startswith("runs: cannot use runs directory") and "file/runs" in res.stderr


def test_a_second_run_in_the_same_runs_dir_is_refused(runs_dir: Path) -> None:
    first, buf = started_session(cfg_for("train.epochs=100000"), runs_dir)
    try:
        wait_for_steps(buf)
        second = Session(cfg_for("train.epochs=1"), runs_dir=runs_dir)
        with pytest.raises(RunError, match="another run is active in .*pid"):
            second.start()
        assert second.state == "failed" and second.run_dir is None  # refused before any directory
    finally:
        first.stop(10)
    third = Session(cfg_for("train.epochs=1"), runs_dir=runs_dir)
    third.start()
    assert third.wait(60) == "finished"
    runs = [p for p in runs_dir.iterdir() if p.is_dir()]
    assert len(runs) == 2
    assert json.loads((first.run_dir / "summary.json").read_text())["status"] == "stopped"


def test_a_batch_a_dead_worker_left_half_sent_does_not_hang_the_reader() -> None:
    """A worker killed while its feeder wrote a large batch leaves part of it in the pipe."""
    import multiprocessing
    import os
    import pickle
    import queue as queue_mod
    import struct
    import time

    from core.session.machinery.receive import QueueBroken, receive

    q = multiprocessing.get_context("spawn").Queue()
    try:
        q.put([{"kind": "step", "worker": 0}])
        assert receive(q, 5.0, lambda: False) == [{"kind": "step", "worker": 0}]
        with pytest.raises(queue_mod.Empty):
            receive(q, 0.05, lambda: True)
        q._writer.send_bytes(b"x" * 10)  # a whole frame of 10 bytes, then a frame cut after 10 of 100 bytes
        os.write(q._writer.fileno(), struct.pack("!i", 100) + b"y" * 10)
        with pytest.raises(pickle.UnpicklingError):  # the 10 bytes are no pickle
            receive(q, 1.0, lambda: True)
        t0 = time.monotonic()
        with pytest.raises(QueueBroken, match="10 of 100 bytes"):
            receive(q, 1.0, lambda: True)
        assert time.monotonic() - t0 < 10
    finally:
        q.close()
        q.join_thread()
