"""Going on from a run's checkpoint: continue the run on screen, or fork a new run from it.

Both read the run's history off the GUI thread first (``read_past_run``) so the
new curves are drawn on from the old ones; while they read, the window's model
says ``preparing`` and nothing else starts. A fork is the parent's config with
only the live settings edited in the Fork dialog (app.flows.fork_dialog), pre-filled
with the parent's own values (or what the panel changes of them, when it shows
that run). Forking a paused run of ours stops it first and forks once it has
ended (the model's ``after_end``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.flows.fork_dialog import ForkDialog
from app.viewmodels.run_data import fork_marker
from core.config import Config, ConfigError, load_config
from core.services.runs.imported import read_only_reason
from core.services.runs.past import CONFIG, EVAL, STEP, PastRun, RunDir, read_past_run, shape_of

if TYPE_CHECKING:
    from app.flows.window_port import WindowPort


class ContinueForkFlow:
    """Continue run and Fork, from choosing the source run to handing it to the run controller."""

    def __init__(self, window: WindowPort) -> None:
        self.window = window

    def _on_screen(self) -> RunDir | None:
        w = self.window
        run_dir = w.state.viewing_run or w.controller.run_dir
        return RunDir(run_dir) if run_dir is not None else None

    # -- continue ----------------------------------------------------------------------------------
    def continuable_run(self) -> Path | None:
        """The run on screen, if it stopped or failed (or finished short of the epochs asked for now)."""
        run = self._on_screen()
        if run is None or not run.has_weights():
            return None
        summary = run.read_summary() or {}
        if summary.get("status") in ("stopped", "failed"):
            return run.path
        if summary.get("status") == "finished" and self.window.panel.training.epochs() > summary.get("epochs_done", 0):
            return run.path
        return None

    def continue_run(self) -> None:
        w = self.window
        run_dir = self.continuable_run()
        if run_dir is None or w.controller.active or w.state.preparing:
            return
        summary = RunDir(run_dir).read_summary() or {}
        wanted = w.panel.training.epochs()
        epochs = wanted if wanted > summary.get("epochs_done", 0) else None
        w.state.update(preparing=True)  # nothing else starts while the history is read
        w.calls.call(
            lambda: read_past_run(run_dir),
            lambda past: self._continue_with_history(run_dir, epochs, past),
            lambda exc: self._continue_with_history(run_dir, epochs, PastRun(RunDir(run_dir))),
            name="read-run",
        )

    def _continue_with_history(self, run_dir: Path, epochs: int | None, past: PastRun) -> None:
        """The earlier curves stay; the continued run's go on from them, with a marker where it resumed."""
        w = self.window
        w.state.update(preparing=False)
        w.hide_error()
        try:
            cfg = past.config if past.config is not None else w.panel.config()
            if epochs is not None:
                cfg = cfg.replace("train", epochs=epochs)
        except ConfigError as exc:  # the continued run's settings cannot run: it does not start
            _show_bad_settings(w, exc)
            return
        if w.panel.showing_run_config:  # the run's settings become the user's (the panel is locked now)
            w.panel.use_shown_config()
        w.panel.set_config(cfg)
        w.plots.reset()
        shape = shape_of(cfg)
        w.live.apply_run_shape(shape)
        w.plots.add_records(past.records)
        w.plots.flush()
        w.show_tab(w.plots)
        w.live.start_progress(shape, done=past.records)  # counts from where the run stopped, not from zero
        w.live.update_progress()
        w.log_pane.add_message("state", f"continuing {run_dir.name} from its checkpoint", who="session")
        w.controller.continue_run(run_dir, epochs)

    # -- fork --------------------------------------------------------------------------------------
    def fork_source(self) -> Path | None:
        """The run Fork branches from: a paused run of ours, or the run on screen with a checkpoint."""
        w = self.window
        if w.controller.active:
            if w.controller.state == "paused" and not w.controller.attached:
                return w.controller.run_dir
            return None
        run = self.candidate()
        if run is None or not run.has_weights():
            return None
        return run.path

    def candidate(self) -> RunDir | None:
        """The run selected in Runs (the tab shown), else the run on screen: what Fork and Race… start from."""
        w = self.window
        selected = w.runs_view.selected_runs() if w.shown_tab() is w.runs_view else []
        return RunDir(selected[0]) if len(selected) == 1 else self._on_screen()

    def read_only_reasons(self) -> tuple[str, str]:
        """Why Continue run and Fork are off for an imported run (no checkpoint): ("", "") for any other."""
        if self.window.controller.active:
            return "", ""
        on_screen, candidate = self._on_screen(), self.candidate()
        return read_only_reason(on_screen.path if on_screen else None), read_only_reason(
            candidate.path if candidate else None
        )

    def shown_changes(self, run_dir: Path, source_cfg: Config) -> dict[str, Any]:
        """The live keys the panel changes for this run, when the panel shows its settings; else none.

        The panel shows a run's settings while that run is paused (live mode) or on screen as a past run
        (view mode); any other time it holds the user's own settings, which say nothing about this run.
        """
        w = self.window
        paused_here = w.controller.active and w.controller.run_dir == run_dir and w.panel.mode == "live"
        viewed_here = w.state.viewing_run == run_dir and w.panel.mode == "view"
        return w.panel.live_changes(source_cfg) if paused_here or viewed_here else {}

    def fork(self) -> None:
        """Ask for the fork's live settings (the parent's own, pre-filled), then fork with what was edited."""
        w = self.window
        run_dir = self.fork_source()
        if run_dir is None:
            return
        run = RunDir(run_dir)
        try:
            active = w.controller.session if w.controller.active else None
            source_cfg = active.config if active is not None else load_config(run.config)
            proposed = self.shown_changes(run_dir, source_cfg)
        except ConfigError as exc:
            _show_bad_settings(w, exc)
            return
        summary = {} if w.controller.active else (run.read_summary() or {})
        done = int(summary.get("epochs_done") or 0)
        finished = summary.get("status") == "finished"
        note = ""
        if finished and int(proposed.get("train.epochs", source_cfg.train.epochs)) <= done:
            # It trained all its epochs: the fork needs more to train at all.
            proposed["train.epochs"] = max(done + 1, 2 * done)
            note = f"It finished all its {done} epochs: the fork trains on up to the epoch below."
        dialog = ForkDialog(run_dir.name, source_cfg, proposed, done + 1 if finished else 1, note, w.window())
        try:
            if not w.ask_fork(dialog):
                return
            changes = dialog.changes()
        except ConfigError as exc:
            w.show_input_error(str(exc))
            return
        finally:
            dialog.deleteLater()
        if w.controller.active:
            # One active run per runs folder: the paused run stops first (its checkpoint is the pause point).
            w.log_pane.add_message("state", f"stopping {run_dir.name} to fork it", who="session")
            w.state.update(after_end=lambda: self._start_fork(run_dir, changes))
            w.controller.stop()
            w.update_actions()
            return
        self._start_fork(run_dir, changes)

    def _start_fork(self, run_dir: Path, changes: dict[str, Any]) -> None:
        w = self.window
        w.state.update(preparing=True)
        w.calls.call(
            lambda: read_past_run(run_dir),
            lambda past: self._fork_with_history(run_dir, changes, past),
            lambda exc: self._fork_with_history(run_dir, changes, PastRun(RunDir(run_dir))),
            name="read-run",
        )

    def _fork_with_history(self, run_dir: Path, changes: dict[str, Any], past: PastRun) -> None:
        """The parent's curves first, the fork's branching from them."""
        w = self.window
        w.state.update(preparing=False)
        w.hide_error()
        if w.panel.showing_run_config:  # the run's settings become the user's (the panel is locked now)
            w.panel.use_shown_config()
        cfg = past.config
        if cfg is not None:
            try:
                w.panel.set_config(cfg.with_changes(changes))
            except ConfigError as exc:  # the fork's settings cannot run: it does not start
                _show_bad_settings(w, exc)
                return
            w.plots.reset()
            w.live.apply_run_shape(shape_of(cfg))
        else:
            w.plots.reset()
        w.plots.add_records([r for r in past.records if r.get("kind") in (STEP, EVAL, CONFIG)])
        w.plots.mark_next_start(fork_marker(run_dir.name))
        w.plots.flush()
        w.show_tab(w.plots)
        epochs = w.panel.training.epochs()
        w.live.start_progress(shape_of(cfg) if cfg is not None else None, epochs, done=past.records)
        text = ", ".join(f"{k} = {v}" for k, v in changes.items()) or "the same settings"
        w.log_pane.add_message("state", f"forking {run_dir.name} with {text}", who="session")
        w.controller.fork(run_dir, changes)


def _show_bad_settings(w: WindowPort, exc: ConfigError) -> None:
    """Settings that cannot run: the panel's error line and the window's input error say why."""
    w.panel.show_error(str(exc))
    w.show_input_error(str(exc))
