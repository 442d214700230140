"""Defects found walking through the window: the ETA after a live edit of the epochs, views that kept a deleted
or renamed run, the status bar after "Back to mine", Serve and Predict started from the run on screen."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QAction

from app.viewmodels.run_index import write_notes
from app.views.runs import COL
from core.config import Config
from tests.written_runs import classifier_run


def test_eta_right_after_raising_the_epochs_while_paused_counts_the_epochs_left(qtbot: Any, make_window: Any) -> None:
    window = make_window()
    # far more epochs than pass before the pause, however fast the machine: the run is still going when it comes
    window.panel.set_config(Config().replace("train", epochs=400).replace("parallel", strategy="single", workers=1))
    window.action_start.trigger()

    def measured() -> bool:
        p = window.live.progress
        return p is not None and p.count().done >= 3 and p.eta_s() is not None

    qtbot.waitUntil(measured, timeout=120_000)
    progress = window.live.progress
    eta_before = progress.eta_s()  # what the 400 epochs had left, at the pace measured
    window.action_pause.trigger()
    qtbot.waitUntil(lambda: progress.paused, timeout=30_000)
    share, done = progress.progress, progress.count().done
    window.panel.spin_epochs.setValue(4000)
    window.action_resume.trigger()
    qtbot.waitUntil(lambda: not progress.paused, timeout=30_000)
    eta = progress.eta_s()
    assert eta is not None
    # about ten times the epochs left: the ETA and the bar count in the 4000 epochs at once
    left_before, left_now = 400 - 400 * share, 4000 - 400 * share
    assert eta > 0.3 * eta_before * left_now / left_before, (eta, eta_before, share)
    # the run goes on as soon as it resumes: the bar may already show a later epoch, never the old total
    shown = re.search(r"Epoch (\d+)/(\d+)", window.progress_run.text())
    assert shown is not None and int(shown.group(2)) == 4000 and int(shown.group(1)) >= done + 1, shown
    assert progress.progress < 0.1
    assert "ETA –" not in window.progress_run.text()
    window.action_stop.trigger()
    qtbot.waitUntil(lambda: window.controller.ended, timeout=60_000)


def test_compare_forgets_a_deleted_run_and_names_a_renamed_one(
    qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "runs"
    a, b, c = (classifier_run(runs, f"20250101-1{i}0000-{n}", 0.8 + i / 100) for i, n in enumerate("abc"))
    window = make_window()
    window.findChild(QAction, "action_show_runs").trigger()
    view = window.runs_view
    qtbot.waitUntil(lambda: view.proxy.rowCount() == 3, timeout=20_000)
    view.select_runs([a, b, c])
    with qtbot.waitSignal(window.compare_view.compared, timeout=20_000):
        window.findChild(QAction, "action_compare").trigger()

    model = view.model
    assert model.setData(model.index(model.row_for(b), COL["name"]), "baseline")
    assert {r.path: r.name for r in window.compare_view.runs} == {a: a.name, b: "baseline", c: c.name}
    assert "baseline" in window.compare_view.label_title.text()

    monkeypatch.setattr(view, "confirm_delete", lambda _runs: True)
    view.select_runs([c])
    view.action_delete.trigger()
    assert {r.path for r in window.compare_view.runs} == {a, b}
    assert window.compare_view.table_best.rowCount() == 2 and c.name not in window.compare_view.label_title.text()


def test_the_settings_of_a_renamed_run_say_its_new_name_and_back_to_mine_says_ready(
    qtbot: Any, make_window: Any, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    run = classifier_run(runs, "20250101-100000-a", 0.9)
    write_notes(run, name="first try")
    window = make_window()
    window.open_run(run)
    qtbot.waitUntil(lambda: window.viewing_run == run and not window.calls.busy, timeout=20_000)
    assert "Settings of <b>first try</b>" in window.panel.label_view.text()  # the name Runs shows
    assert window.label_state.text() == f"Viewing {run.name}"

    window.findChild(QAction, "action_show_runs").trigger()
    view = window.runs_view
    qtbot.waitUntil(lambda: view.proxy.rowCount() == 1, timeout=20_000)
    assert view.model.setData(view.model.index(0, COL["name"]), "baseline")
    assert "Settings of <b>baseline</b>" in window.panel.label_view.text()

    window.panel.button_my_settings.click()
    assert window.label_state.text() == "Ready"  # the user's own settings again: Start is theirs
    assert window.action_start.isEnabled()


def test_predict_and_serve_start_from_the_run_on_screen_unless_another_model_was_chosen(
    qtbot: Any, make_window: Any, tmp_path: Path
) -> None:
    from tests.trained_run import make_run

    first, second = make_run(tmp_path / "runs", steps=5), make_run(tmp_path / "runs", steps=5)
    for run in (first, second):
        (run / "metrics.jsonl").touch()  # a run folder the window opens
    window = make_window()
    assert window.predict_view.edit_model.text() == "" and window.serve_view.edit_model.text() == ""
    window.open_run(first)
    qtbot.waitUntil(lambda: window.viewing_run == first and not window.calls.busy, timeout=20_000)
    window.show_tab(window.predict_view)
    assert window.predict_view.edit_model.text() == str(first)
    window.show_tab(window.serve_view)
    assert window.serve_view.edit_model.text() == str(first)

    chosen = tmp_path / "model.onnx"
    window.predict_view.set_model(chosen)  # the user's choice stays theirs
    window.open_run(second)
    qtbot.waitUntil(lambda: window.viewing_run == second and not window.calls.busy, timeout=20_000)
    window.show_tab(window.predict_view)
    assert window.predict_view.edit_model.text() == str(chosen)
    window.show_tab(window.serve_view)
    assert window.serve_view.edit_model.text() == str(second)  # still the window's offer: it follows the run
