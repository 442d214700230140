"""The main window: configuration on the left, live plots and the log on the right.

The window lays its parts out and wires them together; what they do lives
beside it: the run on screen (app.flows.live_run), continuing and forking a run
(app.flows.continue_fork), "Find fastest" (app.flows.advisor), config and data files
(app.panel.files), past and attached runs (app.flows.past_runs), the actions and
their menus (app.shell.actions). What the window is doing is one evented
model (app.viewmodels.window_state.WindowModel); every change re-derives the actions.

Everything here runs in the GUI thread. Slow work (starting or stopping a
run, describing a dataset, reading a past run) happens on background
threads (RunController, ConfigPanel, BackgroundCalls) and comes back by
signal; records arrive in batches of at most ~30 a second.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QCloseEvent
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QMainWindow,
    QMenu,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.flows.advisor import AdvisorFlow, advice_table
from app.flows.continue_fork import ContinueForkFlow
from app.flows.live_run import LiveRun
from app.flows.past_runs import PastRuns
from app.flows.race import RaceFlow
from app.flows.run_controller import RunController
from app.flows.weights_download import WeightsDownload
from app.panel.files import ConfigFiles
from app.panel.panel import ConfigPanel
from app.plots.live import PlotsPanel
from app.shell import icons
from app.shell.actions import (
    ToolbarFit,
    apply_enablement,
    build_menus,
    build_toolbar,
    explain,
    make_actions,
    show_about,
)
from app.shell.banner import Banner
from app.shell.gc_policy import GuiGarbageCollector
from app.shell.log_pane import LogPane
from app.shell.settings import AppSettings
from app.shell.settings_dialog import edit_settings
from app.shell.status_bar import RunStatusBar
from app.shell.tasks import BackgroundCalls
from app.shell.theme import Theme, apply_theme, get_theme, style_plot_widget
from app.viewmodels.window_state import WindowModel, WindowState, derive
from app.views.lr_finder import LRFinderDialog
from app.views.runs import RunsView
from app.views.search import SearchView
from core.config import ConfigError, parse_toml

if TYPE_CHECKING:
    from app.views.compare import CompareView
    from app.views.evaluate import EvaluateView
    from app.views.predict import PredictView
    from app.views.serve import ServeView

DESCRIBED_PROBLEM = "the dataset or model cannot be used (its ⚠ line on the left says why)"
# The export dialog comes with the export feature; without it the action stays off and says so.
EXPORT_AVAILABLE = importlib.util.find_spec("app.views.export_dialog") is not None


class MainWindow(QMainWindow):
    # the actions, made from app.shell.actions.ACTIONS
    action_start: QAction
    action_pause: QAction
    action_resume: QAction
    action_stop: QAction
    action_export: QAction
    action_open_config: QAction
    action_save_config: QAction
    action_open_run: QAction
    action_runs_dir: QAction
    action_settings: QAction
    action_quit: QAction
    action_dark: QAction
    action_clear: QAction
    action_about: QAction
    action_continue_run: QAction
    action_lr_find: QAction
    action_find_fastest: QAction
    action_compare: QAction
    action_fork: QAction
    action_race: QAction
    action_resume_race: QAction
    action_show_runs: QAction
    # its parts, made in _build_central
    panel: ConfigPanel
    plots: PlotsPanel
    log_pane: LogPane
    banner: Banner
    tabs: QTabWidget
    runs_view: RunsView
    compare_view: CompareView
    evaluate_view: EvaluateView
    predict_view: PredictView
    search_view: SearchView
    serve_view: ServeView

    def __init__(self, settings: AppSettings | None = None, runs_dir: str | None = None) -> None:
        super().__init__()
        self.setObjectName("main_window")
        self.setWindowTitle("TrainDesk")
        self.settings = settings or AppSettings()
        self.runs_dir_override = runs_dir
        # Closing mid-run asks first; tests and scripts set this to False to skip the dialog.
        self.ask_before_close = True
        self._theme: Theme = get_theme(self.settings.theme)
        self.calls = self._calls = BackgroundCalls(self)
        self.lr_finder: LRFinderDialog | None = None
        self._gc = GuiGarbageCollector(self)
        self.state = WindowModel()
        self.controller = RunController(self)
        self.live = LiveRun(self, EXPORT_AVAILABLE)
        self.weights = WeightsDownload(self)
        self.continue_fork = ContinueForkFlow(self)
        self.race = RaceFlow(self)  # Pause, Resume and Stop act on its race while one runs
        self.advisor = AdvisorFlow(self)
        self.config_files = ConfigFiles(self)
        self.past_runs = PastRuns(self)

        self.actions_by_name = make_actions(
            self,
            {
                "action_start": self.live.start,
                "action_pause": lambda: self.race.pause() if self.race.active else self.live.pause(),
                "action_resume": lambda: self.race.resume() if self.race.active else self.live.resume(),
                "action_stop": lambda: self.race.stop() if self.race.active else self.live.stop(),
                "action_export": self.live.export,
                "action_open_config": self.config_files.ask_open,
                "action_save_config": self.config_files.ask_save,
                "action_open_run": self.past_runs.ask_open,
                "action_runs_dir": self.config_files.ask_runs_dir,
                "action_settings": lambda: edit_settings(self, self.settings, saved=self.runs_view.refresh),
                "action_quit": self.close,
                "action_dark": self.set_dark,
                "action_clear": self._on_clear,
                "action_about": lambda: show_about(self),
                "action_continue_run": self.continue_fork.continue_run,
                "action_lr_find": self._on_lr_find,
                "action_find_fastest": self.advisor.start,
                "action_compare": self.past_runs.compare,
                "action_fork": self.continue_fork.fork,
                "action_race": self.race.ask,
                "action_resume_race": self.race.resume_race,
                "action_show_runs": self.past_runs.show_list,
            },
        )
        for attr, action in self.actions_by_name.items():
            setattr(self, attr, action)
        self._build_central()
        self.menu_recent = QMenu("Recent runs", self, objectName="menu_recent_runs")
        self.menu_recent.aboutToShow.connect(lambda: self.past_runs.fill_recent(self.menu_recent))
        build_menus(self, self.actions_by_name, self.menu_recent)
        self.toolbar = build_toolbar(self.actions_by_name)
        self.addToolBar(self.toolbar)
        self.toolbar_fit = ToolbarFit(self.toolbar, self)  # icons alone when the text would push actions off
        self.run_status = RunStatusBar(
            self.statusBar(),
            (self.advisor.progress, self.advisor.button_cancel, self.weights.progress, self.weights.button_cancel),
        )
        self.panel.notice.connect(self.run_status.notify)
        self.runs_view.notice.connect(self.run_status.notify)
        self.runs_view.notice.connect(lambda text: self.log_pane.add_message("info", text))
        # the status bar's widgets by name, for scripts and tests
        self.label_state = self.run_status.label_state
        self.label_run_dir = self.run_status.label_run_dir
        self.label_throughput = self.run_status.label_throughput
        self.label_winner = self.run_status.label_winner
        self.progress_run = self.run_status.progress_run
        self.progress_advisor = self.advisor.progress
        self.button_cancel_advisor = self.advisor.button_cancel
        self.progress_download = self.weights.progress
        self.button_cancel_download = self.weights.button_cancel
        self._restore_settings()
        self.plots.view_changed.connect(self._on_view_changed)  # after restoring, or it overwrites them
        self.panel.training.watch_epochs(lambda _v: self.update_actions())
        self._apply_theme(self._theme.name)
        self.runs_view.set_runs_dir(self.runs_dir)
        self.state.connect(lambda _activity: self.update_actions())
        self.update_actions()

    # -- layout ------------------------------------------------------------------------------------
    def _build_central(self) -> None:
        self.panel = ConfigPanel()
        self.panel.browse_requested.connect(self.config_files.browse_data)
        self.panel.changed.connect(self._on_panel_changed)
        self.panel.mode_changed.connect(lambda _m: self.update_actions())
        self.panel.problem_changed.connect(self.update_actions)
        scroll = QScrollArea(objectName="config_scroll")
        scroll.setWidget(self.panel)
        scroll.setWidgetResizable(True)
        # The panel's widgets keep its minimum width whatever a dataset holds (a table's column list scrolls
        # inside itself); were something to widen it anyway, a scroll bar reaches it rather than clipping it.
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        # Wide enough for the panel and a vertical scroll bar: never clip it sideways.
        scroll.setMinimumWidth(self.panel.minimumSizeHint().width() + scroll.verticalScrollBar().sizeHint().width() + 4)
        scroll.setMaximumWidth(520)

        self.banner = Banner()
        self.plots = PlotsPanel()
        self.log_pane = LogPane()
        right_top = QWidget()
        top_layout = QVBoxLayout(right_top)
        top_layout.setContentsMargins(0, 6, 0, 0)
        top_layout.setSpacing(6)
        top_layout.addWidget(self.banner)
        from app.views.compare import CompareView
        from app.views.evaluate import EvaluateView
        from app.views.predict import PredictView

        self.evaluate_view = EvaluateView()
        self.predict_view = PredictView()
        self.runs_view = RunsView(
            [self.action_compare, self.action_fork], menu_actions=[self.action_race, self.action_resume_race]
        )
        self.runs_view.active = lambda: self.live.active_runs() | self.race.active_runs()
        self.runs_view.mlflow_uri = lambda: self.settings.mlflow_uri  # what its runs show first, where it mirrors
        self.runs_view.open_requested.connect(self.open_run)
        self.runs_view.error.connect(self.show_error)
        self.runs_view.import_failed.connect(lambda message: self.show_error(message, cause="import"))
        self.runs_view.imported.connect(lambda _runs: self.hide_error("import"))  # a later import that worked
        self.runs_view.selection_changed.connect(self.update_actions)
        self.runs_view.scanned.connect(self.update_actions)  # a race another process ran may have ended meanwhile
        self.runs_view.edited.connect(self.past_runs.on_edited)
        self.runs_view.deleted.connect(self.past_runs.on_deleted)
        self.compare_view = CompareView()
        self.compare_view.failed.connect(self.show_error)
        self.tabs = QTabWidget(objectName="tabs_main")
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.plots, "Training")
        self.tabs.addTab(self.runs_view, "Runs")
        self.tabs.addTab(self.compare_view, "Compare")
        self.tabs.addTab(self.evaluate_view, "Evaluate")
        self.tabs.addTab(self.predict_view, "Predict")
        self.tabs.currentChanged.connect(lambda _i: self.update_actions())
        self.search_view = SearchView()
        self.tabs.addTab(self.search_view, "Search")
        from app.views.serve import ServeView

        self.serve_view = ServeView()
        self.tabs.addTab(self.serve_view, "Serve")
        self.tabs.currentChanged.connect(lambda _i: self.live.offer_run())  # Predict and Serve: the run on screen
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

    # -- settings --------------------------------------------------------------
    @property
    def runs_dir(self) -> str:
        return self.runs_dir_override or self.settings.runs_dir

    def _restore_settings(self) -> None:
        s = self.settings
        geometry = s.geometry
        if geometry is None or not self.restoreGeometry(geometry):
            self.resize(1280, 800)
        for name, splitter in (
            ("main_splitter", self.main_splitter),
            ("right_splitter", self.right_splitter),
            ("plots_splitter", self.plots.splitter),
        ):
            state = s.splitter_state(name)
            if state is not None:
                splitter.restoreState(state)
        text = s.start_config_toml  # the user's last settings, or the first-run config
        if text:
            try:
                self.panel.set_config(parse_toml(text))
            except ConfigError:
                pass  # a config from an older version: start from the defaults
        self.plots.set_x_mode(s.x_axis)
        self.plots.set_log_y(s.log_y)
        self.plots.set_smoothing(s.smoothing)

    def _save_settings(self) -> None:
        s = self.settings
        s.geometry = self.saveGeometry()
        s.set_splitter_state("main_splitter", self.main_splitter.saveState())
        s.set_splitter_state("right_splitter", self.right_splitter.saveState())
        s.set_splitter_state("plots_splitter", self.plots.splitter.saveState())
        self.save_last_config()
        s.sync()

    def save_last_config(self) -> None:
        own = self.panel.own_config()  # not the settings of a run on screen
        if own is not None:  # else keep the last valid one
            self.settings.last_config_toml = own.to_toml()

    def _on_view_changed(self) -> None:
        self.settings.x_axis = self.plots.x_mode
        self.settings.log_y = self.plots.log_y
        self.settings.smoothing = self.plots.smoothing

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
        self.serve_view.apply_colors(t.plot)
        for widget in (
            self.search_view.plot_search_parallel,
            self.evaluate_view.plot_actual,
            self.evaluate_view.plot_residuals,
            *([self.lr_finder.plot_lr_finder] if self.lr_finder is not None else []),
        ):
            style_plot_widget(widget, t.plot)
        self.evaluate_view.refresh_colors()
        self.log_pane.set_colors(t.error, t.warning, t.muted)

    def set_dark(self, dark: bool) -> None:
        """The dark theme, or the light one; remembered for the next session."""
        self._apply_theme("dark" if dark else "light")
        self.settings.theme = self._theme.name

    # -- state -----------------------------------------------------------------
    def window_state(self) -> WindowState:
        """The facts every action's enablement is derived from (see app/viewmodels/window_state.py)."""
        c = self.controller
        return WindowState(
            run_state=c.state,
            run_active=c.active,
            attached=c.attached,
            **self.state.facts(),
            loading=self.calls.running("read-run"),
            run_config_shown=self.panel.mode == "view" or self.panel.showing_run_config,
            # the config's own error, else what describing its dataset or counting its model found: the ⚠ lines
            # say that one, the status points at them
            config_error=self.panel.validation_error() or (DESCRIBED_PROBLEM if self.panel.describer.error else ""),
            selected_runs=len(self.runs_view.selected_runs()),
            continuable=self.continue_fork.continuable_run() is not None,
            fork_source=self.continue_fork.fork_source() is not None,
            export_target=self.live.export_run_dir() is not None,
            export_available=EXPORT_AVAILABLE,
            race=self.race.state,
            race_source=self.race.source() is not None,
            race_live=self.race.live_source(),
            race_resumable=self.race.unfinished() is not None,
        )

    def update_actions(self) -> None:
        """Apply what the window's state allows; called after every change, failures included."""
        facts = self.window_state()
        derived = derive(facts)
        apply_enablement(self, derived, self.menu_recent)
        problem = (
            derived.panel_mode == "edit"
            and facts.config_error
            and (self.panel.validation_error() or self.panel.describer.error)
        )
        self.action_start.setToolTip(
            "Use these settings or go back to yours first (Ctrl+R, F5)"
            if derived.panel_mode == "view"
            else f"Fix the settings first: {problem}"
            if problem
            else "Start training with these settings (Ctrl+R, F5)"
        )
        self.action_export.setToolTip(self.live.export_tip())
        for action, reason in zip((self.action_continue_run, self.action_fork), self.continue_fork.read_only_reasons()):
            explain(action, reason)  # an imported run: why it cannot go on
        explain(self.action_race, self.race.why_not())
        explain(self.action_resume_race, self.race.resume_why_not())
        self.run_status.set_state(derived.status)
        if derived.panel_mode != self.panel.mode:
            self.panel.set_mode(derived.panel_mode)

    @property
    def viewing_run(self) -> Path | None:
        """The past run on screen, if any."""
        return self.state.viewing_run

    @property
    def advising(self) -> bool:
        """ "Find fastest" is probing."""
        return bool(self.state.advising)

    @property
    def _preparing(self) -> bool:
        return bool(self.state.preparing)

    # -- errors ------------------------------------------------------------------------------------
    def show_error(self, message: str, logged: bool = False, cause: str = "") -> None:
        """The banner shows it; the log keeps it unless it is there already (a record said it). ``cause``
        names what the error was about, for ``hide_error(cause)`` once that works."""
        self.banner.show_message(message, "error")
        self.banner.setProperty("cause", cause)
        if not logged:
            self.log_pane.add_message("error", message)
        self.update_actions()  # whatever failed, the actions follow the state it left

    def show_input_error(self, message: str, logged: bool = False) -> None:
        """An error in what the user typed or chose: it goes away once they change it."""
        self.show_error(message, logged, cause="input")

    def hide_error(self, cause: str | None = None) -> None:
        """Hide the banner; with ``cause``, only an error about that (an input, an import)."""
        if cause is None or self.banner.property("cause") == cause:
            self.banner.hide()

    def _on_panel_changed(self) -> None:
        self.hide_error("input")
        self.update_actions()

    # -- what the window offers scripts and tests --------------------------------------------------
    def open_run(self, run_dir: str | Path) -> None:
        """Show a run: a live one of another process is followed, any other as history (app.flows.past_runs)."""
        self.past_runs.open(run_dir)

    def show_tab(self, view: QWidget) -> None:
        self.tabs.setCurrentWidget(view)

    def shown_tab(self) -> QWidget:
        return self.tabs.currentWidget()

    def open_config(self, path: str | Path) -> bool:
        return self.config_files.open(path)

    def save_config(self, path: str | Path) -> bool:
        return self.config_files.save(path)

    def _on_clear(self) -> None:
        self.plots.reset()
        self.log_pane.clear()
        self.hide_error()
        self.live.clear()

    def _on_lr_find(self) -> None:
        cfg = self.panel.try_config()
        if cfg is None:
            self.show_error(self.panel.config_error())
            return
        self.lr_finder = LRFinderDialog(cfg, self)
        self.lr_finder.use_lr.connect(self.panel.training.set_lr)
        self.lr_finder.show()
        self.lr_finder.run()

    # -- questions (tests monkeypatch them) --------------------------------------------------------
    def ask_fork(self, dialog: Any) -> bool:
        """Show the Fork dialog (app.flows.fork_dialog); True: fork with what it holds."""
        return dialog.exec() == QDialog.DialogCode.Accepted

    ask_race = ask_fork  # the Race dialog (app.flows.race_dialog), asked the same way; tests replace each alone

    def ask_use_advice(self, result: dict[str, Any]) -> bool:
        """Show the probes and ask whether to use the suggestion."""
        best = result["suggestion"]
        box = QMessageBox(self)
        box.setWindowTitle("Fastest setting")
        box.setTextFormat(Qt.TextFormat.RichText)
        table = advice_table(result)
        if result.get("is_current"):
            box.setText(
                f"{table}<p><b>{best['strategy']}</b> with <b>{best['workers']}</b> worker(s) is fastest: "
                "that is already your setting.</p>"
            )
            box.setStandardButtons(QMessageBox.StandardButton.Ok)
            box.exec()
            return False
        box.setText(f"{table}<p>Use <b>{best['strategy']}</b> with <b>{best['workers']}</b> worker(s)?</p>")
        box.setStandardButtons(QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No)
        return box.exec() == QMessageBox.StandardButton.Yes

    def confirm_stop_on_close(self) -> bool:
        """Ask whether to stop the active run (or set ask_before_close)."""
        return self.live.ask_stop_on_close()

    # -- closing ---------------------------------------------------------------
    def _run_holds_close(self) -> bool:
        """A run of this window has not yet ended and been reported: closing waits for its run_ended."""
        c = self.controller
        return c.session is not None and not c.attached and not c.ended  # an attached run goes on without us

    def closeEvent(self, event: QCloseEvent) -> None:
        self.state.update(cancelling=True)  # a probe in progress stops at once
        if self.race.active:  # a race ends first (every variant writes its checkpoint); the window closes after
            if self.state.closing or not self.ask_before_close or self.confirm_stop_on_close():
                self.race.stop_to_close()
            event.ignore()
            return
        if self._run_holds_close():
            if not self.state.closing:
                if self.ask_before_close and not self.confirm_stop_on_close():
                    event.ignore()
                    return
            # The run may have ended (finished, failed, stopped from outside, its process killed) while the
            # question was open: run_ended has come and gone, and nothing would close the window.
            if self._run_holds_close():
                if not self.state.closing:
                    self.state.update(closing=True)
                    self.log_pane.add_message("state", "stopping the run before closing…", who="session")
                    self.controller.stop()
                    self.update_actions()
                # Close once run_ended arrives: the GUI keeps painting while workers finish.
                event.ignore()
                return
        self._save_settings()
        # Off the screen before the waits below: a dataset still being described or a model's parameters
        # still being counted (a timm backbone built off the GUI thread) held the window up for seconds.
        self.hide()
        self.panel.shutdown()
        self.runs_view.wait(5.0)
        self.compare_view.wait(5.0)
        if self.lr_finder is not None:
            self.lr_finder.shutdown()
        self.evaluate_view.wait(5.0)
        self.predict_view.cancel()  # a folder of photos takes minutes: it ends at its next piece
        self.predict_view.wait(5.0)
        self.serve_view.shutdown()  # the server drains and exits
        self.calls.forget_all()
        self.calls.wait_all(5.0)
        self.controller.shutdown()
        self._gc.stop()
        event.accept()
