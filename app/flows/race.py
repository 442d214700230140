"""Race…: clones of a run's checkpoint, each with other settings, trained side by side; the worse half stops at
each rung and the best goes on as the run, or as a fork (``core.services.race``), shown live on the Training tab.

The Race dialog (app.flows.race_dialog) gives a ``RacePlan``; the parent's records are read off the GUI thread
and drawn, then ``Race.run`` (it blocks) runs on a ``BackgroundCalls`` thread. The race's threads never touch
Qt: each variant's session hands its records to a deque, ``say`` its lines to another, and a GUI-thread QTimer
drains both every ``POLL_MS`` and compares a copy of the race's record (``Race.snapshot``) with what it showed: a variant that is out turns
grey with its reason, the leader is drawn bold, the status bar says the rung. Pause and Resume go to the race
at once (they do not block); Stop waits for each variant's checkpoint, so it runs on a thread too.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer

from app.flows.race_dialog import RaceDialog, RaceRequest
from app.flows.run_controller import lower_priority
from app.viewmodels.race_progress import (
    PARENT,
    RaceCurves,
    curve_of,
    done_fraction,
    groups,
    leader,
    out_reasons,
    planned_epochs,
    snapshot,
    status_line,
)
from core.config import ConfigError, load_config
from core.services.race.lock import RaceRunning, RunningRace, running_race
from core.services.race.plan import RACEABLE, RacePlan, plan_race
from core.services.race.race import Entry, Race, RaceRecord, plan_of, resumable
from core.services.runs.files import LOG
from core.services.runs.past import PastRun, RunDir, display_name, read_config, read_past_run

if TYPE_CHECKING:
    from app.flows.window_port import WindowPort

POLL_MS = 150  # records, lines and the race's record are taken this often (the plots pace their own frames)


class RaceFlow(QObject):
    """One race at a time, from the dialog to its winner."""

    def __init__(self, window: WindowPort) -> None:
        super().__init__(window.window())
        self.window = window
        self.race: Race | None = None
        self.curves: RaceCurves | None = None
        self._planned = 0  # the epochs the race trains in all, variants together
        self._inbox: deque[tuple[int, list[dict[str, Any]]]] = deque()  # (variant, records), from its session
        self._said: deque[str] = deque()  # the race's lines, from its thread
        self._shown: tuple[Any, ...] = ()
        self._reniced: set[int] = set()
        self._stopping = False
        self.timer = QTimer(self, interval=POLL_MS)
        self.timer.timeout.connect(self.poll)

    # -- what the window asks ----------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """A race of the window's has started and not yet been reported ended."""
        return self.race is not None

    @property
    def state(self) -> str:
        """running | paused | stopping, "" without a race."""
        if self.race is None:
            return ""
        if self._stopping or self.race.stopped:
            return "stopping"
        return "paused" if self.race.paused else "running"

    def active_runs(self) -> set[Path]:
        return {Path(self.race.plan.run)} if self.race is not None else set()

    def _live(self) -> Path | None:
        """The window's own run, paused or running: Race… stops it first, then races from the checkpoint its
        stop writes."""
        c = self.window.controller
        if c.active and not c.attached and c.state in ("running", "paused") and not self.active:
            return c.run_dir
        return None

    def _candidate(self) -> RunDir | None:
        w = self.window
        if w.controller.active or self.active:
            return None
        run = w.continue_fork.candidate()
        return run if run is not None and run.has_weights() else None

    def source(self) -> Path | None:
        """The run Race… starts from: the window's own run, paused or running; else the one selected in Runs
        (that tab shown), else the one on screen, with a checkpoint and no search (a sweep races from its best
        worker)."""
        live = self._live()
        if live is not None:
            session = self.window.controller.session
            strategy = session.config.parallel.strategy if session is not None else None
            return live if strategy in RACEABLE else None
        run = self._candidate()
        if run is None or self.elsewhere() is not None:
            return None
        strategy = (run.read_summary() or {}).get("strategy")
        return run.path if strategy is None or strategy in RACEABLE else None

    def live_source(self) -> bool:
        """Race… races the window's own run, which it stops first."""
        return self._live() is not None and self.source() is not None

    def elsewhere(self) -> RunningRace | None:
        """A race of the run Race… would race that another process runs now (``traindesk race``, another
        window): neither Race… nor Resume race starts a second one on it."""
        if self.active or self.window.controller.active:
            return None
        run = self._candidate()
        return running_race(run.path) if run is not None else None

    def unfinished(self) -> Path | None:
        """The folder of the newest race of the run Race… would race that stopped before its end (Stop, the
        window closed, its process killed) and that no process races now: Resume race goes on with it."""
        if self.active or self.window.controller.active:
            return None
        run = self._candidate()
        if run is None:
            return None
        try:
            return resumable(run.path)
        except RaceRunning:  # another process races the run: Resume race says so (resume_why_not)
            return None
        except (OSError, ValueError, TypeError, KeyError):  # a race.json of another version, or half written
            return None

    def resume_why_not(self) -> str:
        """Why Resume race is off, where a reason helps: the run's race runs in another process."""
        running = self.elsewhere()
        return running.line() if running is not None else ""

    def why_not(self) -> str:
        """Why Race… is off, where a reason helps ("" otherwise)."""
        c = self.window.controller
        if c.active and c.attached:
            return "Race…: the run is another process's; stop it there, then race from the checkpoint its stop writes"
        running = self.elsewhere()
        if running is not None:
            return running.line()
        session = c.session if c.active else None
        run = self._candidate()
        strategy = (run.read_summary() or {}).get("strategy") if run is not None else None
        if session is not None:
            strategy = session.config.parallel.strategy
        if strategy is not None and strategy not in RACEABLE:
            return f"Race…: a {strategy} run's trials differ in more than a fork may change; race a run of its best"
        return ""

    # -- commands ----------------------------------------------------------------------------------
    def ask(self) -> None:
        """The Race dialog for the source run; Race there starts it (the window's own run stops first)."""
        w = self.window
        run_dir = self.source()
        if run_dir is None or w.state.preparing:
            return
        live = self._live() is not None
        try:
            session = w.controller.session
            cfg = session.config if live and session is not None else load_config(RunDir(run_dir).config)
        except ConfigError as exc:
            w.show_input_error(str(exc))
            return
        dialog = RaceDialog(run_dir, cfg, w.window(), stops_run=live)
        try:
            if not w.ask_race(dialog):
                return  # the run stays as it was (paused, or going on)
            ok = dialog.request is not None or dialog.check()
            plan, request, as_fork, error = dialog.plan, dialog.request, dialog.as_fork, dialog.error()
        finally:
            dialog.deleteLater()
        if not ok or request is None:
            w.show_input_error(error)
        elif live:
            self._stop_then_race(run_dir, request, as_fork)
        elif plan is not None:
            self.start(plan, as_fork)

    def _stop_then_race(self, run_dir: Path, request: RaceRequest, as_fork: bool) -> None:
        """Stop the window's run (its stop writes the checkpoint where it is) and race once it has ended."""
        w = self.window
        c = w.controller
        if not (c.active and c.run_dir == run_dir):  # it ended while the dialog was open
            self._race_stopped(run_dir, request, as_fork)
            return
        w.log_pane.add_message(
            "state", f"stopping {run_dir.name} to race it: its checkpoint is where the race starts", who="race"
        )
        w.state.update(after_end=lambda: self._race_stopped(run_dir, request, as_fork))
        c.stop()
        w.update_actions()

    def _race_stopped(self, run_dir: Path, request: RaceRequest, as_fork: bool) -> None:
        """The run stopped (``run_ended`` came): race from the checkpoint its stop wrote; if it wrote none, one
        line and no race."""
        w = self.window
        session = w.controller.session
        if w.controller.state == "failed":
            why = (session.error if session is not None else None) or "see the log"
            w.show_error(f"race: {run_dir.name} failed as it stopped ({why}); no race")
            return
        try:
            plan = plan_race(run_dir, request.vary, request.rungs, request.keep)
        except ConfigError as exc:
            w.show_error(f"{exc}; no race")
            return
        steps = (RunDir(run_dir).read_summary() or {}).get("steps")
        if isinstance(steps, int) and steps != plan.start_step:
            w.show_error(
                f"race: {run_dir.name} stopped at step {steps:,} but its checkpoint is at step {plan.start_step:,}; "
                "no race (Race… on it races from that checkpoint)"
            )
            return
        self.start(plan, as_fork)

    def resume_race(self) -> None:
        """Go on with the source run's race that stopped before its end, from the rung it reached (as
        ``traindesk race RUN --resume``), drawn as a new race is, with the variants' curves so far."""
        w = self.window
        folder = self.unfinished()
        if folder is None or w.state.preparing:
            return
        try:
            plan = plan_of(folder)
        except (ConfigError, OSError, ValueError, KeyError) as exc:
            w.show_error(f"race: cannot resume the race in {folder}: {exc}".splitlines()[0])
            return
        self.start(plan, folder=folder)

    def start(self, plan: RacePlan, as_fork: bool = False, folder: Path | None = None) -> None:
        """Read the parent's history (and, resuming the race recorded in ``folder``, its variants' so far) off the
        GUI thread, draw it, then race."""
        w = self.window
        if self.active or w.controller.active or w.state.preparing:
            return
        w.state.update(preparing=True)
        w.calls.call(
            lambda: _history(plan, folder),
            lambda history: self._begin(plan, as_fork, *history, folder),
            lambda _exc: self._begin(plan, as_fork, PastRun(RunDir(plan.run)), {}, folder),
            name="read-run",
        )

    def _begin(
        self,
        plan: RacePlan,
        as_fork: bool,
        past: PastRun,
        earlier: dict[int, list[dict[str, Any]]],
        folder: Path | None,
    ) -> None:
        w = self.window
        w.state.update(preparing=False, viewing_run=None)
        if w.state.closing:
            return
        if folder is not None:
            race = Race.resumed(plan, folder, say=self._said.append, on_variant=self._listen)
            as_fork = race.record.as_fork
        else:
            race = Race(plan, say=self._said.append, on_variant=self._listen)
        try:
            race.claim()  # the run's race lock: a race of the run another process started meanwhile is one line
        except RaceRunning as exc:
            w.show_error(str(exc))
            return
        self.race, self.curves, self._stopping, self._shown = (
            race,
            RaceCurves(past.records, plan.from_worker),
            False,
            (),
        )
        self._planned = planned_epochs(len(plan.variants), plan.rungs, plan.survivors)
        self._reniced.clear()
        n = len(plan.variants)
        w.hide_error()
        plots = w.plots
        plots.reset()
        labels = {PARENT: past.name, **{curve_of(v.index): v.label for v in plan.variants}}
        plots.set_run_shape(labels, separate_models=True, groups=groups(n, plan.workers))
        plots.add_records(self.curves.parent)
        plots.mark_next_start((f"race of {n} from step {plan.branch_step:,}", "fork"))
        plots.add_records([RaceCurves.start_record(race.record.started if folder is not None else time.time())])
        for index, records in sorted(earlier.items()):  # a resumed race: each variant's curves so far
            plots.add_records(self.curves.variant(index, records))
        if folder is not None:
            plots.add_records([RaceCurves.start_record(time.time())])  # a "resumed" marker
        plots.flush()
        plots.set_live(True)
        w.show_tab(plots)
        w.run_status.clear_run()
        verb = f"resuming the race at rung {race.record.rung + 1} of" if folder is not None else "race of"
        w.log_pane.add_message(
            "state",
            f"{verb} {n} variants of {past.name} from epoch {plan.start_epoch}, ranked by {plan.metric}, "
            f"{race.slots} at a time: " + ", ".join(v.label for v in plan.variants),
            who="race",
        )
        self._show(race, race.snapshot())
        self.timer.start()
        w.calls.call(lambda: race.run(as_fork), self._on_done, self._on_failed, name="race")
        w.runs_view.refresh()
        w.update_actions()

    def _listen(self, entry: Entry, session: Any) -> None:
        """A variant's session before it starts (on a race thread): its records go to the inbox."""
        session.add_listener(lambda records, i=entry.index: self._inbox.append((i, records)))

    def pause(self) -> None:
        """Pause every variant after its current batch; no other starts until Resume."""
        self._pause(True)

    def resume(self) -> None:
        self._pause(False)

    def _pause(self, paused: bool) -> None:
        race, w = self.race, self.window
        if race is None or self._stopping or race.paused == paused:
            return
        if paused:
            race.pause()
        else:
            race.resume()
        w.plots.add_records([RaceCurves.pause_record(time.time(), paused)])
        w.run_status.set_throughput("paused" if paused else "")
        w.log_pane.add_message("state", "race paused" if paused else "race resumed", who="race")
        w.update_actions()

    def stop(self) -> None:
        """Stop every variant (each writes its checkpoint, on a thread: it waits for them); the run stays as it
        was, and Resume race (or ``traindesk race RUN --resume``) goes on with the race."""
        race, w = self.race, self.window
        if race is None or self._stopping:
            return
        self._stopping = True
        w.log_pane.add_message("state", "stopping the race: every variant writes its checkpoint", who="race")
        w.calls.call(
            race.stop,
            lambda _r: None,
            lambda exc: w.log_pane.add_message("error", f"stopping the race: {exc}", who="race"),
            name="race-stop",
        )
        w.update_actions()

    def stop_to_close(self) -> None:
        """The window closes once the race has ended: stop it."""
        w = self.window
        if not w.state.closing:
            w.state.update(closing=True)
            w.log_pane.add_message("state", "stopping the race before closing…", who="race")
            self.stop()

    # -- what the race says (GUI thread) -----------------------------------------------------------
    def poll(self) -> None:
        """Take what the race's threads left: records onto the curves, lines into the log, the record shown."""
        race, curves, w = self.race, self.curves, self.window
        if race is None or curves is None:
            return
        record = race.snapshot()  # the race's threads change the record meanwhile
        batch: list[dict[str, Any]] = []
        while self._inbox:
            index, records = self._inbox.popleft()
            batch += curves.variant(index, records)
            self._log(record.variants[index], records)
        if batch:
            w.plots.add_records(batch)
        while self._said:  # the log names who speaks: "race: " once
            w.log_pane.add_message("state", self._said.popleft().removeprefix("race: "), who="race")
        pids = [pid for s in race.sessions() for pid in s.worker_pids() if pid not in self._reniced]
        if pids:  # the window keeps a core whenever it needs one, as with a run of its own
            lower_priority(pids)
            self._reniced.update(pids)
        self._show(race, record)

    def _log(self, entry: Entry, records: list[dict[str, Any]]) -> None:
        for rec in records:
            level = str(rec.get("level", "")).lower()
            if rec.get("kind") == LOG and level in ("warning", "error", "critical"):
                self.window.log_pane.add_message(level, f"{entry.label}: {rec.get('message', '')}", who="race")

    def _show(self, race: Race, record: RaceRecord) -> None:
        """``record``: the race's, as :meth:`Race.snapshot` copied it."""
        w, plan = self.window, race.plan
        now = snapshot(record)
        if now != self._shown:
            self._shown = now
            w.plots.set_out(out_reasons(record))
            best = leader(record, plan.maximize)
            w.plots.set_winner(curve_of(best.index) if best is not None else None)
            w.run_status.set_run_dir(status_line(record, plan.maximize))
        rungs = len(record.rungs)
        rung = min(record.rung + 1, rungs)
        if record.state == "done":
            w.run_status.show_progress(f"Race done · {rungs} rung(s) · %p%", 1.0)
        elif self.curves is not None:
            ended = " stopped" if record.state == "stopped" else ""
            fraction = done_fraction(self.curves, plan.start_epoch, self._planned)
            w.run_status.show_progress(f"Race{ended} · rung {rung}/{rungs} · %p%", fraction)
        rate = w.plots.total_rate()
        if self.state == "running" and rate == rate:
            w.run_status.set_throughput(f"{rate:,.0f} samples/s")

    def _on_done(self, record: RaceRecord) -> None:
        race = self.race
        if race is None:
            return
        self.poll()  # every record and line the race left
        target = race.winner_dir or Path(race.plan.run)
        self._end()
        w = self.window
        w.state.update(viewing_run=target)  # Export, Continue, Fork and Race act on the run that went on
        if w.panel.showing_run_config:  # it showed the raced run's settings: the ones that go on now
            cfg = read_config(target)
            if cfg is not None:
                w.panel.show_run_config(cfg, display_name(target))
        if record.state == "done":
            w.evaluate_view.load_run(target)

    def _on_failed(self, exc: BaseException) -> None:
        if self.race is None:
            return
        self.poll()
        self._end()
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        self.window.show_error(message if message.startswith("race:") else f"race: {type(exc).__name__}: {message}")

    def _end(self) -> None:
        w = self.window
        self.timer.stop()
        self.race, self.curves, self._stopping = None, None, False
        w.plots.flush()
        w.plots.set_live(False)
        w.run_status.set_throughput("")
        w.runs_view.refresh()
        w.update_actions()
        if w.state.closing:
            QTimer.singleShot(0, w.close)


def _history(plan: RacePlan, folder: Path | None) -> tuple[PastRun, dict[int, list[dict[str, Any]]]]:
    """The parent's records, and a resumed race's (``folder``) each variant's records so far (off the GUI
    thread)."""
    past = read_past_run(plan.run)
    earlier: dict[int, list[dict[str, Any]]] = {}
    if folder is not None:
        for entry in RaceRecord.load(folder).variants:
            if entry.run:
                earlier[entry.index] = RunDir(folder / entry.run).read_records()
    return past, earlier
