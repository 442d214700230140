"""The Serve tab starts a real server as a child process, shows it live, and stops it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trained_run import make_run  # noqa: E402

from app.serve_view import ServeView, histogram_quantile  # noqa: E402

START_MS = 120_000


def test_histogram_quantile_interpolates_like_promql() -> None:
    buckets = [(0.01, 10.0), (0.02, 30.0), (0.05, 40.0), (float("inf"), 40.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.015)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.01)
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.02 + 0.03 * (39.6 - 30) / 10)
    assert histogram_quantile(0.5, [(0.01, 0.0), (float("inf"), 0.0)]) is None


def test_serve_tab_starts_shows_and_stops_a_server(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = make_run(tmp_path / "runs")
    view = ServeView()
    qtbot.addWidget(view)
    view.set_model(run)
    view.spin_port.setValue(0)
    view.spin_workers.setValue(1)
    assert view.findChild(type(view.action_serve_start), "action_serve_start") is view.action_serve_start
    with qtbot.waitSignal(view.url_ready, timeout=START_MS):
        view.action_serve_start.trigger()
    assert view.url.startswith("http://127.0.0.1:")
    assert not view.action_serve_start.isEnabled() and view.action_serve_stop.isEnabled()
    qtbot.waitUntil(lambda: view.button_send.isEnabled(), timeout=30_000)  # the form, from /openapi.json
    assert len(view.fields) == 64 and view.fields[0][0] == "pixel_0_0"
    assert "/predict" in view.edit_curl.text() and "pixel_0_0" in view.edit_curl.text()
    for _ in range(3):
        with qtbot.waitSignal(view.answered, timeout=30_000) as answer:
            view.send()
        assert answer.args[0].startswith("HTTP 200") and '"class"' in answer.args[0]
    view.fields[5][1].setText("bright")
    with qtbot.waitSignal(view.answered, timeout=30_000) as answer:
        view.send()
    assert answer.args[0].startswith("HTTP 422") and "pixel_0_5" in answer.args[0]
    qtbot.waitUntil(lambda: len(view.series["t"]) >= 2 and view.table_workers.rowCount() == 1, timeout=30_000)
    assert view.table_workers.item(0, 2).text() in ("idle", "busy")
    assert view.plot_serve_latency.objectName() == "plot_serve_latency"
    assert view.plot_serve_throughput.objectName() == "plot_serve_throughput"
    with qtbot.waitSignal(view.stopped, timeout=30_000) as stopped:
        view.action_serve_stop.trigger()
    assert stopped.args == [0]
    assert view.action_serve_start.isEnabled() and not view.action_serve_stop.isEnabled()


def test_closing_the_tab_stops_its_server(qtbot, tmp_path: Path, live_children) -> None:  # type: ignore[no-untyped-def]
    view = ServeView()
    qtbot.addWidget(view)
    view.set_model(make_run(tmp_path / "runs"))
    view.spin_port.setValue(0)
    view.spin_workers.setValue(1)
    with qtbot.waitSignal(view.url_ready, timeout=START_MS):
        view.start()
    assert live_children()
    view.shutdown()
    assert not view.serving


def test_a_bad_model_is_one_line_in_the_tab(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    view = ServeView()
    qtbot.addWidget(view)
    view.set_model(tmp_path / "nothing-here")
    with qtbot.waitSignal(view.failed, timeout=60_000) as failed:
        view.start()
    assert "not found" in failed.args[0] and "\n" not in failed.args[0]
