"""The log pane: worker messages, state changes and errors, newest last, bounded."""

from __future__ import annotations

import html
import time
from typing import Any

from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QPlainTextEdit, QWidget

from core.services.runs.files import LOG, STATE

MAX_LINES = 5000  # an endless run must not grow the document without bound


class LogPane(QPlainTextEdit):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("log_pane")
        self.setReadOnly(True)
        self.setMaximumBlockCount(MAX_LINES)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.setPlaceholderText("Worker messages and errors appear here.")
        self.error_color = "#c62828"
        self.warning_color = "#b26a00"
        self.muted_color = "#646c76"

    def set_colors(self, error: str, warning: str, muted: str) -> None:
        self.error_color, self.warning_color, self.muted_color = error, warning, muted

    def add_message(self, level: str, text: str, t: float | None = None, who: str = "") -> None:
        self._append([self._line(level, text, t, who)])

    def add_records(self, records: list[dict[str, Any]]) -> list[str]:
        """Append the log and state records of a batch; returns the error lines among them."""
        lines: list[str] = []
        errors: list[str] = []
        for rec in records:
            kind = rec.get("kind")
            worker = rec.get("worker")
            who = "session" if worker is None else f"worker {worker}"
            if kind == LOG:
                level = str(rec.get("level", "info")).lower()
                message = str(rec.get("message", ""))
                lines.append(self._line(level, message, rec.get("t"), who))
                if level in ("error", "critical"):
                    errors.append(f"{who}: {message}")
            elif kind == STATE:
                state = str(rec.get("state", ""))
                detail = rec.get("detail")
                text = state + (f": {detail}" if detail else "")
                level = "error" if state == "failed" else "state"
                lines.append(self._line(level, text, rec.get("t"), who))
                if state == "failed":
                    errors.append(f"{who} failed" + (f": {detail}" if detail else ""))
        if lines:
            self._append(lines)
        return errors

    def _line(self, level: str, text: str, t: Any, who: str) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(t if isinstance(t, (int, float)) else None))
        color = {
            "error": self.error_color,
            "critical": self.error_color,
            "warning": self.warning_color,
            "state": self.muted_color,
        }.get(level)
        body = html.escape(f"{stamp}  {who + ': ' if who else ''}{text}").replace("\n", "<br>")
        return f'<span style="color:{color}">{body}</span>' if color else f"<span>{body}</span>"

    def _append(self, lines: list[str]) -> None:
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        for line in lines:
            self.appendHtml(line)
        if at_bottom:  # follow new lines unless the user scrolled up to read
            bar.setValue(bar.maximum())
