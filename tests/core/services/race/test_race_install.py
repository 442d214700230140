"""The winner's install: a race broken part-way through it (a crash, a full disk) and resumed finishes it once;
a run that trains again while it raced keeps its checkpoint."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

import core.services.race.install as install
from core.errors import RunError
from core.runfiles.layout import RunDir
from core.runfiles.writing import hold_lock, release_lock
from core.services.race.plan import plan_race
from core.services.race.race import Race, RaceRecord, latest_unfinished, plan_of
from core.session import Session
from tests.core.services.race.test_race import parent_run

pytestmark = pytest.mark.slow

VARY = ["optim.lr=0.5x,2x"]


@pytest.fixture
def parent(runs_dir: Path) -> Path:
    return parent_run(runs_dir, epochs=1)


def _markers(run: Path) -> list[str]:
    return [r["message"] for r in RunDir(run).read_records() if r.get("topic") == "race"]


def _resume(parent: Path) -> tuple[Race, RaceRecord]:
    folder = latest_unfinished(parent)
    assert folder is not None, "a race broken while it installed its winner is resumable"
    race = Race.resumed(plan_of(folder), folder)
    return race, race.run(as_fork=race.record.as_fork)


def _break_summary(parent: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's summary cannot be written: the records went in, the install stops before its last step."""
    real = install.write_summary

    def broken(path: Path, summary: dict[str, Any]) -> None:
        if Path(path) == parent:
            raise OSError("no space left on device")
        real(path, summary)

    monkeypatch.setattr(install, "write_summary", broken)


def _break_records(parent: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process dies half way through appending the winner's records."""
    real = install.append_lines

    def broken(path: Path, lines: list[str]) -> None:
        real(path, lines[: len(lines) // 2])
        raise OSError("killed while writing")

    monkeypatch.setattr(install, "append_lines", broken)


@pytest.mark.parametrize("breaks", [_break_summary, _break_records], ids=["summary", "records"])
def test_an_install_broken_part_way_finishes_once_when_the_race_resumes(
    parent: Path, monkeypatch: pytest.MonkeyPatch, breaks: Any
) -> None:
    before = RunDir(parent).read_records()
    race = Race(plan_race(parent, VARY, rungs=[1]))
    breaks(parent, monkeypatch)
    with pytest.raises(OSError):
        race.run()
    monkeypatch.undo()
    chosen = RaceRecord.load(race.folder).winner
    again, record = _resume(parent)
    assert record.state == "done" and record.winner is not None
    winner = RunDir(race.folder / record.variants[record.winner].run)
    marker = f"race: 2 variants from step {race.plan.branch_step:,}, won by {record.variants[record.winner].label}"
    assert _markers(parent) == [marker], "the marker and the winner's records go in once"
    assert chosen == record.winner, "the winner was chosen, and kept, before its install began"
    theirs = [r for r in winner.read_records() if r.get("kind") != "state" or r.get("worker") is not None]
    assert len(RunDir(parent).read_records()) == len(before) + 1 + len(theirs)
    assert [r["marker"] for r in (RunDir(parent).read_summary() or {})["races"]] == [marker]
    assert again.winner_dir == parent and latest_unfinished(parent) is None


def test_a_fork_install_broken_after_its_move_finishes_when_the_race_resumes(
    parent: Path, runs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = RunDir(parent).last.read_bytes()
    race = Race(plan_race(parent, VARY, rungs=[1]))
    real = install.restore_settings

    def broken(*args: Any) -> Any:
        raise OSError("killed after the move")

    monkeypatch.setattr(install, "restore_settings", broken)
    with pytest.raises(OSError, match="after the move"):
        race.run(as_fork=True)
    monkeypatch.setattr(install, "restore_settings", real)
    again, record = _resume(parent)
    forks = [p for p in runs_dir.iterdir() if p.name.endswith("-race")]
    assert record.state == "done" and len(forks) == 1 and again.winner_dir == forks[0]
    assert [r["winner"] for r in (RunDir(forks[0]).read_summary() or {})["races"]] == [record.winner]
    assert "threads_per_worker = 0" in RunDir(forks[0]).config.read_text(), "the fork has the run's own settings"
    assert RunDir(parent).last.read_bytes() == before


def test_a_run_training_again_when_its_race_ends_keeps_its_checkpoint_until_the_race_resumes(parent: Path) -> None:
    plan = plan_race(parent, VARY, rungs=[1])  # the run is idle now
    held: list[int] = []
    once = threading.Lock()  # the variants start on the race's threads at once: one of them takes the run's lock

    def run_starts_again(_entry: object, _session: Session) -> None:
        with once:
            if not held:  # as Continue on it does, in another process, while the race trains
                fd, _ = hold_lock(parent.parent / ".active", f"pid {os.getpid()}, run {parent.name}")
                assert fd is not None
                held.append(fd)

    race = Race(plan, on_variant=run_starts_again)
    last, metrics = RunDir(parent).last.read_bytes(), RunDir(parent).metrics.read_bytes()
    try:
        with pytest.raises(RunError) as raised:
            race.run()
    finally:
        for fd in held:
            release_lock(fd)
    line = str(raised.value)
    assert line.startswith(f"race: {parent.name} is training again (process {os.getpid()})") and "\n" not in line
    assert "--resume" in line
    assert RunDir(parent).last.read_bytes() == last and RunDir(parent).metrics.read_bytes() == metrics
    assert RaceRecord.load(race.folder).state == "stopped"
    _again, record = _resume(parent)
    assert record.state == "done" and len(_markers(parent)) == 1
