"""Find fastest: probe each strategy and worker count on the panel's config, then offer the fastest.

The probes run off the GUI thread (core.services.advisor); each probe's line comes back
by signal to the log and the status bar's probe counter. The window's model
says that it is probing (``advising``) and whether it was asked to stop
(``cancelling``), which the probes poll.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtWidgets import QProgressBar, QToolButton

from core.metric_names import SHORT_NAMES

if TYPE_CHECKING:
    from app.flows.window_port import WindowPort

ADVISOR_SECONDS = 3.0  # training seconds per probe of "Find fastest"


class AdvisorFlow(QObject):
    """The "Find fastest" flow, from the first probe to the suggestion taken into the panel."""

    line = Signal(str)  # a probe's line, from the advisor's thread to the GUI thread

    def __init__(self, window: WindowPort) -> None:
        super().__init__(window.window())
        self.window = window
        self._done = 0
        self._total = 0
        self.line.connect(self._on_line)
        self.progress = QProgressBar(objectName="progress_advisor")
        self.progress.setFixedWidth(160)
        self.progress.setFormat("probe %v/%m")
        self.progress.hide()
        self.button_cancel = QToolButton(objectName="button_cancel_advisor")
        self.button_cancel.setText("Cancel")
        self.button_cancel.setToolTip("Stop probing: the probe running now ends at once")
        self.button_cancel.clicked.connect(self.cancel)
        self.button_cancel.hide()

    def start(self) -> None:
        w = self.window
        if w.controller.active or w.state.advising:
            return
        cfg = w.panel.try_config()
        if cfg is None:
            w.show_error(w.panel.config_error())
            return
        from core.services.advisor import advise, candidates
        from core.services.machine import usable_cores

        w.state.update(advising=True, cancelling=False)
        n = len(candidates(usable_cores()))
        self._done, self._total = 0, n
        self.progress.setRange(0, n)
        self.progress.setValue(0)
        self.progress.show()
        self.button_cancel.setEnabled(True)
        self.button_cancel.show()
        w.log_pane.add_message(
            "state", f"find fastest: {n} probes of {ADVISOR_SECONDS:g} s on this config", who="advisor"
        )
        state = w.state
        w.calls.call(
            lambda: advise(cfg, seconds=ADVISOR_SECONDS, report=self.line.emit, cancelled=lambda: state.cancelling),
            self._on_advice,
            self._on_failed,
            name="advisor",
        )

    @Slot(str)
    def _on_line(self, text: str) -> None:
        self.window.log_pane.add_message("state", text, who="advisor")
        self._done += 1  # one line per probe
        self.progress.setValue(min(self._done, self._total))

    def cancel(self) -> None:
        """Stop probing: the running probe ends at once and no suggestion is offered."""
        if self.window.state.advising:
            self.button_cancel.setEnabled(False)
            self.window.state.update(cancelling=True)

    def _end(self) -> None:
        self.progress.hide()
        self.button_cancel.hide()
        self.window.state.update(advising=False)

    def _on_advice(self, result: dict[str, Any]) -> None:
        self._end()
        w = self.window
        best = result.get("suggestion")
        if result.get("cancelled") or best is None:
            w.log_pane.add_message(
                "state",
                "find fastest: cancelled" if result.get("cancelled") else "find fastest: no suggestion",
                who="advisor",
            )
            return
        text = f"{best['strategy']} with {best['workers']} worker(s): {best['samples_per_s']:,.0f} samples/s"
        current = w.panel.config().parallel
        result["is_current"] = (current.strategy, current.workers) == (best["strategy"], best["workers"])
        w.log_pane.add_message(
            "state",
            f"find fastest suggests {text}" + (": that is the current setting" if result["is_current"] else ""),
            who="advisor",
        )
        if w.ask_use_advice(result) and not result["is_current"]:
            self.apply(result)

    def _on_failed(self, exc: BaseException) -> None:
        self._end()
        self.window.show_error(f"find fastest failed: {' '.join(str(exc).splitlines())}")

    def apply(self, result: dict[str, Any]) -> None:
        """Take the suggestion into the panel (a sweep's rates go: the suggestion is one setting)."""
        best = result["suggestion"]
        panel = self.window.panel
        panel.set_config(
            panel.config().replace("parallel", strategy=best["strategy"], workers=best["workers"], sweep_lr=[])
        )


def advice_table(result: dict[str, Any]) -> str:
    """The probes as an HTML table, for the question that offers the suggestion."""
    rows = "".join(
        f"<tr><td>{p['strategy']} ×{p['workers']}</td><td align=right>{p['samples_per_s']:,.0f}</td>"
        f"<td align=right>{'no epoch in the probe' if p['best_accuracy'] is None else format(p['best_accuracy'], '.3f')}"
        f"</td></tr>"
        for p in result["probes"]
    )
    figure = SHORT_NAMES.get(str(result.get("metric")), SHORT_NAMES["val_accuracy"])  # R² on a regression
    return f"<table cellspacing=6><tr><th>strategy</th><th>samples/s</th><th>{figure}</th></tr>{rows}</table>"
