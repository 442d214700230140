"""Evaluate tab, Continue run and Find fastest, against the real engine."""

from __future__ import annotations

import json
from typing import Any

import pytest

import app.flows.advisor as advisor_flow
from core.config import Config

pytestmark = pytest.mark.slow

END = ("finished", "stopped", "failed")


def test_evaluate_tab_shows_the_finished_run(qtbot: Any, make_window: Any) -> None:
    window = make_window()
    assert [window.tabs.tabText(i) for i in range(window.tabs.count())] == [
        "Training",
        "Runs",
        "Compare",
        "Evaluate",
        "Predict",
        "Search",
        "Serve",
    ]
    window.panel.set_config(Config().replace("train", epochs=3))
    with qtbot.waitSignal(window.evaluate_view.evaluated, timeout=90_000) as blocker:
        window.action_start.trigger()
    assert window.controller.state == "finished"
    evaluation = blocker.args[0]
    run_dir = window.controller.run_dir
    assert (run_dir / "checkpoints" / "best.pt").is_file()
    assert evaluation["checkpoint"]["which"] == "best"  # the default once the run kept a best evaluation
    assert len(evaluation["confusion"]) == 10 and len(evaluation["per_class"]) == 10
    on_disk = json.loads((run_dir / "eval.json").read_text())  # written at the end of the run, of its model
    assert on_disk["checkpoint"]["which"] == "best" and evaluation["accuracy"] == on_disk["accuracy"]
    with qtbot.waitSignal(window.evaluate_view.evaluated, timeout=90_000) as blocker:
        window.evaluate_view.combo_checkpoint.set_which("last")
    assert blocker.args[0]["checkpoint"]["which"] == "last"
    assert json.loads((run_dir / "eval.json").read_text()) == on_disk  # another checkpoint's figures are not the run's
    qtbot.waitUntil(lambda: not window.evaluate_view.combo_checkpoint.busy, timeout=30_000)


def test_continue_a_stopped_run(qtbot: Any, make_window: Any) -> None:
    window = make_window()
    window.panel.set_config(Config().replace("train", epochs=5000))
    window.action_start.trigger()
    qtbot.waitUntil(lambda: window.controller.state == "running" and window.progress_run.value() > 0, timeout=60_000)
    window.action_stop.trigger()
    qtbot.waitUntil(lambda: window.controller.ended, timeout=60_000)
    run_dir = window.controller.run_dir
    done = json.loads((run_dir / "summary.json").read_text())["epochs_done"]
    assert window.action_continue_run.isEnabled()

    window.panel.spin_epochs.setValue(done + 3)
    window.action_continue_run.trigger()
    qtbot.waitUntil(
        lambda: (
            window.controller.ended
            and window.controller.run_dir == run_dir
            and json.loads((run_dir / "summary.json").read_text())["epochs_done"] == done + 3
        ),
        timeout=90_000,
    )
    assert window.controller.state == "finished"
    assert not window.action_continue_run.isEnabled()  # finished all the epochs asked for


def test_find_fastest_fills_in_the_suggestion(qtbot: Any, make_window: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(advisor_flow, "ADVISOR_SECONDS", 0.6)
    window = make_window()
    window.panel.set_config(Config().replace("parallel", strategy="ddp", workers=2))
    shown: list[dict[str, Any]] = []
    monkeypatch.setattr(window, "ask_use_advice", lambda result: shown.append(result) or True)
    window.action_find_fastest.trigger()
    assert window.advising and not window.action_start.isEnabled()
    qtbot.waitUntil(lambda: not window.advising, timeout=120_000)
    assert shown, "no suggestion was offered"
    best = shown[0]["suggestion"]
    assert {(p["strategy"], p["workers"]) for p in shown[0]["probes"]} >= {("single", 1), ("hogwild", 2)}
    cfg = window.panel.config()
    assert (cfg.parallel.strategy, cfg.parallel.workers) == (best["strategy"], best["workers"])
    assert window.action_start.isEnabled()
