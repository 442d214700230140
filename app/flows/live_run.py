"""The run on screen: the Run commands, and what the run controller says about the run, shown.

Start, Pause, Resume, Stop and Export act on the run; the controller's signals
(started, records, state, ended, a failed start) become curves, log lines,
the progress bar, the throughput and a sweep's winner in the status bar.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, QTimer, Slot
from PySide6.QtWidgets import QMessageBox

from app.viewmodels.run_data import ProgressTracker, format_duration
from app.viewmodels.run_progress import preparing, preparing_text
from app.viewmodels.trial_progress import TrialProgress, make_progress, search_end_text
from app.viewmodels.window_state import STATE_TEXT
from core.config import Config, ConfigError
from core.services.runs.files import STATE, RunDir
from core.services.runs.imported import read_only_reason
from core.services.runs.reading import RunCount, RunShape, result_line
from core.services.runs.shape import shape_of

if TYPE_CHECKING:
    from app.flows.window_port import WindowPort
    from core.services.runs.start import RunHandle


def weights_needed(cfg: Config) -> bool:
    """Start downloads the backbone's weights first: a suggested backbone whose weights are not cached, or any
    other timm name on the hub (timm is asked off the GUI thread; what is cached comes back at once)."""
    from core.services import pretrained

    model = cfg.model
    if not model.kind.startswith(pretrained.PREFIX) or model.weights != "hub":
        return False
    return pretrained.suggested(model.kind) is None or pretrained.needs_download(model)


def with_mirror(cfg: Config, uri: str) -> Config:
    """``cfg`` mirrored to ``uri`` (the window's MLflow tracking URI) unless it names its own or ``uri`` is ""."""
    if not uri or cfg.tracking.mlflow:
        return cfg
    return cfg.with_changes({"tracking.mlflow": uri})


@dataclass
class Starting:
    """A run Start asked for that has not started yet: its config, when, and its records so far."""

    cfg: Config
    t0: float
    records: list[dict[str, Any]] = field(default_factory=list)


class LiveRun(QObject):
    """The window's own run (or an attached one) from Start to its end."""

    def __init__(self, window: WindowPort, export_available: bool) -> None:
        super().__init__(window.window())
        self.window = window
        self.export_available = export_available
        self.progress: ProgressTracker | None = None
        self._record_error = ""  # the last error a record of the run said (and the log shows)
        self._starting: Starting | None = None  # Start was pressed and its run has not started yet
        self._preparing: dict[str, Any] | None = None  # how far a step before the workers got (features)
        c = window.controller
        c.state_changed.connect(self._on_state_changed)
        c.records.connect(self._on_records)
        c.start_failed.connect(self._on_start_failed)
        c.run_started.connect(self._on_run_started)
        c.run_ended.connect(self._on_run_ended)

    # -- commands --------------------------------------------------------------------------------
    def start(self) -> None:
        """Start a run with the panel's settings; the run on screen stays until the new one has started."""
        w = self.window
        if w.controller.active:
            return
        cfg = w.panel.try_config()
        if cfg is None:
            w.show_input_error(w.panel.config_error())
            return
        if w.panel.mode == "view" or w.state.downloading:
            return
        try:
            cfg = with_mirror(cfg, w.settings.mlflow_uri)
        except ConfigError as exc:  # a setting saved by hand: Settings… checks what it saves
            w.show_input_error(f"File → Settings…: {exc}")
            return
        w.hide_error()
        if weights_needed(cfg):
            w.weights.fetch(cfg, lambda: self._start(cfg))
            return
        self._start(cfg)

    def _start(self, cfg: Config) -> None:
        w = self.window
        if w.controller.active:
            return
        self._record_error = ""
        self._starting = Starting(cfg, time.time())
        self._preparing = None
        w.save_last_config()
        w.log_pane.add_message(
            "state",
            f"starting: {cfg.parallel.strategy}, {cfg.parallel.workers} worker(s), {cfg.data.source}, {cfg.model.kind}"
            + (f", mirrored to MLflow at {cfg.tracking.mlflow}" if cfg.tracking.mlflow else ""),
            who="session",
        )
        w.controller.start(cfg, w.runs_dir)

    def _show_new_run(self, starting: Starting) -> None:
        """The run Start began has started: it replaces the run on screen, with what it said so far."""
        w = self.window
        w.plots.reset(t0=starting.t0)
        shape = shape_of(starting.cfg)
        self.apply_run_shape(shape)
        self.start_progress(shape)
        w.run_status.clear_run()
        self._draw(starting.records)

    def pause(self) -> None:
        self.window.controller.pause()

    def resume(self) -> None:
        """Resume; settings edited while paused apply at the next batch of every worker."""
        w = self.window
        session = w.controller.session
        changes: dict[str, Any] = {}
        if session is not None and not w.controller.attached:
            try:
                changes = w.panel.live_changes(session.config)
            except ConfigError as exc:
                w.panel.show_error(str(exc))
                w.show_input_error(str(exc))
                return
        try:
            w.controller.resume(changes)
        except ConfigError as exc:  # the run stays paused
            w.panel.show_error(str(exc))
            w.show_input_error(str(exc))
            return
        if changes:
            text = ", ".join(f"{k} = {v}" for k, v in changes.items())
            w.log_pane.add_message("state", f"resumed with {text}", who="session")
            if self.progress is not None and "train.epochs" in changes:
                self.progress.set_epochs(int(changes["train.epochs"]))
                self.update_progress()
        w.hide_error()

    def stop(self) -> None:
        self.window.controller.stop()

    def export_run_dir(self) -> Path | None:
        """The run Export would export: the one on screen (past or just ended), if it has weights."""
        w = self.window
        run_dir = w.state.viewing_run or w.controller.run_dir
        if run_dir is None or not RunDir(run_dir).has_weights():
            return None
        return Path(run_dir)

    def offer_run(self) -> None:
        """Predict and Serve start from the run on screen (the one Export would export) unless another model
        was chosen there."""
        run_dir = self.export_run_dir()
        if run_dir is not None and not self.window.controller.active:
            self.window.predict_view.offer_model(run_dir)
            self.window.serve_view.offer_model(run_dir)

    def export(self) -> None:
        w = self.window
        run_dir = self.export_run_dir()
        if not self.export_available or run_dir is None or w.controller.active:
            return
        from app.views.export_dialog import ExportDialog

        dialog = ExportDialog(run_dir, w.window())
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()  # window-modal, without a nested event loop

    def export_tip(self) -> str:
        target = None if self.window.controller.active else self.export_run_dir()
        imported = "" if self.window.controller.active else read_only_reason(self.window.state.viewing_run)
        if imported:
            return f"{imported} (Ctrl+E)"
        return (
            "Export is not available yet in this version (Ctrl+E)"
            if not self.export_available
            else f"Export the trained model of {target.name} (Ctrl+E)"
            if target
            else "Export the trained model: finish a run or open a past one first (Ctrl+E)"
        )

    def active_runs(self) -> set[Path]:
        run_dir = self.window.controller.run_dir
        return {Path(run_dir)} if run_dir is not None and self.window.controller.active else set()

    def ask_stop_on_close(self) -> bool:
        """Ask whether to stop the active run (or set ask_before_close); a run that ends while the question is
        open changes it to what is then true."""
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Stop the run?",
            "A run is in progress. Stop it and close TrainDesk?\nA checkpoint and summary are written first.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            self.window,
        )
        box.setObjectName("question_stop_on_close")
        box.setDefaultButton(QMessageBox.StandardButton.No)

        def ended(status: str, *_rest: object) -> None:
            box.setWindowTitle("Close TrainDesk?")
            box.setText(f"The run has ended ({status}). Close TrainDesk?")

        self.window.controller.run_ended.connect(ended)
        try:
            return box.exec() == QMessageBox.StandardButton.Yes
        finally:
            self.window.controller.run_ended.disconnect(ended)

    # -- what the controller says ----------------------------------------------------------------
    @Slot(str)
    def _on_state_changed(self, state: str) -> None:
        if state == "paused":
            self.window.run_status.set_throughput("paused")
        elif state == "running":  # resumed: "paused" goes at once, not at the next finite rate (a fit has none)
            rate = self.window.plots.total_rate()
            self.window.run_status.set_throughput(f"{rate:,.0f} samples/s" if math.isfinite(rate) else "")
        self.window.update_actions()
        self.update_progress()

    @Slot(str)
    def _on_start_failed(self, message: str) -> None:
        w = self.window
        # Said once: the dataset summary may already show a data error, the log the session's own record of it.
        logged = message in self._record_error
        if message in w.panel.data.summary():
            w.show_input_error(
                "The run did not start: the dataset cannot be used (its summary, on the left, says why)", logged=True
            )
            if not logged:
                w.log_pane.add_message("error", message)
        else:
            w.panel.show_error(message)
            w.show_input_error(message, logged=logged)
        self._preparing = None
        if self._starting is not None:  # the run on screen before Start stays, its progress with it
            self._starting = None
            self.update_progress()
        else:  # a continue or fork: its parent's curves are drawn, it never ran
            self.progress = None
            w.run_status.show_progress("Not started")
        w.update_actions()
        if w.state.closing:  # asked to close while it was starting: nothing runs now
            QTimer.singleShot(0, w.close)

    @Slot(object)
    def _on_run_started(self, session: RunHandle) -> None:
        w = self.window
        w.state.update(viewing_run=None)  # the run on screen is the new one now (a failed start keeps the old)
        starting, self._starting = self._starting, None
        self._preparing = None
        if starting is not None:
            self._show_new_run(starting)
        w.plots.set_live(True)
        info = session.info
        if info is not None and self.progress is not None:
            self.progress.workers = session.num_workers
            self.progress.samples_per_epoch = session.shape.samples_per_epoch
        if w.controller.attached:
            w.run_status.set_run_dir(session.describe())
            w.log_pane.add_message("state", session.describe(), who="session")
        elif session.run_dir is not None:
            w.run_status.set_run_dir(str(session.run_dir))
            w.log_pane.add_message("state", f"run folder {session.run_dir}", who="session")
            parent = session.parent
            if parent:
                w.log_pane.add_message("state", f"fork of {parent['name']} at step {parent['step']}", who="session")
        w.runs_view.refresh()
        w.update_actions()

    @Slot(list)
    def _on_records(self, records: list[dict[str, Any]]) -> None:
        w = self.window
        errors = w.log_pane.add_records(records)
        if errors:
            self._record_error = errors[-1]
            w.show_error(errors[-1], logged=True)
        counts = preparing(records)
        if counts is not None and (self._starting is not None or w.controller.state == "starting"):
            self._preparing = counts
            self.update_progress()
        if self._starting is not None:  # drawn once the run has started; until then the old run stays
            self._starting.records.extend(records)
            return
        self._draw(records)
        rate = w.plots.total_rate()
        if w.controller.state == "running" and math.isfinite(rate):
            w.run_status.set_throughput(f"{rate:,.0f} samples/s")
        session = w.controller.session
        if w.controller.attached and session is not None and any(r.get("kind") == STATE for r in records):
            w.run_status.set_run_dir(session.describe())

    def _draw(self, records: list[dict[str, Any]]) -> None:
        w = self.window
        w.plots.add_records(records)
        w.search_view.add_records(records)
        if self.progress is not None:
            self.progress.add(records)
            self.update_progress()

    @Slot(str, object, object)
    def _on_run_ended(self, status: str, summary: Any, error: Any) -> None:
        w = self.window
        w.plots.flush()  # every plot complete now, not at the side plots' next turn
        w.plots.set_live(False)  # and fitted to the whole run
        if self.progress is not None:
            self.progress.end(status, summary)
        ended = self.progress.describe_end() if self.progress is not None else None
        if summary:
            final = summary.get("final") or {}
            count = self.progress.count() if self.progress is not None else RunCount.of_summary(summary)
            parts = [
                search_end_text(status, summary) or ended or f"{status} after {count.text()}",
                f"{summary.get('samples_per_s', 0):,.0f} samples/s",
            ]
            figure = result_line(summary)  # the model the run hands on: Evaluate, Export, Predict and Serve's
            if figure:
                parts.append(figure)
            elif final.get("val_accuracy") is not None:
                parts.append(f"val accuracy {final['val_accuracy']:.3f}")
            w.log_pane.add_message("error" if status == "failed" else "state", ", ".join(parts), who="session")
        if status == "failed":
            w.show_error(f"The run failed: {error or 'see the log'}")
        w.run_status.set_throughput("")
        self.update_progress()
        w.update_actions()
        run_dir = w.controller.run_dir
        if summary:
            self.show_winner(summary)
        closing = w.state.closing
        if status != "failed" and run_dir is not None and not closing:
            w.evaluate_view.load_run(run_dir)  # eval.json, written at the end of the run
        w.runs_view.refresh()
        if closing:
            QTimer.singleShot(0, w.close)
            return
        after = w.state.take_after_end()
        if after is not None:
            after()

    # -- the status bar ----------------------------------------------------------------------------
    def update_progress(self) -> None:
        p = self.progress
        status = self.window.run_status
        starting = self._starting is not None or self.window.controller.state == "starting"
        if self._preparing is not None and starting:  # a step before the workers: the features' count
            text, share = preparing_text(self._preparing)
            status.show_progress(text, share if share is not None else 0.0)
            return
        if self._starting is not None:  # the previous run's progress comes back if this start fails
            status.show_progress("Starting…", 0.0)
            return
        if p is None:
            return
        state = self.window.controller.state
        if state in ("finished", "stopped", "failed"):
            tail = STATE_TEXT[state].lower()
        elif state == "paused":
            tail = "paused"
        elif state == "starting":
            tail = "starting…"
        else:
            tail = f"ETA {format_duration(p.eta_s())}"
        over = state in ("finished", "stopped", "failed")
        if isinstance(p, TrialProgress):  # a search counts trials, not epochs
            status.show_progress(p.label(tail, ended=over), p.progress)
            return
        ended = p.describe_end()
        count = p.count()  # the epochs every worker completed: the log's end line, summary.json and Runs say it too
        if ended:
            text = f"{ended[0].upper()}{ended[1:]} · %p%"
        elif over:
            text = f"{count.text()[0].upper()}{count.text()[1:]} · %p% · {tail}"
        else:  # the epoch in progress: the one after those done
            who = " (slowest worker)" if count.slowest else ""
            epoch = min(p.epochs, count.done + 1) if p.epoch else 0
            text = f"Epoch {epoch}/{p.epochs}{who} · %p% · {tail}"
        status.show_progress(text, p.progress)

    def show_past(self, run_dir: Path, summary: dict[str, Any] | None, epochs: int = 0) -> None:
        """A past run's end in the status bar, counted as its summary counts it (of ``epochs`` for a summary
        written before it held its count): no progress to follow."""
        w = self.window
        status = (summary or {}).get("status", "")
        w.run_status.set_run_dir(str(run_dir))
        self.progress = None
        w.run_status.show_progress(
            f"{status or 'no summary'} · {RunCount.of_summary(summary, epochs).text()}",
            1.0 if status == "finished" else 0.0,
        )

    def start_progress(
        self, shape: RunShape | None, epochs: int | None = None, done: Iterable[dict[str, Any]] | None = None
    ) -> None:
        """Follow the progress of a run of ``shape`` (of ``epochs``, else its own), counting on from the records
        of its ``done`` part (a continued run's earlier epochs, a fork's parent's); without a shape (its config
        unreadable), a count of ``epochs`` for one worker."""
        self.progress = make_progress(shape, epochs) if shape is not None else ProgressTracker(epochs or 0, 1)
        if done is not None:
            self.progress.resume_from(done)

    def clear(self) -> None:
        self.progress = None
        self.window.run_status.show_progress("No run", 0.0)

    # -- what the workers are: labels, shared or separate models, a sweep's winner ----------------
    def apply_run_shape(self, shape: RunShape, summary: dict[str, Any] | None = None) -> None:
        w = self.window
        sweep = dict(enumerate(shape.sweep_lr)) if shape.sweep_lr is not None else None
        w.plots.set_run_shape(shape.label_map(), shape.models > 1, sweep, per_trial=shape.counts_trials)
        w.run_status.set_winner("")
        w.evaluate_view.set_context("")
        if summary:
            self.show_winner(summary, announce=False)

    def show_winner(self, summary: dict[str, Any], announce: bool = True) -> None:
        """Name a sweep's best setting in the status bar, the log and the Evaluate tab; draw it bolder."""
        w = self.window
        if w.plots.per_trial and isinstance(summary.get("best_trial"), int):
            w.plots.set_winner(summary["best_trial"])  # a search's result: its best trial, drawn bolder
            return
        best = summary.get("best_worker")
        sweep = summary.get("sweep")
        if not isinstance(best, int) or not isinstance(sweep, list) or len(sweep) < 2:
            return
        entry: dict[str, Any] = next((e for e in sweep if e.get("worker") == best), {})
        label = entry.get("label") or w.plots.label(best)
        acc = entry.get("val_accuracy")
        text = f"best: {label}" + (f" (val accuracy {acc:.4f})" if isinstance(acc, (int, float)) else "")
        w.run_status.set_winner(text)
        w.plots.set_winner(best)
        w.evaluate_view.set_context(f"Sweep winner {label}: the evaluation below is of its model.")
        if announce:
            w.log_pane.add_message("state", f"sweep {text}", who="session")
