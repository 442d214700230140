"""The window's actions: what each is called, its keys and tip, where it shows (menus, toolbar), the
toolbar fitted to the window's width (``ToolbarFit``), and applying the enablement app.viewmodels.window_state
derives.

The actions are declared in one table; the window supplies the slot of each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QMessageBox, QToolBar, QToolButton, QWidget

from app.viewmodels.window_state import Enablement


@dataclass(frozen=True)
class ActionSpec:
    attr: str  # the window's attribute
    name: str  # the object name (DESIGN's GUI object names)
    text: str
    shortcuts: tuple[str, ...]
    tip: str
    icon: str | None = None  # app.shell.icons name, re-coloured with the theme


ACTIONS = (
    ActionSpec(
        "action_start", "action_start", "Start", ("Ctrl+R", "F5"), "Start training with these settings", "start"
    ),
    ActionSpec(
        "action_pause", "action_pause", "Pause", ("Ctrl+P",), "Pause every worker after its current batch", "pause"
    ),
    ActionSpec("action_resume", "action_resume", "Resume", ("Ctrl+Shift+R",), "Resume the paused run", "resume"),
    ActionSpec(
        "action_stop",
        "action_stop",
        "Stop",
        ("Ctrl+.", "Shift+F5"),
        "Stop the run (a checkpoint and summary are written)",
        "stop",
    ),
    ActionSpec(
        "action_export", "action_export", "Export…", ("Ctrl+E",), "Export the trained model of the last run", "export"
    ),
    ActionSpec(
        "action_open_config",
        "action_open_config",
        "Open config…",
        ("Ctrl+O",),
        "Load settings from a TOML file",
        "open",
    ),
    ActionSpec(
        "action_save_config",
        "action_save_config",
        "Save config…",
        ("Ctrl+S",),
        "Save these settings as TOML (the command line runs it unchanged)",
        "save",
    ),
    ActionSpec(
        "action_open_run",
        "action_open_run",
        "Open run…",
        ("Ctrl+Shift+O",),
        "Show the curves of a past run (its folder under runs/)",
        "runs",
    ),
    ActionSpec("action_runs_dir", "action_runs_dir", "Runs folder…", (), "Choose where new runs are written"),
    ActionSpec(
        "action_settings",
        "action_settings",
        "Settings…",
        ("Ctrl+,",),
        "The window's settings: the MLflow tracking URI its runs are mirrored to",
    ),
    ActionSpec("action_quit", "action_quit", "Quit", ("Ctrl+Q",), "Close TrainDesk"),
    ActionSpec("action_dark", "action_dark_theme", "Dark theme", ("Ctrl+Shift+T",), "Switch between light and dark"),
    ActionSpec("action_clear", "action_clear_plots", "Clear plots", (), "Remove the curves shown"),
    ActionSpec("action_about", "action_about", "About TrainDesk", (), "About"),
    ActionSpec(
        "action_continue_run",
        "action_continue_run",
        "Continue run",
        ("Ctrl+Shift+C",),
        "Continue the stopped or failed run on screen from its checkpoint",
        "resume",
    ),
    ActionSpec(
        "action_lr_find",
        "action_lr_find",
        "Find learning rate…",
        (),
        "Run a learning-rate range test on this config and suggest a rate",
    ),
    ActionSpec(
        "action_find_fastest",
        "action_find_fastest",
        "Find fastest…",
        (),
        "Probe each strategy and worker count on this config for a few seconds and suggest the fastest",
    ),
    ActionSpec(
        "action_compare",
        "action_compare",
        "Compare",
        ("Ctrl+Shift+M",),
        "Overlay the curves of the runs selected in Runs and list the settings that differ",
        "runs",
    ),
    ActionSpec(
        "action_fork",
        "action_fork",
        "Fork…",
        ("Ctrl+Shift+F",),
        "Start a new run from this run's checkpoint and settings, with the learning rate, weight decay, "
        "batch size or epochs you edit first (a paused run is stopped first)",
        "start",
    ),
    ActionSpec(
        "action_race",
        "action_race",
        "Race…",
        (),
        "Train clones of this run's checkpoint side by side, each with other settings (e.g. learning rates "
        "0.3x, 1x, 3x); the worse half stops at each rung and the best goes on as the run (a run going on in "
        "the window is stopped first: its checkpoint is where the race starts)",
    ),
    ActionSpec(
        "action_resume_race",
        "action_resume_race",
        "Resume race",
        (),
        "Go on with this run's race that stopped before its end (Stop, the window closed, its process killed), "
        "from the rung it reached, as traindesk race RUN --resume does",
    ),
    ActionSpec(
        "action_show_runs",
        "action_show_runs",
        "Runs",
        ("Ctrl+Shift+L",),
        "Every run of the runs folder: sort, filter, notes, compare",
    ),
)

MENUS: tuple[tuple[str, tuple[str | None, ...]], ...] = (  # None: a separator; "menu_recent_runs": the submenu
    (
        "&File",
        (
            "action_open_config",
            "action_save_config",
            None,
            "action_open_run",
            "action_show_runs",
            "action_compare",
            "menu_recent_runs",
            "action_runs_dir",
            "action_settings",
            None,
            "action_export",
            None,
            "action_quit",
        ),
    ),
    (
        "&Run",
        (
            "action_start",
            "action_pause",
            "action_resume",
            "action_stop",
            None,
            "action_continue_run",
            "action_fork",
            "action_race",
            "action_resume_race",
            "action_find_fastest",
            "action_lr_find",
        ),
    ),
    ("&View", ("action_dark", "action_clear")),
    ("&Help", ("action_about",)),
)
TOOLBAR = (
    "action_start",
    "action_pause",
    "action_resume",
    "action_stop",
    "action_fork",
    "action_find_fastest",
    None,
    "action_open_config",
    "action_save_config",
    "action_open_run",
    None,
    "action_export",
)


def make_action(parent: QWidget, spec: ActionSpec, slot: Callable[..., Any]) -> QAction:
    action = QAction(spec.text, parent)
    action.setObjectName(spec.name)
    action.setShortcuts([QKeySequence(s) for s in spec.shortcuts])
    keys = ", ".join(QKeySequence(s).toString(QKeySequence.SequenceFormat.NativeText) for s in spec.shortcuts)
    action.setToolTip(f"{spec.tip} ({keys})" if keys else spec.tip)
    action.setStatusTip(spec.tip)
    action.triggered.connect(slot)
    action.setData(spec.icon)
    parent.addAction(action)
    return action


def make_actions(window: QWidget, slots: dict[str, Callable[..., Any]]) -> dict[str, QAction]:
    """Every action of the table, by its window attribute, each connected to ``slots[attr]``."""
    actions = {spec.attr: make_action(window, spec, slots[spec.attr]) for spec in ACTIONS}
    actions["action_dark"].setCheckable(True)
    return actions


def build_menus(window: QMainWindow, actions: dict[str, QAction], recent: QMenu) -> None:
    bar = window.menuBar()
    for title, entries in MENUS:
        menu = bar.addMenu(title)
        for entry in entries:
            if entry is None:
                menu.addSeparator()
            elif entry == "menu_recent_runs":
                menu.addMenu(recent)
            else:
                menu.addAction(actions[entry])


def build_toolbar(actions: dict[str, QAction]) -> QToolBar:
    tb = QToolBar("Run", objectName="toolbar_run")
    tb.setMovable(False)
    tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
    for entry in TOOLBAR:
        if entry is None:
            tb.addSeparator()
        else:
            tb.addAction(actions[entry])
    return tb


class ToolbarFit(QObject):
    """Watches ``window``'s width and chooses ``toolbar``'s button style to fit it, so every action stays on
    screen: text beside icons when the window is wide enough, icons alone (text for actions without an icon of
    their own) when it is not.

    Qt's toolbar hides what does not fit behind an overflow button; in a 900 px window that hid Open run and
    Export. Icons alone take a third of the width; the tooltips still name each action and its shortcut.
    """

    def __init__(self, toolbar: QToolBar, window: QWidget) -> None:
        super().__init__(toolbar)
        self.toolbar = toolbar
        self.window = window
        self.compact = False
        self._buttons_styled = False
        window.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.window and event.type() in (QEvent.Type.Resize, QEvent.Type.Show):
            self.fit()  # before the toolbar lays itself out for the new width
        return False

    def _buttons(self) -> list[tuple[QAction, QToolButton]]:
        out = []
        for action in self.toolbar.actions():
            button = self.toolbar.widgetForAction(action)
            if isinstance(button, QToolButton) and not action.isSeparator():
                out.append((action, button))
        return out

    def _wide_width(self) -> int:
        """The toolbar's width with text beside every icon."""
        margins = self.toolbar.contentsMargins()
        layout = self.toolbar.layout()
        spacing = layout.spacing() if layout is not None else 0
        total = margins.left() + margins.right()
        for action in self.toolbar.actions():
            if action.isSeparator():
                total += 8 + spacing
                continue
            button = self.toolbar.widgetForAction(action)
            if isinstance(button, QToolButton):
                style = button.toolButtonStyle()
                button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
                total += button.sizeHint().width() + spacing
                button.setToolButtonStyle(style)
        return total

    def fit(self) -> None:
        """Text beside icons if it all fits the window's width, else icons alone."""
        compact = self._wide_width() > self.window.width()
        if compact == self.compact and self._buttons_styled:
            return
        icons = [a.data() for a, _b in self._buttons() if not a.icon().isNull()]  # the icon's name
        for action, button in self._buttons():
            if not compact:
                style = Qt.ToolButtonStyle.ToolButtonTextBesideIcon
            elif action.icon().isNull() or icons.count(action.data()) > 1:
                style = Qt.ToolButtonStyle.ToolButtonTextOnly  # no icon of its own to tell it apart
            else:
                style = Qt.ToolButtonStyle.ToolButtonIconOnly
            button.setToolButtonStyle(style)
        self.compact = compact
        self._buttons_styled = True
        self.toolbar.updateGeometry()


def apply_enablement(window: QWidget, derived: Enablement, recent: QMenu) -> None:
    """Switch every action the derived state names (the recent-runs submenu among them)."""
    for name, enabled in derived.enabled.items():
        target = recent if name == "menu_recent_runs" else window.findChild(QAction, name)
        if target is not None:
            target.setEnabled(enabled)


def explain(action: QAction, reason: str) -> None:
    """The action's tooltip says why it is off (``reason``), or its own tip again once there is no reason."""
    keys = ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in action.shortcuts())
    tip = reason or action.statusTip()
    action.setToolTip(f"{tip} ({keys})" if keys else tip)


def show_about(parent: QWidget) -> None:
    QMessageBox.about(
        parent,
        "About TrainDesk",
        "<b>TrainDesk</b><br>Train PyTorch models with several processes and watch them live.",
    )
