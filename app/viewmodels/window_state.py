"""What the window may do now, derived from what it is doing (no Qt: testable from a table of states).

What the window itself is doing (probing, preparing a run, closing, showing a
past run) lives in one :class:`WindowModel`, which announces every change; the
run controller announces the run's. After every change, failures included, the
window gathers the facts into a :class:`WindowState` and applies what
:func:`derive` returns: every action's enabled state, the config panel's mode
and the status text. Nothing else turns an action on or off, so no error path
can leave the toolbar stuck.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

STATE_TEXT = {
    "idle": "Ready",
    "starting": "Starting…",
    "running": "Running",
    "paused": "Paused",
    "stopping": "Stopping…",
    "finishing": "Saving…",
    "finished": "Finished",
    "stopped": "Stopped",
    "failed": "Failed",
}
END_STATES = ("finished", "stopped", "failed")
RACE_TEXT = {"running": "Racing", "paused": "Race paused", "stopping": "Stopping the race…"}

# every action the window switches, by object name
ACTIONS = (
    "action_start",
    "action_pause",
    "action_resume",
    "action_stop",
    "action_export",
    "action_open_config",
    "action_save_config",
    "action_open_run",
    "action_runs_dir",
    "action_clear_plots",
    "action_continue_run",
    "action_find_fastest",
    "action_fork",
    "action_race",
    "action_resume_race",
    "action_compare",
    "menu_recent_runs",
)


@dataclass(frozen=True)
class WindowState:
    """The facts the actions depend on."""

    run_state: str = "idle"  # the run controller's state
    run_active: bool = False  # a run of ours or an attached one is going on
    attached: bool = False  # that run is another process's
    advising: bool = False  # "Find fastest" is probing
    cancelling: bool = False  # ... and was asked to stop
    downloading: bool = False  # a backbone's weights are downloading before a run starts
    preparing: bool = False  # reading a run's history just before continuing or forking it
    loading: bool = False  # reading a past run to show it
    closing: bool = False  # the window closes once the run has ended
    run_config_shown: bool = False  # the panel shows a run's settings, read-only
    config_error: str = ""  # why the panel's settings cannot start a run ("" when they can)
    viewing: str = ""  # the past run on screen (its folder's name), if any
    selected_runs: int = 0  # rows selected in Runs
    continuable: bool = False  # the run on screen can continue from its checkpoint
    fork_source: bool = False  # there is a run to fork from (a paused one of ours, or one on screen)
    export_target: bool = False  # there is a trained model on screen to export
    export_available: bool = True  # the export feature is installed
    race: str = ""  # a race of the window's: running | paused | stopping ("" when none)
    race_source: bool = False  # there is a run to race (a past one with a checkpoint, of one model, or race_live)
    race_live: bool = False  # ... and it is the window's own run, paused or running: Race… stops it first
    race_resumable: bool = False  # the run Race… would race has a race that stopped before its end

    @property
    def busy(self) -> bool:
        """Something uses the cores or is about to start a run: nothing else may start."""
        return self.run_active or self.advising or self.preparing or self.downloading or bool(self.race)


@dataclass(frozen=True)
class Enablement:
    enabled: dict[str, bool] = field(default_factory=dict)
    panel_mode: str = "edit"  # edit | live | locked | view (see ConfigPanel)
    status: str = "Ready"


def derive(s: WindowState) -> Enablement:
    """Every action's enabled state, the panel's mode and the status text for the state ``s``."""
    busy = s.busy
    can_start = not busy and not s.closing and not s.run_config_shown and not s.config_error
    enabled = {
        "action_start": can_start,
        "action_find_fastest": can_start,
        # a race is steered as a run is: Pause, Resume and Stop act on every variant
        "action_pause": s.run_state == "running" or s.race == "running",
        "action_resume": s.run_state == "paused" or s.race == "paused",
        "action_stop": s.run_state in ("starting", "running", "paused") or s.race in ("running", "paused"),
        "action_continue_run": not busy and not s.closing and s.continuable,
        "action_fork": not s.closing and not s.advising and not s.preparing and not s.race and s.fork_source,
        # the window's own run, paused or running, races too: Race… stops it first (nothing else may be going on)
        "action_race": not s.closing
        and s.race_source
        and (not busy or (s.race_live and not (s.advising or s.preparing or s.downloading or s.race))),
        "action_resume_race": not busy and not s.closing and s.race_resumable,
        "action_compare": s.selected_runs >= 2,
        "action_export": s.export_available and s.export_target and not s.run_active and not s.race,
        "action_open_config": not busy,
        "action_save_config": True,
        "action_open_run": not busy,
        "menu_recent_runs": not busy,
        "action_runs_dir": not busy,
        "action_clear_plots": not busy,
    }
    if busy:  # a paused run of ours takes new learning rate, weight decay, batch size and epochs
        mode = "live" if s.run_state == "paused" and not s.attached and s.run_active else "locked"
    else:
        mode = "view" if s.run_config_shown else "edit"
    return Enablement(enabled, mode, status_text(s))


def status_text(s: WindowState) -> str:
    if s.advising:
        return "Cancelling…" if s.cancelling else "Finding the fastest setting…"
    if s.downloading:
        return "Cancelling…" if s.cancelling else "Downloading the backbone's weights…"
    if s.race:
        return RACE_TEXT.get(s.race, s.race)
    if s.config_error and not s.run_active and not s.run_config_shown and not s.preparing:
        return f"Cannot start: {s.config_error}"  # why Start is off, where the eye goes (the panel may scroll)
    if s.run_active or (s.run_state in END_STATES and not s.viewing):
        text = STATE_TEXT.get(s.run_state, s.run_state)
        return f"{text} (attached)" if s.attached else text
    if s.loading or s.preparing:
        return "Loading run…"
    if s.viewing and s.run_config_shown:  # "Back to mine" or "Use these settings": the user's own again
        return f"Viewing {s.viewing}"
    return STATE_TEXT.get(s.run_state, s.run_state)


@dataclass(frozen=True)
class Activity:
    """What the window is doing besides the run (the run controller owns the run's state)."""

    advising: bool = False  # "Find fastest" is probing
    cancelling: bool = False  # ... and was asked to stop
    downloading: bool = False  # a backbone's weights are downloading before a run starts
    preparing: bool = False  # reading a run's history before continuing or forking it
    closing: bool = False  # the window closes once the run has ended
    viewing_run: Path | None = None  # the past run on screen
    viewing_summary: dict[str, Any] | None = None  # ... and its summary
    after_end: Callable[[], None] | None = None  # what to do once the run on screen has ended (fork a paused run)


class WindowModel:
    """The window's :class:`Activity`, evented: listeners hear of every change, once per ``update``.

    Read the fields as attributes (``model.preparing``); change them with
    ``update(preparing=True)``. An update that changes nothing says nothing.
    """

    def __init__(self) -> None:
        self._now = Activity()
        self._listeners: list[Callable[[Activity], Any]] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._now, name)

    @property
    def now(self) -> Activity:
        return self._now

    def connect(self, listener: Callable[[Activity], Any]) -> None:
        self._listeners.append(listener)

    def update(self, **changes: Any) -> None:
        new = replace(self._now, **changes)
        if new == self._now:
            return
        self._now = new
        for listener in list(self._listeners):
            listener(new)

    def take_after_end(self) -> Callable[[], None] | None:
        """What was to happen once the run ended, forgotten as it is handed over."""
        after = self._now.after_end
        if after is not None:
            self.update(after_end=None)
        return after

    def facts(self) -> dict[str, Any]:
        """The fields of a :class:`WindowState` this model holds."""
        a = self._now
        return {
            "advising": a.advising,
            "cancelling": a.cancelling,
            "downloading": a.downloading,
            "preparing": a.preparing,
            "closing": a.closing,
            "viewing": a.viewing_run.name if a.viewing_run is not None else "",
        }
