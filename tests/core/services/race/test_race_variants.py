"""A race's variants steered while it runs: a Pause that comes while a variant's session is built, a variant
stopped from outside the race, and the race's record read from another thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.config import Config
from core.services.race.plan import RacePlan, Variant, plan_race
from core.services.race.race import Entry, Race, RaceRecord
from core.session import Session
from tests.core.services.race.test_race import parent_run

ENDED = ("finished", "stopped", "failed")


@pytest.fixture
def parent(runs_dir: Path) -> Path:
    return parent_run(runs_dir, epochs=1)


def _until(check: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)


def _racing(race: Race, as_fork: bool = False) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["record"] = race.run(as_fork)
        except BaseException as exc:  # the test says what it was
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="test-race")
    thread.start()
    return thread, outcome


@pytest.mark.slow
def test_a_pause_that_comes_while_a_variant_is_built_pauses_it_once_it_starts(parent: Path) -> None:
    built: list[Session] = []

    def paused_meanwhile(_entry: Entry, session: Session) -> None:
        if not built:
            built.append(session)
            race.pause()  # the window's Pause, while the race thread builds this variant's session

    race = Race(plan_race(parent, ["optim.lr=0.5x,2x"], rungs=[1]), on_variant=paused_meanwhile, slots=1)
    thread, outcome = _racing(race)
    try:
        _until(lambda: bool(built) and built[0].state in ("paused", *ENDED))
        assert built and built[0].state == "paused", "a variant started after Pause trains on"
        assert race.paused
        race.resume()
        thread.join(180)
    finally:
        race.stop()
        thread.join(180)
    assert not thread.is_alive() and "error" not in outcome, outcome
    assert outcome["record"].state == "done"


@pytest.mark.slow
def test_a_variant_stopped_from_outside_the_race_is_out_not_ranked_on_its_last_rung(parent: Path) -> None:
    stopped: list[int] = []

    def stop_it(entry: Entry, session: Session) -> None:
        if len(entry.figures) == 1 and not stopped:  # the first variant of the second rung
            stopped.append(entry.index)
            session.request_stop()  # as `traindesk stop` on its run folder asks it, before its rung's end

    race = Race(plan_race(parent, ["optim.lr=0.5x,1x,1.5x,2x"], rungs=[1, 2]), on_variant=stop_it, slots=1)
    record = race.run()
    [index] = stopped
    entry = record.variants[index]
    assert entry.out == "rung 2: stopped outside the race", entry.out
    assert len(entry.figures) == 1, "no figure for the rung it did not finish"
    [winner] = record.alive()
    assert record.winner == winner.index != index and len(winner.figures) == 2


def test_the_races_record_is_read_as_a_copy_taken_between_its_changes(tmp_path: Path) -> None:
    variants = [Variant(0, {"optim.lr": 0.01}, "lr 0.01"), Variant(1, {}, "as is")]
    race = Race(RacePlan(tmp_path, Config(), 1, 10, variants, [1], metric="val_accuracy", branch_step=10))
    shot = race.snapshot()
    shot.variants[0].figures.append(0.5)
    assert race.record.variants[0].figures == [], "a copy: what the window does to it changes no race"
    taken: list[RaceRecord] = []
    reader = threading.Thread(target=lambda: taken.append(race.snapshot()))
    with race.changing():  # a race thread part-way through a variant's change: its figure, not yet its reason
        race.record.variants[1].figures.append(0.9)
        reader.start()
        reader.join(0.3)
        assert not taken, "a copy taken part-way through a change"
        race.record.variants[1].out = "rung 1: 0.9000 < 0.9100"
    reader.join(10)
    [copy] = taken
    assert copy.variants[1].figures == [0.9] and copy.variants[1].out.startswith("rung 1")
