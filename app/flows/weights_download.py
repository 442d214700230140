"""Start waits for a backbone's weights: when the chosen timm backbone's hub weights are not cached, they are
downloaded first (off the GUI thread, app.shell.tasks), with the bytes and the rate in the status bar and a
Cancel, and the run starts once they are here; a cancelled or failed download starts nothing.

The progress comes from the download's thread by signal (core.services.pretrained says it at most ten times a
second); the window's model says that it downloads (``downloading``) and whether it was asked to stop
(``cancelling``: Cancel, or the window closing), which the download polls with every chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtWidgets import QProgressBar, QToolButton

from core.config import Config
from core.errors import INPUT_ERRORS
from core.services import pretrained

if TYPE_CHECKING:
    from app.flows.window_port import WindowPort

STEPS = 1000


class WeightsDownload(QObject):
    """Brings a run's backbone weights into the cache, then calls what was waiting for them."""

    progressed = Signal(object)  # a pretrained.Progress, from the download's thread to the GUI thread

    def __init__(self, window: WindowPort) -> None:
        super().__init__(window.window())
        self.window = window
        self._name = ""
        self.progressed.connect(self._on_progress)
        self.progress = QProgressBar(objectName="progress_download")
        self.progress.setRange(0, STEPS)
        self.progress.setFixedWidth(300)
        self.progress.setTextVisible(True)
        self.progress.hide()
        self.button_cancel = QToolButton(objectName="button_cancel_download")
        self.button_cancel.setText("Cancel")
        self.button_cancel.setToolTip("Stop the download: nothing of it stays, and the run does not start")
        self.button_cancel.clicked.connect(self.cancel)
        self.button_cancel.hide()

    def fetch(self, cfg: Config, then: Callable[[], None]) -> None:
        """Download ``cfg``'s backbone weights, then call ``then`` (in the GUI thread); nothing on a cancel."""
        w = self.window
        kind = cfg.model.kind
        self._name = kind.split(":", 1)[-1]
        w.state.update(downloading=True, cancelling=False)
        self.progress.setValue(0)
        self.progress.setFormat("Weights: connecting…")
        self.progress.setToolTip(f"Downloading the weights of {self._name} into the Hugging Face cache")
        self.progress.show()
        self.button_cancel.setEnabled(True)
        self.button_cancel.show()
        w.log_pane.add_message("state", f"downloading the weights of {self._name} before the run starts", who="session")
        state = w.state
        w.calls.call(
            lambda: pretrained.download(kind, self.progressed.emit, lambda: state.cancelling),
            lambda path: self._on_done(path, then),
            self._on_failed,
            name="download-weights",
        )

    def cancel(self) -> None:
        """Stop the download at its next chunk: the run does not start."""
        if self.window.state.downloading:
            self.button_cancel.setEnabled(False)
            self.window.state.update(cancelling=True)

    @Slot(object)
    def _on_progress(self, p: pretrained.Progress) -> None:
        if self.window.state.downloading:
            self.progress.setValue(int(round(p.fraction * STEPS)))
            self.progress.setFormat(f"Weights: {p.describe()}")

    def _end(self) -> None:
        self.progress.hide()
        self.button_cancel.hide()
        self.window.state.update(downloading=False, cancelling=False)
        self.window.panel.model.backbone.refresh_cached()  # mark again what is in the cache now

    def _on_done(self, path: object, then: Callable[[], None]) -> None:
        closing = self.window.state.closing
        self._end()
        self.window.log_pane.add_message("state", f"weights of {self._name} in the cache: {path}", who="session")
        if not closing:
            then()

    def _on_failed(self, exc: BaseException) -> None:
        self._end()
        w = self.window
        if isinstance(exc, pretrained.DownloadCancelled):
            w.log_pane.add_message("state", f"download of {self._name} cancelled: the run did not start", who="session")
        elif isinstance(exc, INPUT_ERRORS):
            w.panel.show_error(str(exc))
            w.show_input_error(str(exc))
        else:
            w.show_error(f"could not download the weights of {self._name}: {type(exc).__name__}: {exc}")
