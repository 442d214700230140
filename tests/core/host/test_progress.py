"""Progress bars: on stderr only when it is a terminal; pipes, files and tests see nothing new."""

from __future__ import annotations

import io
import sys

import pytest

from core.host.progress import note, progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_silent_when_stderr_is_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with progress(10, "predict", unit="rows") as bar:
        bar.update(10)
        note(bar, "a probe line")
    out, err = capsys.readouterr()
    assert out == "" and err == "a probe line\n"


def test_shown_on_a_terminal(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    with progress(10, "predict", unit="rows") as bar:
        bar.update(10)
        note(bar, "a probe line")
    assert "predict" in term.getvalue() and "10/10" in term.getvalue() and "a probe line" in term.getvalue()
    assert capsys.readouterr().out == ""


def test_no_monitor_thread_is_left_behind() -> None:
    import threading

    before = {t.name for t in threading.enumerate()}
    with progress(3, "export", unit="step") as bar:
        bar.update(3)
    assert "tqdm_monitor" not in {t.name for t in threading.enumerate()} - before
