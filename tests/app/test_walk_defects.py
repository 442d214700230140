"""Defects found walking through the window: the ETA after a live edit of the epochs, views that kept a deleted
or renamed run, the status bar after "Back to mine", Serve and Predict started from the run on screen."""

from __future__ import annotations

from typing import Any

from core.config import Config


def test_eta_right_after_raising_the_epochs_while_paused_counts_the_epochs_left(qtbot: Any, make_window: Any) -> None:
    window = make_window()
    window.panel.set_config(Config().replace("train", epochs=20).replace("parallel", strategy="single", workers=1))
    window.action_start.trigger()

    def measured() -> bool:
        p = window.live.progress
        return p is not None and p.count().done >= 3 and p.eta_s() is not None

    qtbot.waitUntil(measured, timeout=120_000)
    progress = window.live.progress
    eta_before = progress.eta_s()  # what the 20 epochs had left, at the pace measured
    window.action_pause.trigger()
    qtbot.waitUntil(lambda: progress.paused, timeout=30_000)
    share, done = progress.progress, progress.count().done
    window.panel.spin_epochs.setValue(200)
    window.action_resume.trigger()
    qtbot.waitUntil(lambda: not progress.paused, timeout=30_000)
    eta = progress.eta_s()
    assert eta is not None
    # about ten times the epochs left: the ETA and the bar count in the 200 epochs at once
    left_before, left_now = 20 - 20 * share, 200 - 20 * share
    assert eta > 0.3 * eta_before * left_now / left_before, (eta, eta_before, share)
    assert progress.progress < 0.1 and f"Epoch {done + 1}/200" in window.progress_run.text()
    assert "ETA –" not in window.progress_run.text()
    window.action_stop.trigger()
    qtbot.waitUntil(lambda: window.controller.ended, timeout=60_000)
