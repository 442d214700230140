"""Resume race and Race… while another process races the run (it holds the run's race lock): both off, their
tooltip says who races it; on again once that process lets the lock go."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.services.race.plan import plan_race
from core.services.race.race import Race, RaceRecord, races_of
from tests.app.flows.test_race import parent, template
from tests.core.services.race.test_race_lock import line, lock_held_elsewhere

pytestmark = pytest.mark.slow

__all__ = ["parent", "template"]  # the fixtures of test_race.py, used here too


def test_resume_race_is_off_with_its_reason_while_another_process_races_the_run(
    qtbot: Any, make_window: Any, parent: Path, live_children: Any
) -> None:
    stopped = Race(plan_race(parent, ["optim.lr=0.5x,2x"], rungs=[1]))
    stopped.request_stop()  # stopped before its first variant started: a race to resume
    assert stopped.run().state == "stopped"
    folder = stopped.folder
    window = make_window()
    resume, race = window.action_resume_race, window.action_race
    window.show_tab(window.runs_view)
    qtbot.waitUntil(lambda: window.runs_view.model.row_for(parent) >= 0, timeout=30_000)
    window.runs_view.select_runs([parent])
    qtbot.waitUntil(resume.isEnabled, timeout=10_000)
    assert "is running" not in resume.toolTip()

    with lock_held_elsewhere(parent, folder) as holder:  # `traindesk race PARENT --resume` in a terminal, say
        said = line(parent, folder, holder.pid)
        # the Runs table's next scan updates the actions: no click needed
        qtbot.waitUntil(lambda: not resume.isEnabled(), timeout=30_000)
        assert resume.toolTip() == said
        assert not race.isEnabled() and race.toolTip() == said
        window.race.resume_race()  # asked anyway (a shortcut, a menu left open): nothing starts
        assert not window.race.active and window.race.unfinished() is None
        # a race planned before the other process began: refused as it starts, with the same line
        window.race.start(plan_race(parent, ["optim.lr=0.3x,3x"], rungs=[1]))
        qtbot.waitUntil(lambda: said in window.banner.text, timeout=30_000)
        assert not window.race.active and races_of(parent) == [folder]

    qtbot.waitUntil(resume.isEnabled, timeout=30_000)  # its process ended: the lock went with it
    assert "is running" not in resume.toolTip() and race.isEnabled() and "is running" not in race.toolTip()
    assert RaceRecord.load(folder).state == "stopped" and races_of(parent) == [folder]
    qtbot.waitUntil(lambda: not live_children(), timeout=20_000)
