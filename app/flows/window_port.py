"""What the window's flows need from the window: its parts that have their own methods, and what to show.

The flows (the run on screen, continue and fork, past runs, "Find fastest") type their window as
``WindowPort``, never as the main window: they say what to show through these methods and through the parts'
own (the panel's, the plots', the status bar's), never through a raw widget of the window's. The main window
(app.main_window.MainWindow) is the one that satisfies it; a test may hand a flow any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.flows.continue_fork import ContinueForkFlow
    from app.flows.live_run import LiveRun
    from app.flows.race import RaceFlow
    from app.flows.run_controller import RunController
    from app.flows.weights_download import WeightsDownload
    from app.panel.panel import ConfigPanel
    from app.plots.live import PlotsPanel
    from app.shell.log_pane import LogPane
    from app.shell.settings import AppSettings
    from app.shell.status_bar import RunStatusBar
    from app.shell.tasks import BackgroundCalls
    from app.viewmodels.window_state import WindowModel
    from app.views.compare import CompareView
    from app.views.evaluate import EvaluateView
    from app.views.predict import PredictView
    from app.views.runs import RunsView
    from app.views.search import SearchView
    from app.views.serve import ServeView


class WindowPort(Protocol):
    """The window as its flows see it."""

    # what the window is doing (one evented model), the run, and calls off the GUI thread
    state: WindowModel
    controller: RunController
    calls: BackgroundCalls
    live: LiveRun  # the run on screen: its shape and progress, which the other flows set up too
    weights: WeightsDownload  # a backbone's weights brought into the cache before Start's run
    continue_fork: ContinueForkFlow  # Continue run and Fork, and the run they (and Race…) start from
    race: RaceFlow  # a race of clones of a run's checkpoint: nothing else opens on the plots while it runs
    settings: AppSettings  # what the window remembers; Start reads its MLflow tracking URI
    # the window's parts, each with its own methods
    panel: ConfigPanel
    plots: PlotsPanel
    log_pane: LogPane
    run_status: RunStatusBar
    runs_view: RunsView
    compare_view: CompareView
    evaluate_view: EvaluateView
    search_view: SearchView
    predict_view: PredictView
    serve_view: ServeView

    @property
    def runs_dir(self) -> str:
        """The runs folder: where runs are written and listed."""
        ...

    def window(self) -> QWidget:
        """The window as a widget: the parent of the flows' dialogs and objects."""
        ...

    def update_actions(self) -> None:
        """Re-derive every action from the window's state (after a change the model does not announce)."""
        ...

    def show_error(self, message: str, logged: bool = False, cause: str = "") -> None:
        """Show an error in the banner (and the log, unless ``logged``)."""
        ...

    def show_input_error(self, message: str, logged: bool = False) -> None:
        """Show an error in what the user typed or chose: it goes once they change it."""
        ...

    def hide_error(self, cause: str | None = None) -> None:
        """Take the banner's error away: what it said no longer holds."""
        ...

    def show_tab(self, view: QWidget) -> None:
        """Bring a tab to the front: the plots, Runs or Compare."""
        ...

    def shown_tab(self) -> QWidget:
        """The tab in front."""
        ...

    def save_last_config(self) -> None:
        """Remember the panel's own settings (a Start's), for the next session."""
        ...

    def close(self) -> bool: ...

    def ask_fork(self, dialog: Any) -> bool:
        """Show the Fork dialog; True: fork with what it holds."""
        ...

    def ask_race(self, dialog: Any) -> bool:
        """Show the Race dialog (it closes only on a race that plans); True: race as it says."""
        ...

    def ask_use_advice(self, result: dict[str, Any]) -> bool:
        """Show "Find fastest"'s probes and ask whether to use its suggestion."""
        ...
