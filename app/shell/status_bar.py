"""The window's status bar: what the window is doing, the run's folder, a sweep's winner, the throughput and
the run's progress; for a few seconds, a notice of what the window changed on its own.

The texts elide (whole in their tooltips, app.shell.elided_label): a long run folder or state never widens the
window. The window and its flows say what to show through ``RunStatusBar``'s methods, never its widgets.
"""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QWidget

from app.shell.elided_label import ElidedLabel

PROGRESS_STEPS = 1000  # the progress bar's range: a run's progress in thousandths
NOTICE_MS = 12_000  # how long a notice stays (what the window changed on its own, e.g. the model for a table)
NOTICES_SHOWN = 2  # notices shown together at most, the latest last


class RunStatusBar:
    """The status bar's widgets, laid into ``bar``; ``extra`` (a flow's own widgets, "Find fastest"'s probe
    counter) go between the winner and the throughput."""

    def __init__(self, bar: QStatusBar, extra: Iterable[QWidget] = ()) -> None:
        self.bar = bar
        self._notices: list[str] = []  # the notices the bar shows now
        self.label_state = ElidedLabel("Ready", objectName="label_state")
        self.label_throughput = QLabel("", objectName="label_throughput")
        self.label_throughput.setToolTip("Training samples per second, all workers together")
        self.label_run_dir = ElidedLabel("", objectName="label_run_dir")
        self.label_run_dir.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.progress_run = QProgressBar(objectName="progress_run")
        self.progress_run.setRange(0, PROGRESS_STEPS)
        self.progress_run.setValue(0)
        self.progress_run.setFixedWidth(300)
        self.progress_run.setFormat("No run")
        self.progress_run.setTextVisible(True)
        self.label_winner = QLabel("", objectName="label_winner")
        self.label_winner.setToolTip("The sweep's best setting (its model is the run's result)")
        bar.addWidget(self.label_state)
        bar.addWidget(self.label_run_dir, 1)
        bar.addPermanentWidget(self.label_winner)
        for widget in extra:
            bar.addPermanentWidget(widget)
        bar.addPermanentWidget(self.label_throughput)
        bar.addPermanentWidget(self.progress_run)

    def set_state(self, text: str) -> None:
        """What the window is doing, or why it cannot start ("Ready", "Cannot start: ...")."""
        self.label_state.setText(text)

    def notify(self, text: str) -> None:
        """Say what the window changed on its own (over the state and run folder, for a few seconds); a notice
        still showing stays beside it (one choice may change two things: the model and the target)."""
        shown = self._notices if self.bar.currentMessage() else []
        self._notices = [n for n in shown if n != text][-(NOTICES_SHOWN - 1) :] + [text]
        self.bar.showMessage(" · ".join(self._notices), NOTICE_MS)

    def set_run_dir(self, text: str) -> None:
        """The run on screen: its folder, or what an attached run is."""
        self.label_run_dir.setText(text)

    def set_throughput(self, text: str) -> None:
        self.label_throughput.setText(text)

    def set_winner(self, text: str) -> None:
        """A sweep's best setting ("" for none)."""
        self.label_winner.setText(text)

    def show_progress(self, text: str, fraction: float | None = None) -> None:
        """The progress bar's text (``%p%`` is its percentage) and, unless None, how much is done (0 to 1)."""
        if fraction is not None:
            self.progress_run.setValue(int(round(fraction * PROGRESS_STEPS)))
        self.progress_run.setFormat(text)

    def clear_run(self) -> None:
        """No run's folder, throughput or progress yet: a run that has just started."""
        self.progress_run.setValue(0)
        self.label_run_dir.setText("")
        self.label_throughput.setText("")
