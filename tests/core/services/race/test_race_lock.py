"""One race process per run: a race holds the run's race lock while it runs; a second race on the run, new or
resumed, is one line and exit 2 until it ends, stops or its process dies."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from core.cli import main
from core.services.race.lock import RaceLock, RaceRunning, running_race
from core.services.race.plan import plan_race
from core.services.race.race import Race, RaceRecord, races_of, resumable
from tests.cli_run import core_env
from tests.core.services.race.test_race import parent

__all__ = ["parent"]  # the fixture of test_race.py, used here too

HOLD = (
    "import sys; from pathlib import Path; from core.services.race.lock import RaceLock; "
    "lock = RaceLock.acquire(Path(sys.argv[1]), Path(sys.argv[2])); print('held', flush=True); sys.stdin.read()"
)


@contextmanager
def lock_held_elsewhere(run: Path, folder: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holds ``run``'s race lock for the race in ``folder`` until the block ends (its stdin
    closes, it exits)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run), str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=core_env(),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def line(run: Path, folder: Path, pid: int) -> str:
    return f"race: {run.name}'s race {folder.name} is running (process {pid}); stop it first"


def files(run: Path) -> dict[str, bytes]:
    """Every file under ``run``, by its path inside it, with its bytes."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def test_the_lock_of_another_process_names_it_and_refuses_a_second_holder(tmp_path: Path) -> None:
    run, folder = tmp_path / "run", tmp_path / "run" / "races" / "20250101-120000"
    assert running_race(run) is None  # no race ever ran
    with lock_held_elsewhere(run, folder) as holder:
        running = running_race(run)
        assert running is not None and (running.stamp, running.pid) == (folder.name, holder.pid)
        assert running.line() == line(run, folder, holder.pid)
        with pytest.raises(RaceRunning, match=r"^race: run's race 20250101-120000 is running \(process \d+\)"):
            RaceLock.acquire(run, folder)
    assert running_race(run) is None  # its process ended: the kernel let the lock go
    lock = RaceLock.acquire(run, folder)
    try:
        assert running_race(run) is not None  # this process's own race counts too
    finally:
        lock.release()
    assert running_race(run) is None


@pytest.mark.slow
def test_resume_and_a_new_race_are_one_line_while_the_race_runs_and_resume_works_once_it_stopped(
    parent: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at_rung = threading.Event()
    race = Race(
        plan_race(parent, ["optim.lr=0.5x,2x"], rungs=[1]),
        say=lambda said: at_rung.set() if said.startswith("rung 1 of 1") else None,
    )
    race.pause()  # it holds its lock at its first rung; no variant starts until it resumes or stops
    thread = threading.Thread(target=race.run, name="test-race")
    thread.start()
    try:
        assert at_rung.wait(60), "the race did not reach its first rung"
        folder = race.folder
        assert races_of(parent) == [folder] and RaceRecord.load(folder).state == "running"
        before = files(parent)
        expected = line(parent, folder, os.getpid())
        with pytest.raises(RaceRunning, match="is running"):
            resumable(parent)
        assert main(["race", str(parent), "--resume"]) == 2
        out, err = capsys.readouterr()
        assert (out, err) == ("", expected + "\n")
        # a new race on the run would install a second winner: refused the same way, before a word is said
        assert main(["race", str(parent), "--vary", "optim.lr=0.3x,3x", "--rungs", "1"]) == 2
        out, err = capsys.readouterr()
        assert (out, err) == ("", expected + "\n")
        assert files(parent) == before and races_of(parent) == [folder], "nothing started, nothing written"
    finally:
        race.stop()
        thread.join(60)
    assert not thread.is_alive()
    assert RaceRecord.load(folder).state == "stopped" and running_race(parent) is None
    assert resumable(parent) == folder
    assert main(["race", str(parent), "--resume"]) == 0
    out, err = capsys.readouterr()
    assert out.strip().splitlines()[-1] == str(parent), err
    assert RaceRecord.load(folder).state == "done" and running_race(parent) is None
    assert not [t.name for t in threading.enumerate() if t.name.startswith(("test-race", "traindesk-race"))]
