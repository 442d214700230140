"""The main window: configuration on the left, live plots and the log on the right.

Everything here runs in the GUI thread. Slow work (starting or stopping a
run, describing a dataset, reading a past run) happens on background
threads (RunController, ConfigPanel, BackgroundCalls) and comes back by
signal; records arrive in batches of at most ~30 a second.
"""

from __future__ import annotations

import importlib.util
import math
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QApplication, QFileDialog, QLabel, QMainWindow, QMenu, QMessageBox, QProgressBar, QScrollArea,
    QSplitter, QTabWidget, QToolBar, QToolButton, QVBoxLayout, QWidget,
)

from app import icons
from app.banner import Banner
from app.config_panel import ConfigPanel
from app.gc_policy import GuiGarbageCollector
from app.log_pane import LogPane
from app.lr_finder_view import LRFinderDialog
from app.plots import PlotsPanel
from app.run_controller import RunController
from app.run_data import ProgressTracker, fork_marker, format_duration
from app.toolbar_fit import ToolbarFit
from app.trial_progress import TrialProgress, make_progress, search_end_text
from app.runs_view import RunsView
from app.search_view import SearchView
from app.settings import AppSettings
from app.tasks import BackgroundCalls
from app.theme import Theme, apply_theme, get_theme, style_plot_widget
from app.window_state import STATE_TEXT, WindowState, derive
from core.config import Config, ConfigError, load_config, parse_toml, save_config, to_dict
from core.run_dir import list_runs
from core.runlog import read_metrics, read_summary

RECENT_RUNS = 12
ADVISOR_SECONDS = 3.0  # training seconds per probe of "Find fastest"


class _AdvisorLines(QObject):
    """Carries the advisor's progress lines from its thread to the GUI thread."""

    line = Signal(str)
# The export dialog comes with the export feature; without it the action stays off and says so.
EXPORT_AVAILABLE = importlib.util.find_spec("app.export_dialog") is not None
PROGRESS_STEPS = 1000


class MainWindow(QMainWindow):
    def __init__(self, settings: AppSettings | None = None, runs_dir: str | None = None) -> None:
        super().__init__()
        self.setObjectName("main_window")
        self.setWindowTitle("TrainDesk")
        self.settings = settings or AppSettings()
        self._runs_dir_override = runs_dir
        # Closing mid-run asks first; tests and scripts set this to False to skip the dialog.
        self.ask_before_close = True
        self._close_when_ended = False
        self._theme: Theme = get_theme(self.settings.theme)
        self._progress: ProgressTracker | None = None
        self._calls = BackgroundCalls(self)
        self.viewing_run: Path | None = None
        self.advising = False  # "Find fastest" is probing
        self.lr_finder: LRFinderDialog | None = None
        self._record_error = ""  # the last error a record of the run said (and the log shows)
        self._advisor_cancel = False
        self._advisor_lines = _AdvisorLines(self)
        self._advisor_lines.line.connect(self._on_advisor_line)
        self._gc = GuiGarbageCollector(self)
        self._preparing = False   # reading a run's history before continuing or forking it
        self._after_end: Any = None  # what to do once the run on screen has ended (fork a paused run)
        self._advisor_done = 0
        self._advisor_total = 0
        self._viewing_summary: dict[str, Any] | None = None

        self.controller = RunController(self)
        self.controller.state_changed.connect(self._on_state_changed)
        self.controller.records.connect(self._on_records)
        self.controller.start_failed.connect(self._on_start_failed)
        self.controller.run_started.connect(self._on_run_started)
        self.controller.run_ended.connect(self._on_run_ended)

        self._build_actions()
        self._build_central()
        self._build_menus()
        self._build_toolbar()
        self._build_status_bar()
        self._restore_settings()
        self.plots.view_changed.connect(self._on_view_changed)  # after restoring, or it overwrites them
        self.panel.spin_epochs.valueChanged.connect(lambda _v: self._update_actions())
        self._apply_theme(self._theme.name)
        self.runs_view.set_runs_dir(self.runs_dir)
        self._update_actions()

    # -- construction ----------------------------------------------------------
    def _action(self, name: str, text: str, shortcuts: list[str], tip: str, slot: Any,
                icon: str | None = None) -> QAction:
        action = QAction(text, self)
        action.setObjectName(name)
        action.setShortcuts([QKeySequence(s) for s in shortcuts])
        keys = ", ".join(QKeySequence(s).toString(QKeySequence.SequenceFormat.NativeText) for s in shortcuts)
        action.setToolTip(f"{tip} ({keys})" if keys else tip)
        action.setStatusTip(tip)
        action.triggered.connect(slot)
        action.setData(icon)
        self.addAction(action)
        return action

    def _build_actions(self) -> None:
        a = self._action
        self.action_start = a("action_start", "Start", ["Ctrl+R", "F5"], "Start training with these settings",
                              self._on_start, "start")
        self.action_pause = a("action_pause", "Pause", ["Ctrl+P"], "Pause every worker after its current batch",
                              self._on_pause, "pause")
        self.action_resume = a("action_resume", "Resume", ["Ctrl+Shift+R"], "Resume the paused run",
                               self._on_resume, "resume")
        self.action_stop = a("action_stop", "Stop", ["Ctrl+.", "Shift+F5"],
                             "Stop the run (a checkpoint and summary are written)", self._on_stop, "stop")
        self.action_export = a("action_export", "Export…", ["Ctrl+E"],
                               "Export the trained model of the last run", self._on_export, "export")
        self.action_open_config = a("action_open_config", "Open config…", ["Ctrl+O"],
                                    "Load settings from a TOML file", self._on_open_config, "open")
        self.action_save_config = a("action_save_config", "Save config…", ["Ctrl+S"],
                                    "Save these settings as TOML (the command line runs it unchanged)",
                                    self._on_save_config, "save")
        self.action_open_run = a("action_open_run", "Open run…", ["Ctrl+Shift+O"],
                                 "Show the curves of a past run (its folder under runs/)", self._on_open_run, "runs")
        self.action_runs_dir = a("action_runs_dir", "Runs folder…", [],
                                 "Choose where new runs are written", self._on_choose_runs_dir)
        self.action_quit = a("action_quit", "Quit", ["Ctrl+Q"], "Close TrainDesk", self.close)
        self.action_dark = a("action_dark_theme", "Dark theme", ["Ctrl+Shift+T"], "Switch between light and dark",
                             self._on_toggle_theme)
        self.action_dark.setCheckable(True)
        self.action_clear = a("action_clear_plots", "Clear plots", [], "Remove the curves shown", self._on_clear)
        self.action_about = a("action_about", "About TrainDesk", [], "About", self._on_about)
        self.action_continue_run = a("action_continue_run", "Continue run", ["Ctrl+Shift+C"],
                                     "Continue the stopped or failed run on screen from its checkpoint",
                                     self._on_continue_run, "resume")
        self.action_lr_find = a("action_lr_find", "Find learning rate…", [],
                                "Run a learning-rate range test on this config and suggest a rate",
                                self._on_lr_find)
        self.action_find_fastest = a("action_find_fastest", "Find fastest…", [],
                                     "Probe each strategy and worker count on this config for a few seconds "
                                     "and suggest the fastest", self._on_find_fastest)
        self.action_compare = a("action_compare", "Compare", ["Ctrl+Shift+M"],
                                "Overlay the curves of the runs selected in Runs and list the settings that differ",
                                self._on_compare, "runs")
        self.action_fork = a("action_fork", "Fork…", ["Ctrl+Shift+F"],
                             "Start a new run from this run's checkpoint with the learning rate, weight decay, "
                             "batch size and epochs shown in the panel (a paused run is stopped first)",
                             self._on_fork, "start")
        self.action_show_runs = a("action_show_runs", "Runs", ["Ctrl+Shift+L"],
                                  "Every run of the runs folder: sort, filter, notes, compare", self._on_show_runs)

    def _build_central(self) -> None:
        self.panel = ConfigPanel()
        self.panel.browse_requested.connect(self._on_browse)
        self.panel.changed.connect(self._on_panel_changed)
        self.panel.mode_changed.connect(lambda _m: self._update_actions())
        scroll = QScrollArea(objectName="config_scroll")
        scroll.setWidget(self.panel)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # Wide enough for the panel and a vertical scroll bar: never clip it sideways.
        scroll.setMinimumWidth(self.panel.minimumSizeHint().width()
                               + scroll.verticalScrollBar().sizeHint().width() + 4)
        scroll.setMaximumWidth(520)

        self.banner = Banner()
        self.plots = PlotsPanel()
        self.log_pane = LogPane()
        right_top = QWidget()
        top_layout = QVBoxLayout(right_top)
        top_layout.setContentsMargins(0, 6, 0, 0)
        top_layout.setSpacing(6)
        top_layout.addWidget(self.banner)
        from app.evaluate_view import EvaluateView
        from app.predict_view import PredictView

        from app.compare_view import CompareView

        self.evaluate_view = EvaluateView()
        self.predict_view = PredictView()
        self.runs_view = RunsView([self.action_compare, self.action_fork])
        self.runs_view.active = self._active_runs
        self.runs_view.open_requested.connect(self.open_run)
        self.runs_view.error.connect(self._show_error)
        self.runs_view.selection_changed.connect(self._update_actions)
        self.compare_view = CompareView()
        self.compare_view.failed.connect(self._show_error)
        self.tabs = QTabWidget(objectName="tabs_main")
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.plots, "Training")
        self.tabs.addTab(self.runs_view, "Runs")
        self.tabs.addTab(self.compare_view, "Compare")
        self.tabs.addTab(self.evaluate_view, "Evaluate")
        self.tabs.addTab(self.predict_view, "Predict")
        self.tabs.currentChanged.connect(lambda _i: self._update_actions())
        self.search_view = SearchView()
        self.tabs.addTab(self.search_view, "Search")
        from app.serve_view import ServeView

        self.serve_view = ServeView()
        self.tabs.addTab(self.serve_view, "Serve")
        top_layout.addWidget(self.tabs, 1)
        self.right_splitter = QSplitter(Qt.Orientation.Vertical, objectName="right_splitter")
        self.right_splitter.addWidget(right_top)
        self.right_splitter.addWidget(self.log_pane)
        self.right_splitter.setStretchFactor(0, 5)
        self.right_splitter.setStretchFactor(1, 1)
        self.right_splitter.setSizes([600, 130])
        self.right_splitter.setChildrenCollapsible(False)

        self.main_splitter = QSplitter(Qt.Orientation.Horizontal, objectName="main_splitter")
        self.main_splitter.addWidget(scroll)
        self.main_splitter.addWidget(self.right_splitter)
        self.main_splitter.setStretchFactor(1, 1)
        self.main_splitter.setSizes([350, 930])
        self.main_splitter.setChildrenCollapsible(False)
        container = QWidget()
        layout = QVBoxLayout(container)
        layout.setContentsMargins(6, 0, 6, 4)
        layout.addWidget(self.main_splitter)
        self.setCentralWidget(container)

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        file_menu.addAction(self.action_open_config)
        file_menu.addAction(self.action_save_config)
        file_menu.addSeparator()
        file_menu.addAction(self.action_open_run)
        file_menu.addAction(self.action_show_runs)
        file_menu.addAction(self.action_compare)
        self.menu_recent = QMenu("Recent runs", self, objectName="menu_recent_runs")
        self.menu_recent.aboutToShow.connect(self._on_fill_recent)
        file_menu.addMenu(self.menu_recent)
        file_menu.addAction(self.action_runs_dir)
        file_menu.addSeparator()
        file_menu.addAction(self.action_export)
        file_menu.addSeparator()
        file_menu.addAction(self.action_quit)
        run_menu = bar.addMenu("&Run")
        for action in (self.action_start, self.action_pause, self.action_resume, self.action_stop):
            run_menu.addAction(action)
        run_menu.addSeparator()
        run_menu.addAction(self.action_continue_run)
        run_menu.addAction(self.action_fork)
        run_menu.addAction(self.action_find_fastest)
        run_menu.addAction(self.action_lr_find)
        view_menu = bar.addMenu("&View")
        view_menu.addAction(self.action_dark)
        view_menu.addAction(self.action_clear)
        help_menu = bar.addMenu("&Help")
        help_menu.addAction(self.action_about)

    def _build_toolbar(self) -> None:
        tb = QToolBar("Run", objectName="toolbar_run")
        tb.setMovable(False)
        tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        for action in (self.action_start, self.action_pause, self.action_resume, self.action_stop):
            tb.addAction(action)
        tb.addAction(self.action_fork)
        tb.addAction(self.action_find_fastest)
        tb.addSeparator()
        for action in (self.action_open_config, self.action_save_config, self.action_open_run):
            tb.addAction(action)
        tb.addSeparator()
        tb.addAction(self.action_export)
        self.addToolBar(tb)
        self.toolbar = tb
        self.toolbar_fit = ToolbarFit(tb, self)  # icons alone when the text would push actions off

    def _build_status_bar(self) -> None:
        status = self.statusBar()
        self.label_state = QLabel("Ready", objectName="label_state")
        self.label_throughput = QLabel("", objectName="label_throughput")
        self.label_throughput.setToolTip("Training samples per second, all workers together")
        self.label_run_dir = QLabel("", objectName="label_run_dir")
        self.label_run_dir.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.progress_run = QProgressBar(objectName="progress_run")
        self.progress_run.setRange(0, PROGRESS_STEPS)
        self.progress_run.setValue(0)
        self.progress_run.setFixedWidth(300)
        self.progress_run.setFormat("No run")
        self.progress_run.setTextVisible(True)
        self.label_winner = QLabel("", objectName="label_winner")
        self.label_winner.setToolTip("The sweep's best setting (its model is the run's result)")
        self.progress_advisor = QProgressBar(objectName="progress_advisor")
        self.progress_advisor.setFixedWidth(160)
        self.progress_advisor.setFormat("probe %v/%m")
        self.progress_advisor.hide()
        self.button_cancel_advisor = QToolButton(objectName="button_cancel_advisor")
        self.button_cancel_advisor.setText("Cancel")
        self.button_cancel_advisor.setToolTip("Stop probing: the probe running now ends at once")
        self.button_cancel_advisor.clicked.connect(self.cancel_find_fastest)
        self.button_cancel_advisor.hide()
        status.addWidget(self.label_state)
        status.addWidget(self.label_run_dir, 1)
        status.addPermanentWidget(self.label_winner)
        status.addPermanentWidget(self.progress_advisor)
        status.addPermanentWidget(self.button_cancel_advisor)
        status.addPermanentWidget(self.label_throughput)
        status.addPermanentWidget(self.progress_run)

    # -- settings --------------------------------------------------------------
    @property
    def runs_dir(self) -> str:
        return self._runs_dir_override or self.settings.runs_dir

    def _restore_settings(self) -> None:
        s = self.settings
        geometry = s.geometry
        if geometry is None or not self.restoreGeometry(geometry):
            self.resize(1280, 800)
        for name, splitter in (("main_splitter", self.main_splitter), ("right_splitter", self.right_splitter),
                               ("plots_splitter", self.plots.splitter)):
            state = s.splitter_state(name)
            if state is not None:
                splitter.restoreState(state)
        text = s.last_config_toml
        if text:
            try:
                self.panel.set_config(parse_toml(text))
            except ConfigError:
                pass  # a config from an older version: start from the defaults
        self.plots.set_x_mode(s.x_axis)
        self.plots.check_log_y.setChecked(s.log_y)
        self.plots.set_smoothing(s.smoothing)

    def _save_settings(self) -> None:
        s = self.settings
        s.geometry = self.saveGeometry()
        s.set_splitter_state("main_splitter", self.main_splitter.saveState())
        s.set_splitter_state("right_splitter", self.right_splitter.saveState())
        s.set_splitter_state("plots_splitter", self.plots.splitter.saveState())
        self._save_last_config()
        s.sync()

    def _save_last_config(self) -> None:
        own = self.panel.own_config()  # not the settings of a run on screen
        if own is not None:  # else keep the last valid one
            self.settings.last_config_toml = own.to_toml()

    # -- theme -----------------------------------------------------------------
    def _apply_theme(self, name: str) -> None:
        app = QApplication.instance()
        if isinstance(app, QApplication):
            self._theme = apply_theme(app, name)
        else:  # pragma: no cover - a QMainWindow always has a QApplication
            self._theme = get_theme(name)
        t = self._theme
        self.action_dark.setChecked(t.name == "dark")
        for action in self.findChildren(QAction):
            if isinstance(action.data(), str):
                action.setIcon(icons.icon(action.data(), t.icon))
        self.panel.set_icons(icons.icon("open", t.icon))
        # Actions that do not fit a narrow window go behind the toolbar's overflow button: make it visible.
        more = self.toolbar.findChild(QToolButton, "qt_toolbar_ext_button")
        if more is not None:
            more.setIcon(icons.icon("more", t.icon))
            more.setToolTip("More actions")
        self.plots.apply_colors(t.plot)
        self.compare_view.apply_colors(t.plot)
        for widget in (self.search_view.plot_search_parallel, self.evaluate_view.plot_actual,
                       self.evaluate_view.plot_residuals,
                       *([self.lr_finder.plot_lr_finder] if self.lr_finder is not None else [])):
            style_plot_widget(widget, t.plot)
        self.evaluate_view.refresh_colors()
        self.log_pane.set_colors(t.error, t.warning, t.muted)

    def _on_toggle_theme(self, dark: bool) -> None:
        self._apply_theme("dark" if dark else "light")
        self.settings.theme = self._theme.name

    # -- state -----------------------------------------------------------------
    def window_state(self) -> WindowState:
        """The facts every action's enablement is derived from (see app/window_state.py)."""
        return WindowState(
            run_state=self.controller.state, run_active=self.controller.active, attached=self.controller.attached,
            advising=self.advising, cancelling=self._advisor_cancel, preparing=self._preparing,
            loading=self._calls.running("read-run"), closing=self._close_when_ended,
            run_config_shown=self.panel.mode == "view" or self.panel.showing_run_config,
            viewing=self.viewing_run.name if self.viewing_run is not None else "",
            selected_runs=len(self.runs_view.selected_runs()), continuable=self._continuable_run() is not None,
            fork_source=self._fork_source() is not None, export_target=self._export_run_dir() is not None,
            export_available=EXPORT_AVAILABLE)

    def _update_actions(self) -> None:
        """Apply what the window's state allows; called after every change, failures included."""
        derived = derive(self.window_state())
        for name, enabled in derived.enabled.items():
            target = self.menu_recent if name == "menu_recent_runs" else self.findChild(QAction, name)
            if target is not None:
                target.setEnabled(enabled)
        self.action_start.setToolTip("Use these settings or go back to yours first (Ctrl+R, F5)"
                                     if derived.panel_mode == "view" else
                                     "Start training with these settings (Ctrl+R, F5)")
        target = None if self.controller.active else self._export_run_dir()
        self.action_export.setToolTip(
            "Export is not available yet in this version (Ctrl+E)" if not EXPORT_AVAILABLE else
            f"Export the trained model of {target.name} (Ctrl+E)" if target else
            "Export the trained model: finish a run or open a past one first (Ctrl+E)")
        self.label_state.setText(derived.status)
        if derived.panel_mode != self.panel.mode:
            self.panel.set_mode(derived.panel_mode)

    @Slot(str)
    def _on_state_changed(self, state: str) -> None:
        if state == "paused":
            self.label_throughput.setText("paused")
        self._update_actions()
        self._update_progress()

    # -- run commands ----------------------------------------------------------
    def _on_start(self) -> None:
        if self.controller.active:
            return
        cfg = self.panel.try_config()
        if cfg is None:
            self._show_input_error(self.panel.label_config_error.text())
            return
        if self.panel.mode == "view":
            return
        self.banner.hide()
        self._record_error = ""
        self.viewing_run = None
        self.plots.reset(t0=time.time())
        self._apply_run_shape(cfg)
        self._progress = make_progress(cfg)
        self.progress_run.setValue(0)
        self.label_run_dir.setText("")
        self.label_throughput.setText("")
        self._save_last_config()
        self.log_pane.add_message("state", f"starting: {cfg.parallel.strategy}, {cfg.parallel.workers} worker(s), "
                                           f"{cfg.data.source}, {cfg.model.kind}", who="session")
        self.controller.start(cfg, self.runs_dir)

    def _on_pause(self) -> None:
        self.controller.pause()

    def _on_resume(self) -> None:
        """Resume; settings edited while paused apply at the next batch of every worker."""
        session = self.controller.session
        changes: dict[str, Any] = {}
        if session is not None and not self.controller.attached:
            try:
                changes = self.panel.live_changes(session.config)
            except ConfigError as exc:
                self.panel.show_error(str(exc))
                self._show_input_error(str(exc))
                return
        try:
            self.controller.resume(changes)
        except ConfigError as exc:  # the run stays paused
            self.panel.show_error(str(exc))
            self._show_input_error(str(exc))
            return
        if changes:
            text = ", ".join(f"{k} = {v}" for k, v in changes.items())
            self.log_pane.add_message("state", f"resumed with {text}", who="session")
            if self._progress is not None and "train.epochs" in changes:
                self._progress.epochs = int(changes["train.epochs"])
        self.banner.hide()

    def _on_stop(self) -> None:
        self.controller.stop()

    def _export_run_dir(self) -> Path | None:
        """The run Export would export: the one on screen (past or just ended), if it has weights."""
        run_dir = self.viewing_run or self.controller.run_dir
        if run_dir is None or not (Path(run_dir) / "checkpoints" / "last.pt").is_file():
            return None
        return Path(run_dir)

    def _on_export(self) -> None:
        run_dir = self._export_run_dir()
        if not EXPORT_AVAILABLE or run_dir is None or self.controller.active:
            return
        from app.export_dialog import ExportDialog

        dialog = ExportDialog(run_dir, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()  # window-modal, without a nested event loop

    @Slot(str)
    def _on_start_failed(self, message: str) -> None:
        # Said once: the dataset summary may already show a data error, the log the session's own record of it.
        logged = message in self._record_error
        if message in self.panel.label_dataset_summary.text():
            self._show_input_error("The run did not start: the dataset cannot be used (its summary, on the "
                                   "left, says why)", logged=True)
            if not logged:
                self.log_pane.add_message("error", message)
        else:
            self.panel.show_error(message)
            self._show_input_error(message, logged=logged)
        self._progress = None
        self.progress_run.setFormat("Not started")
        self._update_actions()

    @Slot(object)
    def _on_run_started(self, session: Any) -> None:
        self.viewing_run = None  # the run on screen is the new one now (a failed start keeps the old)
        self.plots.set_live(True)
        info = getattr(session, "info", None)
        if info is not None and self._progress is not None:
            self._progress.workers = session.num_workers
            self._progress.samples_per_epoch = session.strategy.samples_per_epoch(info.n_train)
        if self.controller.attached:
            self.label_run_dir.setText(session.describe())
            self.log_pane.add_message("state", session.describe(), who="session")
        elif session.run_dir is not None:
            self.label_run_dir.setText(str(session.run_dir))
            self.log_pane.add_message("state", f"run folder {session.run_dir}", who="session")
            parent = getattr(session, "parent", None)
            if parent:
                self.log_pane.add_message("state", f"fork of {parent['name']} at step {parent['step']}",
                                          who="session")
        self.runs_view.refresh()
        self._update_actions()

    @Slot(list)
    def _on_records(self, records: list[dict[str, Any]]) -> None:
        self.plots.add_records(records)
        self.search_view.add_records(records)
        errors = self.log_pane.add_records(records)
        if errors:
            self._record_error = errors[-1]
            self._show_error(errors[-1], logged=True)
        if self._progress is not None:
            self._progress.add(records)
            self._update_progress()
        rate = self.plots.data.total_rate()
        if self.controller.state == "running" and math.isfinite(rate):
            self.label_throughput.setText(f"{rate:,.0f} samples/s")
        if self.controller.attached and any(r.get("kind") == "state" for r in records):
            self.label_run_dir.setText(self.controller.session.describe())

    def _update_progress(self) -> None:
        p = self._progress
        if p is None:
            return
        self.progress_run.setValue(int(round(p.progress * PROGRESS_STEPS)))
        state = self.controller.state
        if state in ("finished", "stopped", "failed"):
            tail = STATE_TEXT[state].lower()
        elif state == "paused":
            tail = "paused"
        elif state == "starting":
            tail = "starting…"
        else:
            tail = f"ETA {format_duration(p.eta_s())}"
        if isinstance(p, TrialProgress):  # a search counts trials, not epochs
            self.progress_run.setFormat(p.label(tail))
            return
        # The epoch the run as a whole is in, consistent with the percentage (workers differ).
        epoch = min(p.epochs, int(p.progress * p.epochs) + 1) if p.epoch else 0
        ended = p.describe_end()
        self.progress_run.setFormat(f"{ended[0].upper()}{ended[1:]} · %p%" if ended else
                                    f"Epoch {epoch}/{p.epochs} · %p% · {tail}")

    @Slot(str, object, object)
    def _on_run_ended(self, status: str, summary: Any, error: Any) -> None:
        self.plots.flush()  # every plot complete now, not at the side plots' next turn
        self.plots.set_live(False)  # and fitted to the whole run
        if self._progress is not None:
            self._progress.end(status, summary)
        ended = self._progress.describe_end() if self._progress is not None else None
        if summary:
            final = summary.get("final") or {}
            parts = [search_end_text(status, summary) or ended
                     or f"{status} after {summary.get('epochs_done', 0)} epoch(s)",
                     f"{summary.get('samples_per_s', 0):,.0f} samples/s"]
            if final.get("val_accuracy") is not None:
                parts.append(f"val accuracy {final['val_accuracy']:.3f}")
            self.log_pane.add_message("error" if status == "failed" else "state", ", ".join(parts), who="session")
        if status == "failed":
            self._show_error(f"The run failed: {error or 'see the log'}")
        self.label_throughput.setText("")
        self._update_progress()
        self._update_actions()
        run_dir = self.controller.run_dir
        if summary:
            self._show_winner(summary)
        if status != "failed" and run_dir is not None and not self._close_when_ended:
            self.evaluate_view.load_run(run_dir)  # eval.json, written at the end of the run
        self.runs_view.refresh()
        if self._close_when_ended:
            QTimer.singleShot(0, self.close)
            return
        after, self._after_end = self._after_end, None
        if after is not None:
            after()

    def _show_error(self, message: str, logged: bool = False) -> None:
        """The banner shows it; the log keeps it unless it is there already (a record said it)."""
        self.banner.show_message(message, "error")
        self.banner.setProperty("cause", "")
        if not logged:
            self.log_pane.add_message("error", message)
        self._update_actions()  # whatever failed, the actions follow the state it left

    def _show_input_error(self, message: str, logged: bool = False) -> None:
        """An error in what the user typed or chose: it goes away once they change it."""
        self._show_error(message, logged)
        self.banner.setProperty("cause", "input")

    def _on_panel_changed(self) -> None:
        if self.banner.isVisible() and self.banner.property("cause") == "input":
            self.banner.hide()
        self._update_actions()

    # -- what the workers are: labels, shared or separate models, a sweep's winner ----------
    def _apply_run_shape(self, cfg: Config, summary: dict[str, Any] | None = None) -> None:
        from core.strategies import get_strategy

        strategy = get_strategy(cfg)
        n = strategy.num_workers
        separate = strategy.num_models > 1
        sweep = {w: strategy.worker_lr(w) for w in range(n)} if separate and cfg.parallel.sweep_lr else None
        self.plots.set_run_shape({w: strategy.worker_label(w) for w in range(n)}, separate, sweep,
                                 per_trial=strategy.trial_budget() is not None)
        self.label_winner.setText("")
        self.evaluate_view.set_context("")
        if summary:
            self._show_winner(summary, announce=False)

    def _show_winner(self, summary: dict[str, Any], announce: bool = True) -> None:
        """Name a sweep's best setting in the status bar, the log and the Evaluate tab; draw it bolder."""
        if self.plots.data.per_trial and isinstance(summary.get("best_trial"), int):
            self.plots.set_winner(summary["best_trial"])  # a search's result: its best trial, drawn bolder
            return
        best = summary.get("best_worker")
        sweep = summary.get("sweep")
        if not isinstance(best, int) or not isinstance(sweep, list) or len(sweep) < 2:
            return
        entry = next((e for e in sweep if e.get("worker") == best), {})
        label = entry.get("label") or self.plots.data.label(best)
        acc = entry.get("val_accuracy")
        text = f"best: {label}" + (f" (val accuracy {acc:.4f})" if isinstance(acc, (int, float)) else "")
        self.label_winner.setText(text)
        self.plots.set_winner(best)
        self.evaluate_view.set_context(f"Sweep winner {label}: the evaluation below is of its model.")
        if announce:
            self.log_pane.add_message("state", f"sweep {text}", who="session")

    def _active_runs(self) -> set[Path]:
        run_dir = self.controller.run_dir
        return {Path(run_dir)} if run_dir is not None and self.controller.active else set()

    # -- runs and comparison ---------------------------------------------------------------
    def _on_show_runs(self) -> None:
        self.tabs.setCurrentWidget(self.runs_view)

    def _on_compare(self) -> None:
        runs = self.runs_view.selected_runs()
        if len(runs) < 2:
            self._show_error("select two or more runs in Runs to compare them")
            return
        self.compare_view.compare(runs)
        self.tabs.setCurrentWidget(self.compare_view)

    # -- config files ----------------------------------------------------------
    def open_config(self, path: str | Path) -> bool:
        try:
            cfg = load_config(path)
        except ConfigError as exc:
            self.panel.show_error(str(exc))
            self._show_error(str(exc))
            return False
        self.panel.set_config(cfg)
        self.settings.set_last_dir("config", path)
        self.log_pane.add_message("state", f"loaded config {path}")
        return True

    def save_config(self, path: str | Path) -> bool:
        cfg = self.panel.try_config()
        if cfg is None:
            self._show_error(self.panel.label_config_error.text())
            return False
        try:
            save_config(cfg, path)
        except OSError as exc:
            self._show_error(f"could not save {path}: {exc.strerror or exc}")
            return False
        self.settings.set_last_dir("config", path)
        self.log_pane.add_message("state", f"saved config {path}")
        return True

    def _on_open_config(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open config", self.settings.last_dir("config"),
                                              "TOML config (*.toml);;All files (*)")
        if path:
            self.open_config(path)

    def _on_save_config(self) -> None:
        default = str(Path(self.settings.last_dir("config")) / "config.toml")
        path, _ = QFileDialog.getSaveFileName(self, "Save config", default, "TOML config (*.toml)")
        if path:
            if not path.endswith(".toml"):
                path += ".toml"
            self.save_config(path)

    def _on_browse(self, kind: str) -> None:
        start = self.settings.last_dir("data")
        if kind == "images":
            path = QFileDialog.getExistingDirectory(self, "Image folder (one sub-folder per class)", start)
        else:
            filters = {"csv": "CSV files (*.csv)", "npz": "NumPy archives (*.npz)", "custom": "Python files (*.py)"}
            path, _ = QFileDialog.getOpenFileName(self, "Choose a file", start, filters[kind] + ";;All files (*)")
        if not path:
            return
        self.settings.set_last_dir("data", path)
        if kind == "custom":
            self.panel.edit_custom_model.setText(f"{path}:build_model")
            self.panel.edit_custom_model.setFocus()
            self.panel.edit_custom_model.setSelection(len(path) + 1, len("build_model"))
        else:
            self.panel.add_source(f"{kind}:{path}")

    def _on_choose_runs_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Runs folder", str(Path(self.runs_dir).resolve()))
        if path:
            self.settings.runs_dir = path
            self._runs_dir_override = None
            self.log_pane.add_message("state", f"new runs go to {path}")
            self.runs_view.set_runs_dir(self.runs_dir)

    # -- past runs -------------------------------------------------------------
    def _on_fill_recent(self) -> None:
        self.menu_recent.clear()
        runs = list_runs(Path(self.runs_dir))[:RECENT_RUNS]
        if not runs:
            empty = self.menu_recent.addAction(f"No runs in {self.runs_dir}")
            empty.setEnabled(False)
            return
        for run in runs:
            status = (run.read_summary() or {}).get("status") or "no summary"
            action = self.menu_recent.addAction(f"{run.name}   ({status})")
            action.triggered.connect(lambda _checked=False, d=run.path: self.open_run(d))

    def _on_open_run(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open run folder", str(Path(self.runs_dir).resolve()))
        if path:
            self.open_run(path)

    def open_run(self, run_dir: str | Path) -> None:
        """Show a run: a live one of another process is followed (attached), any other as history.

        Its curves (a fork's drawn on from its parent's), its settings (read-only in the panel until
        "Use these settings") and its evaluation. Files are read off the GUI thread.
        """
        if self.controller.active or self._preparing:
            return
        run_dir = Path(run_dir)
        if not (run_dir / "metrics.jsonl").is_file():
            self._show_error(f"{run_dir} has no metrics.jsonl: not a run folder")
            return
        from core.control import active_run_pid

        if active_run_pid(run_dir) is not None:
            self.attach_run(run_dir)
            return
        self._calls.call(lambda: _read_run(run_dir), lambda result: self._on_run_loaded(run_dir, *result),
                         lambda exc: self._show_error(f"could not read {run_dir}: {exc}"), name="read-run")
        self._update_actions()

    def attach_run(self, run_dir: Path) -> None:
        """Follow the live run another process runs in ``run_dir``: curves grow, Pause/Resume/Stop steer it."""
        try:
            cfg = load_config(run_dir / "config.toml")
        except ConfigError as exc:
            self._show_error(str(exc))
            return
        self.banner.hide()
        self.viewing_run = None
        self.plots.reset()
        self._apply_run_shape(cfg)
        self._progress = make_progress(cfg)
        self.panel.show_run_config(cfg, run_dir.name)  # the run's settings, not the window's
        self.tabs.setCurrentWidget(self.plots)
        self.log_pane.add_message("state", f"attaching to the live run in {run_dir}", who="session")
        self.controller.attach(run_dir)

    def _on_run_loaded(self, run_dir: Path, records: list[dict[str, Any]], summary: dict[str, Any] | None,
                       cfg: Config | None) -> None:
        if self.controller.active:
            return  # a run started meanwhile: it owns the plots
        self.viewing_run = run_dir
        self._viewing_summary = summary
        self.banner.hide()
        self.plots.reset()
        if cfg is not None:
            self._apply_run_shape(cfg, summary)
        parent = (summary or {}).get("parent")
        if isinstance(parent, dict) and parent.get("name"):  # the parent's curves first, then the fork's
            self.plots.data.next_start = fork_marker(str(parent["name"]))
        self.plots.add_records(records)
        self.plots.flush()
        self.search_view.reset()
        self.search_view.add_records(records)
        self.search_view.show_summary(summary)
        self.log_pane.add_message("state", f"showing {run_dir} ({len(records):,} records)")
        self.log_pane.add_records([r for r in records if r.get("kind") == "log"])
        status = (summary or {}).get("status", "")
        self.label_run_dir.setText(str(run_dir))
        epochs = (summary or {}).get("epochs_done", 0)
        self._progress = None
        self.progress_run.setValue(PROGRESS_STEPS if status == "finished" else 0)
        self.progress_run.setFormat(f"{status or 'no summary'} · {epochs} epoch(s)")
        if cfg is not None:
            self.panel.show_run_config(cfg, run_dir.name)
        self._update_actions()
        if (run_dir / "checkpoints" / "last.pt").is_file():
            self.evaluate_view.load_run(run_dir)

    # -- misc ------------------------------------------------------------------
    def _on_view_changed(self) -> None:
        self.settings.x_axis = self.plots.x_mode
        self.settings.log_y = self.plots.check_log_y.isChecked()
        self.settings.smoothing = self.plots.data.smoothing

    def _on_clear(self) -> None:
        self.plots.reset()
        self.log_pane.clear()
        self.banner.hide()
        self._progress = None
        self.progress_run.setValue(0)
        self.progress_run.setFormat("No run")

    def _on_about(self) -> None:
        QMessageBox.about(self, "About TrainDesk",
                          "<b>TrainDesk</b><br>Train PyTorch models with several processes and watch them live.")

    # -- continue a run --------------------------------------------------------
    def _continuable_run(self) -> Path | None:
        """The run on screen, if it stopped or failed (or finished short of the epochs asked for now)."""
        run_dir = self.viewing_run or self.controller.run_dir
        if run_dir is None or not (Path(run_dir) / "checkpoints" / "last.pt").is_file():
            return None
        summary = read_summary(Path(run_dir)) or {}
        if summary.get("status") in ("stopped", "failed"):
            return Path(run_dir)
        if summary.get("status") == "finished" and self.panel.spin_epochs.value() > summary.get("epochs_done", 0):
            return Path(run_dir)
        return None

    def _on_continue_run(self) -> None:
        run_dir = self._continuable_run()
        if run_dir is None or self.controller.active or self._preparing:
            return
        summary = read_summary(run_dir) or {}
        wanted = self.panel.spin_epochs.value()
        epochs = wanted if wanted > summary.get("epochs_done", 0) else None
        self._preparing = True  # nothing else starts while the history is read
        self._update_actions()
        self._calls.call(lambda: _read_run(run_dir), lambda result: self._continue_with_history(run_dir, epochs, *result),
                         lambda exc: self._continue_with_history(run_dir, epochs, [], None, None), name="read-run")

    def _continue_with_history(self, run_dir: Path, epochs: int | None, records: list[dict[str, Any]],
                               _summary: Any, cfg: Config | None) -> None:
        """The earlier curves stay; the continued run's go on from them, with a marker where it resumed."""
        self._preparing = False
        self.banner.hide()
        if cfg is None:
            cfg = self.panel.config()
        if epochs is not None:
            cfg = cfg.replace("train", epochs=epochs)
        if self.panel.showing_run_config:  # the run's settings become the user's (the panel is locked now)
            self.panel.use_shown_config()
        self.panel.set_config(cfg)
        self.plots.reset()
        self._apply_run_shape(cfg)
        self.plots.add_records(records)
        self.plots.flush()
        self.tabs.setCurrentWidget(self.plots)
        self._progress = make_progress(cfg)
        self._progress.resume_from(records)  # counts from where the run stopped, not from zero
        self._update_progress()
        self.log_pane.add_message("state", f"continuing {run_dir.name} from its checkpoint", who="session")
        self.controller.continue_run(run_dir, epochs)

    # -- fork ------------------------------------------------------------------
    def _fork_source(self) -> Path | None:
        """The run Fork branches from: a paused run of ours, or the run on screen with a checkpoint."""
        if self.controller.active:
            if self.controller.state == "paused" and not self.controller.attached:
                return self.controller.run_dir
            return None
        selected = self.runs_view.selected_runs() if self.tabs.currentWidget() is self.runs_view else []
        run_dir = selected[0] if len(selected) == 1 else (self.viewing_run or self.controller.run_dir)
        if run_dir is None or not (Path(run_dir) / "checkpoints" / "last.pt").is_file():
            return None
        return Path(run_dir)

    def fork_changes(self, source_cfg: Config) -> dict[str, Any]:
        """The optim.* and train.* values shown in the panel that differ from the source run's."""
        shown = to_dict(self.panel.config())
        base = to_dict(source_cfg)
        return {f"{section}.{key}": value for section in ("optim", "train")
                for key, value in shown[section].items() if base[section].get(key) != value}

    def _on_fork(self) -> None:
        run_dir = self._fork_source()
        if run_dir is None:
            return
        try:
            source_cfg = self.controller.session.config if self.controller.active else \
                load_config(run_dir / "config.toml")
            changes = self.fork_changes(source_cfg)
        except ConfigError as exc:
            self.panel.show_error(str(exc))
            self._show_input_error(str(exc))
            return
        summary = {} if self.controller.active else (read_summary(run_dir) or {})
        done = int(summary.get("epochs_done") or 0)
        if summary.get("status") == "finished" and int(changes.get("train.epochs", source_cfg.train.epochs)) <= done:
            # It trained all its epochs: the fork needs more to train at all.
            epochs = self.ask_fork_epochs(run_dir.name, done)
            if epochs is None:
                return
            changes["train.epochs"] = epochs
        if self.controller.active:
            # One active run per runs folder: the paused run stops first (its checkpoint is the pause point).
            self.log_pane.add_message("state", f"stopping {run_dir.name} to fork it", who="session")
            self._after_end = lambda: self._start_fork(run_dir, changes)
            self.controller.stop()
            self._update_actions()
            return
        self._start_fork(run_dir, changes)

    def ask_fork_epochs(self, run_name: str, done: int) -> int | None:
        """How many epochs a fork of a finished run trains in all (tests monkeypatch this); None: cancelled."""
        from PySide6.QtWidgets import QInputDialog

        epochs, ok = QInputDialog.getInt(
            self, "Fork a finished run", f"{run_name} finished all its {done} epochs.\n"
            "Train the fork up to epoch:", max(done + 1, 2 * done), done + 1, 1_000_000)
        return int(epochs) if ok else None

    def _start_fork(self, run_dir: Path, changes: dict[str, Any]) -> None:
        self._preparing = True
        self._update_actions()
        self._calls.call(lambda: _read_run(run_dir), lambda result: self._fork_with_history(run_dir, changes, *result),
                         lambda exc: self._fork_with_history(run_dir, changes, [], None, None), name="read-run")

    def _fork_with_history(self, run_dir: Path, changes: dict[str, Any], records: list[dict[str, Any]],
                           _summary: Any, cfg: Config | None) -> None:
        """The parent's curves first, the fork's branching from them."""
        self._preparing = False
        self.banner.hide()
        if self.panel.showing_run_config:  # the run's settings become the user's (the panel is locked now)
            self.panel.use_shown_config()
        if cfg is not None:
            from core.workers import apply_changes

            try:
                self.panel.set_config(apply_changes(cfg, changes))
            except ConfigError:
                pass
            self.plots.reset()
            self._apply_run_shape(cfg)
        else:
            self.plots.reset()
        self.plots.add_records([r for r in records if r.get("kind") in ("step", "eval", "config")])
        self.plots.data.next_start = fork_marker(run_dir.name)
        self.plots.flush()
        self.tabs.setCurrentWidget(self.plots)
        epochs = self.panel.spin_epochs.value()
        self._progress = make_progress(cfg, epochs) if cfg else ProgressTracker(epochs, 1)
        self._progress.resume_from(records)
        text = ", ".join(f"{k} = {v}" for k, v in changes.items()) or "the same settings"
        self.log_pane.add_message("state", f"forking {run_dir.name} with {text}", who="session")
        self.controller.fork(run_dir, changes)

    # -- find fastest ----------------------------------------------------------
    def _on_lr_find(self) -> None:
        cfg = self.panel.try_config()
        if cfg is None:
            self._show_error(self.panel.label_config_error.text())
            return
        self.lr_finder = LRFinderDialog(cfg, self)
        self.lr_finder.use_lr.connect(lambda lr: self.panel.edit_lr.setText(f"{lr:.6g}"))
        self.lr_finder.show()
        self.lr_finder.run()

    def _on_find_fastest(self) -> None:
        if self.controller.active or self.advising:
            return
        cfg = self.panel.try_config()
        if cfg is None:
            self._show_error(self.panel.label_config_error.text())
            return
        from core.advisor import advise, candidates
        from core.machine import usable_cores

        self.advising = True
        self._advisor_cancel = False
        self._update_actions()
        n = len(candidates(usable_cores()))
        self._advisor_done, self._advisor_total = 0, n
        self.progress_advisor.setRange(0, n)
        self.progress_advisor.setValue(0)
        self.progress_advisor.show()
        self.button_cancel_advisor.setEnabled(True)
        self.button_cancel_advisor.show()
        self.log_pane.add_message("state", f"find fastest: {n} probes of {ADVISOR_SECONDS:g} s on this config",
                                  who="advisor")
        lines = self._advisor_lines
        self._calls.call(
            lambda: advise(cfg, seconds=ADVISOR_SECONDS, report=lines.line.emit,
                           cancelled=lambda: self._advisor_cancel),
            self._on_advice, self._on_advice_failed, name="advisor")

    @Slot(str)
    def _on_advisor_line(self, text: str) -> None:
        self.log_pane.add_message("state", text, who="advisor")
        self._advisor_done += 1  # one line per probe
        self.progress_advisor.setValue(min(self._advisor_done, self._advisor_total))

    def cancel_find_fastest(self) -> None:
        """Stop probing: the running probe ends at once and no suggestion is offered."""
        if self.advising:
            self._advisor_cancel = True
            self.button_cancel_advisor.setEnabled(False)
            self._update_actions()

    def _end_advising(self) -> None:
        self.advising = False
        self.progress_advisor.hide()
        self.button_cancel_advisor.hide()

    def _on_advice(self, result: dict[str, Any]) -> None:
        self._end_advising()
        self._update_actions()
        best = result.get("suggestion")
        if result.get("cancelled") or best is None:
            self.log_pane.add_message("state", "find fastest: cancelled" if result.get("cancelled")
                                      else "find fastest: no suggestion", who="advisor")
            return
        text = f"{best['strategy']} with {best['workers']} worker(s): {best['samples_per_s']:,.0f} samples/s"
        current = self.panel.config().parallel
        result["is_current"] = (current.strategy, current.workers) == (best["strategy"], best["workers"])
        self.log_pane.add_message("state", f"find fastest suggests {text}"
                                  + (": that is the current setting" if result["is_current"] else ""), who="advisor")
        if self.ask_use_advice(result) and not result["is_current"]:
            self.apply_advice(result)

    def _on_advice_failed(self, exc: BaseException) -> None:
        self._end_advising()
        self._update_actions()
        self._show_error(f"find fastest failed: {' '.join(str(exc).splitlines())}")

    def ask_use_advice(self, result: dict[str, Any]) -> bool:
        """Show the probes and ask whether to use the suggestion (tests monkeypatch this)."""
        rows = "".join(
            f"<tr><td>{p['strategy']} ×{p['workers']}</td><td align=right>{p['samples_per_s']:,.0f}</td>"
            f"<td align=right>{'no epoch in the probe' if p['best_accuracy'] is None else format(p['best_accuracy'], '.3f')}"
            f"</td></tr>" for p in result["probes"])
        best = result["suggestion"]
        box = QMessageBox(self)
        box.setWindowTitle("Fastest setting")
        box.setTextFormat(Qt.TextFormat.RichText)
        table = f"<table cellspacing=6><tr><th>strategy</th><th>samples/s</th><th>val acc</th></tr>{rows}</table>"
        if result.get("is_current"):
            box.setText(f"{table}<p><b>{best['strategy']}</b> with <b>{best['workers']}</b> worker(s) is fastest: "
                        "that is already your setting.</p>")
            box.setStandardButtons(QMessageBox.StandardButton.Ok)
            box.exec()
            return False
        box.setText(f"{table}<p>Use <b>{best['strategy']}</b> with <b>{best['workers']}</b> worker(s)?</p>")
        box.setStandardButtons(QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No)
        return box.exec() == QMessageBox.StandardButton.Yes

    def apply_advice(self, result: dict[str, Any]) -> None:
        best = result["suggestion"]
        cfg = self.panel.config()
        self.panel.set_config(cfg.replace("parallel", strategy=best["strategy"], workers=best["workers"],
                                          sweep_lr=[]))

    # -- closing ---------------------------------------------------------------
    def confirm_stop_on_close(self) -> bool:
        """Ask whether to stop the active run (tests monkeypatch this or set ask_before_close)."""
        answer = QMessageBox.question(
            self, "Stop the run?", "A run is in progress. Stop it and close TrainDesk?\n"
            "A checkpoint and summary are written first.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self._advisor_cancel = True  # a probe in progress stops at once
        if self.controller.active and not self.controller.attached:  # an attached run goes on without us
            if not self._close_when_ended:
                if self.ask_before_close and not self.confirm_stop_on_close():
                    event.ignore()
                    return
                self._close_when_ended = True
                self.log_pane.add_message("state", "stopping the run before closing…", who="session")
                self.controller.stop()
                self._update_actions()
            # Close once run_ended arrives: the GUI keeps painting while workers finish.
            event.ignore()
            return
        self._save_settings()
        self.panel.shutdown()
        self.runs_view.wait(5.0)
        self.compare_view.wait(5.0)
        if self.lr_finder is not None:
            self.lr_finder.shutdown()
        self.evaluate_view.wait(5.0)
        self.predict_view.wait(5.0)
        self.serve_view.shutdown()  # the server drains and exits
        self._calls.forget_all()
        self._calls.wait_all(5.0)
        self.controller.shutdown()
        self._gc.stop()
        event.accept()


def _read_run(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None, Config | None]:
    """A run's records (a fork's preceded by its parent's up to the branch), summary and config.

    Background thread.
    """
    records = list(read_metrics(run_dir / "metrics.jsonl")) if (run_dir / "metrics.jsonl").is_file() else []
    summary = read_summary(run_dir)
    try:
        cfg: Config | None = load_config(run_dir / "config.toml")
    except (ConfigError, OSError):
        cfg = None
    parent = (summary or {}).get("parent")
    if isinstance(parent, dict) and parent.get("run"):
        records = _parent_records(Path(parent["run"]), records) + records
    return records, summary, cfg


def _parent_records(parent_dir: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parent's step and eval records up to where the fork branched (each worker's first step)."""
    path = parent_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    first_step: dict[int, float] = {}
    first_epoch = min((r.get("epoch", 1) for r in records if r.get("kind") == "eval"), default=10**9)
    for r in records:
        if r.get("kind") == "step":
            first_step.setdefault(int(r.get("worker") or 0), float(r.get("step", 0)))
    t_end = min((r["t"] for r in records if isinstance(r.get("t"), (int, float))), default=float("inf"))
    out = []
    for r in read_metrics(path):
        kind = r.get("kind")
        if not isinstance(r.get("t"), (int, float)) or r["t"] > t_end:
            continue
        if kind == "step" and float(r.get("step", 0)) < first_step.get(int(r.get("worker") or 0), float("inf")):
            out.append(r)
        elif kind == "eval" and r.get("epoch", 0) < first_epoch:
            out.append(r)
        elif kind == "config":
            out.append(r)
    return out
