"""Runs that are not the window's own: a past run shown as history, a live one of another process followed.

A past run is read off the GUI thread (``read_past_run``: a fork's curves drawn
on from its parent's) and shown with its settings read-only in the panel and
its evaluation; the window's model names it (``viewing_run``). A live run is
attached: the run controller follows it and Pause/Resume/Stop steer it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QFileDialog, QMenu

from app.viewmodels.run_data import fork_marker
from app.viewmodels.run_index import RunRow
from core.config import ConfigError, load_config
from core.services.runs import past
from core.services.runs.imported import read_only_reason
from core.services.runs.past import PastRun, display_name

if TYPE_CHECKING:
    from app.flows.window_port import WindowPort

RECENT_RUNS = 12


class PastRuns:
    """Open, attach to, list and compare runs of the runs folder."""

    def __init__(self, window: WindowPort) -> None:
        self.window = window

    def fill_recent(self, menu: QMenu) -> None:
        """The recent runs into ``menu`` (the Recent runs submenu, as it opens)."""
        w = self.window
        menu.clear()
        runs = past.list_runs(Path(w.runs_dir))[:RECENT_RUNS]
        if not runs:
            empty = menu.addAction(f"No runs in {w.runs_dir}")
            empty.setEnabled(False)
            return
        for run in runs:
            status = (run.read_summary() or {}).get("status") or "no summary"
            action = menu.addAction(f"{run.name}   ({status})")
            action.triggered.connect(lambda _checked=False, d=run.path: self.open(d))

    def ask_open(self) -> None:
        w = self.window
        path = QFileDialog.getExistingDirectory(w.window(), "Open run folder", str(Path(w.runs_dir).resolve()))
        if path:
            self.open(path)

    def open(self, run_dir: str | Path) -> None:
        """Show a run: a live one of another process is followed (attached), any other as history.

        Its curves (a fork's drawn on from its parent's), its settings (read-only in the panel until
        "Use these settings") and its evaluation. Files are read off the GUI thread.
        """
        w = self.window
        if w.controller.active or w.state.preparing or w.race.active:
            return
        run_dir = Path(run_dir)
        problem = past.not_a_run(run_dir)
        if problem:
            w.show_error(problem)
            return
        if past.is_live(run_dir):
            self.attach(run_dir)
            return
        w.calls.call(
            lambda: past.read_past_run(run_dir),
            lambda past: self._on_loaded(run_dir, past),
            lambda exc: w.show_error(f"could not read {run_dir}: {exc}"),
            name="read-run",
        )
        w.update_actions()

    def attach(self, run_dir: Path) -> None:
        """Follow the live run another process runs in ``run_dir``: curves grow, Pause/Resume/Stop steer it."""
        w = self.window
        try:
            cfg = load_config(past.RunDir(run_dir).config)
        except ConfigError as exc:
            w.show_error(str(exc))
            return
        w.hide_error()
        w.state.update(viewing_run=None)
        w.plots.reset()
        shape = past.shape_of(cfg)
        w.live.apply_run_shape(shape)
        w.live.start_progress(shape)
        w.panel.show_run_config(cfg, display_name(run_dir))  # the run's settings, not the window's
        w.show_tab(w.plots)
        w.log_pane.add_message("state", f"attaching to the live run in {run_dir}", who="session")
        w.controller.attach(run_dir)

    def _on_loaded(self, run_dir: Path, run: PastRun) -> None:
        w = self.window
        if w.controller.active:
            return  # a run started meanwhile: it owns the plots
        records, summary, cfg = run.records, run.summary, run.config
        w.state.update(viewing_run=run_dir, viewing_summary=summary)
        w.hide_error()
        w.plots.reset()
        if run.shape is not None:
            w.live.apply_run_shape(run.shape, summary)
        parent = (summary or {}).get("parent")
        if isinstance(parent, dict) and parent.get("name"):  # the parent's curves first, then the fork's
            w.plots.mark_next_start(fork_marker(str(parent["name"])))
        w.plots.add_records(records)
        w.plots.flush()
        w.show_tab(w.plots)  # opened from Runs, a menu or a dialog: its curves are what was asked for
        w.search_view.reset()
        w.search_view.add_records(records)
        w.search_view.show_summary(summary)
        w.log_pane.add_message("state", f"showing {run_dir} ({len(records):,} records)")
        w.log_pane.add_records([r for r in records if r.get("kind") == past.LOG])
        w.live.show_past(run_dir, summary, cfg.train.epochs if cfg is not None else 0)
        if cfg is not None:
            w.panel.show_run_config(cfg, run.name)
        w.update_actions()
        if run.run_dir.has_weights():
            w.evaluate_view.load_run(run_dir)
        elif run.run_dir.imported() is not None:  # another tool's logs: curves, no settings, nothing to evaluate
            w.evaluate_view.set_context(read_only_reason(run_dir))

    def on_edited(self, row: RunRow) -> None:
        """A run was renamed (or its notes edited) in Runs: the views that name it say its new name."""
        w = self.window
        if w.panel.showing_run_config and row.path in (w.state.viewing_run, w.controller.run_dir):
            w.panel.name_shown_run(row.name)
        w.compare_view.rename(row.path, row.name)

    def on_deleted(self, paths: list[Path]) -> None:
        """Runs moved to the trash leave Compare."""
        self.window.compare_view.forget(paths)

    def show_list(self) -> None:
        self.window.show_tab(self.window.runs_view)

    def compare(self) -> None:
        w = self.window
        runs = w.runs_view.selected_runs()
        if len(runs) < 2:
            w.show_error("select two or more runs in Runs to compare them")
            return
        w.compare_view.compare(runs)
        w.show_tab(w.compare_view)
