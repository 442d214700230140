"""Which of a run's checkpoints to use: its best evaluation or its end (``RunDir.best``, ``RunDir.last``).

``CheckpointCombo`` (object name ``combo_checkpoint``) is shared by the export
dialog and the Evaluate view. ``set_run(run_dir)`` lists best (selected, the
default once the best checkpoint exists) and last; the best checkpoint's epoch
and monitored value are read from it on a background thread and shown in
its item once known.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QComboBox, QWidget

from app.shell.tasks import BackgroundCalls
from core.services.runs.files import RunDir

LAST_TEXT = "last: the end of the run"
BEST_TEXT = "best evaluation"


def best_text(facts: dict[str, Any] | None) -> str:
    """The best item's label: its epoch and monitored value when known."""
    if not facts or facts.get("epoch") is None:
        return BEST_TEXT
    text = f"best: epoch {facts['epoch']}"
    if facts.get("monitor") and facts.get("value") is not None:
        text += f", {facts['monitor']} {float(facts['value']):.4g}"
    return text


class CheckpointCombo(QComboBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("combo_checkpoint")
        self.setToolTip("the weights to use: the run's best evaluation (checkpoints/best.pt) or its end (last.pt)")
        self.run_dir: Path | None = None
        self.facts: dict[str, Any] | None = None
        self._calls = BackgroundCalls(self)
        self._token = 0  # facts of an earlier run are dropped
        self.set_run(None)

    @property
    def which(self) -> str:
        return str(self.currentData() or "last")

    @property
    def busy(self) -> bool:
        return self._calls.busy

    def set_run(self, run_dir: Path | None) -> None:
        """List the run's checkpoints without emitting a change; best selected when it exists."""
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.facts = None
        self._token += 1
        has_best = self.run_dir is not None and RunDir(self.run_dir).best.is_file()
        self.blockSignals(True)
        self.clear()
        if has_best:
            self.addItem(BEST_TEXT, "best")
        self.addItem(LAST_TEXT, "last")
        self.setCurrentIndex(0)
        self.blockSignals(False)
        self.setEnabled(has_best)  # nothing to choose without best.pt
        if has_best:
            assert self.run_dir is not None
            token, run = self._token, self.run_dir
            self._calls.call(
                lambda: _best_facts(run),
                lambda facts: self._on_facts(token, facts),
                lambda _exc: None,
                name="checkpoint-facts",
            )

    def stale_for(self, run_dir: Path) -> bool:
        """Whether the list is not that of ``run_dir`` as it is now (another run, or its best checkpoint appeared)."""
        has_best = RunDir(run_dir).best.is_file()
        return self.run_dir != Path(run_dir) or has_best != (self.findData("best") >= 0)

    def set_which(self, which: str) -> None:
        index = self.findData(which)
        if index >= 0:
            self.setCurrentIndex(index)

    def _on_facts(self, token: int, facts: dict[str, Any] | None) -> None:
        index = self.findData("best")
        if token != self._token or index < 0:
            return
        self.facts = facts
        self.setItemText(index, best_text(facts))

    def wait(self, timeout_s: float = 30.0) -> bool:
        return self._calls.wait_all(timeout_s)


def _best_facts(run_dir: Path) -> dict[str, Any] | None:
    """Background thread: epoch, steps, monitor and value of the best checkpoint."""
    from core.services.runs.reading import checkpoint_facts

    return checkpoint_facts(run_dir, "best")
