"""The Serve tab starts a real server as a child process, shows it live, and stops it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from pytestqt.qtbot import QtBot

from app.views.serve import ServeView, histogram_quantile
from tests.trained_run import make_run

START_MS = 120_000


def test_histogram_quantile_interpolates_like_promql() -> None:
    buckets = [(0.01, 10.0), (0.02, 30.0), (0.05, 40.0), (float("inf"), 40.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.015)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.01)
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.02 + 0.03 * (39.6 - 30) / 10)
    assert histogram_quantile(0.5, [(0.01, 0.0), (float("inf"), 0.0)]) is None


def test_serve_tab_starts_shows_and_stops_a_server(qtbot: QtBot, tmp_path: Path) -> None:
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
    assert view.try_form.takes_images  # digits are 8×8 pictures: the form takes image files
    digit = tmp_path / "digit.png"
    Image.fromarray(np.tile(np.arange(0, 256, 32, dtype=np.uint8), (8, 1))).save(digit)
    with qtbot.waitSignal(view.answered, timeout=30_000) as answer:
        view.try_form.set_images([digit])  # sent as soon as chosen
    for _ in range(2):
        assert answer.args[0].startswith("HTTP 200\nclass: ") and "model version" in answer.args[0]
        with qtbot.waitSignal(view.answered, timeout=30_000) as answer:
            view.send()
    assert "/predict" in view.edit_curl.text() and str(digit) in view.edit_curl.text()
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("bright")
    with qtbot.waitSignal(view.answered, timeout=30_000) as answer:
        view.try_form.set_images([not_an_image])
    assert answer.args[0].startswith("HTTP 422") and "images[0]" in answer.args[0]
    qtbot.waitUntil(lambda: len(view.series["t"]) >= 2 and view.table_workers.rowCount() == 1, timeout=30_000)
    assert re.fullmatch(r"idle|busy|serving|busy \d+%", view.table_workers.item(0, 2).text())  # a share while computing
    assert view.plot_serve_latency.objectName() == "plot_serve_latency"
    assert view.plot_serve_throughput.objectName() == "plot_serve_throughput"
    with qtbot.waitSignal(view.stopped, timeout=30_000) as stopped:
        view.action_serve_stop.trigger()
    assert stopped.args == [0]
    assert view.action_serve_start.isEnabled() and not view.action_serve_stop.isEnabled()
    assert view.table_workers.rowCount() == 0  # a stopped server's workers are not listed


def test_closing_the_tab_stops_its_server(qtbot: QtBot, tmp_path: Path, live_children: Callable[[], list[int]]) -> None:
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


def test_a_bad_model_is_one_line_in_the_tab(qtbot: QtBot, tmp_path: Path) -> None:
    view = ServeView()
    qtbot.addWidget(view)
    view.set_model(tmp_path / "nothing-here")
    with qtbot.waitSignal(view.failed, timeout=60_000) as failed:
        view.start()
    assert "not found" in failed.args[0] and "\n" not in failed.args[0]


def test_a_server_started_again_soon_after_stop_outlives_the_earlier_stops_kill(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stop arms a kill for the process it stops; a server started within a second of that stop keeps serving
    well past the moment the kill would have come (STOP_WAIT_MS shortened to 8 s here: a drain takes ~1 s)."""
    import time

    import app.views.serve as serve_view

    monkeypatch.setattr(serve_view, "STOP_WAIT_MS", 8000)
    view = ServeView()
    qtbot.addWidget(view)
    view.set_model(make_run(tmp_path / "runs"))
    view.spin_port.setValue(0)
    view.spin_workers.setValue(1)
    with qtbot.waitSignal(view.url_ready, timeout=START_MS):
        view.start()
    stop_at = time.monotonic()
    with qtbot.waitSignal(view.stopped, timeout=30_000) as stopped:
        view.stop()
    assert stopped.args == [0]
    with qtbot.waitSignal(view.url_ready, timeout=START_MS):
        view.start()  # at once: well within a second of the server's end
    kill_due_ms = int((stop_at + 8.0 - time.monotonic()) * 1000)
    with qtbot.assertNotEmitted(view.stopped, wait=max(0, kill_due_ms) + 3000):
        pass  # the earlier stop's kill, were it the new server's, would have ended it in this time
    assert view.serving and "serving at" in view.label_status.text()
    qtbot.waitUntil(lambda: view.button_send.isEnabled(), timeout=30_000)
    digit = tmp_path / "digit.png"
    Image.new("L", (8, 8), 128).save(digit)
    with qtbot.waitSignal(view.answered, timeout=30_000) as answer:
        view.try_form.set_images([digit])
    assert answer.args[0].startswith("HTTP 200")
    with qtbot.waitSignal(view.stopped, timeout=30_000) as stopped:
        view.stop()
    assert stopped.args == [0] and view.label_status.text() == "not serving (stopped)"


TABLE_SPEC = {
    "x-traindesk": {
        "task": "classification",
        "target": "species",
        "columns": [
            {"name": "island", "kind": "category", "levels": ["Biscoe", "Dream", "Torgersen"], "example": "Biscoe"},
            {"name": "bill_length_mm", "kind": "number", "example": 39.1},
            {"name": "sex", "kind": "category", "levels": ["female", "male"], "example": None},
            {"name": "tagged", "kind": "bool", "example": True},
        ],
        "example": {"rows": [{"island": "Biscoe", "bill_length_mm": 39.1, "sex": None, "tagged": True}]},
    },
    # what the form must not use for a table model: the encoded features
    "components": {
        "schemas": {
            "PredictRequest": {
                "oneOf": [
                    {"type": "object", "properties": {"inputs": {"type": "array", "description": "samples"}}},
                    {
                        "type": "object",
                        "properties": {
                            "rows": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "properties": {"bill_length_mm": {}, "bill_length_mm_missing": {}, "island": {}},
                                },
                            }
                        },
                    },
                ]
            }
        }
    },
}


def _curl_body(view: ServeView) -> object:
    import json
    import shlex

    words = shlex.split(view.edit_curl.text())
    assert words[:2] == ["curl", "-s"] and words[2].endswith("/predict")
    return json.loads(words[words.index("-d") + 1])


def test_a_table_models_try_it_form_is_its_raw_columns(qtbot: QtBot) -> None:
    from PySide6.QtWidgets import QComboBox, QLineEdit

    view = ServeView()
    qtbot.addWidget(view)
    view.show_spec(TABLE_SPEC)
    assert [name for name, _w in view.fields] == ["island", "bill_length_mm", "sex", "tagged"]
    widgets = dict(view.fields)
    island, bill, sex, tagged = (widgets[n] for n in ("island", "bill_length_mm", "sex", "tagged"))
    assert isinstance(island, QComboBox) and island.isEditable()
    assert [island.itemText(i) for i in range(island.count())] == ["Biscoe", "Dream", "Torgersen", "(missing)"]
    assert island.currentText() == "Biscoe" and sex.currentText() == "(missing)"
    assert isinstance(tagged, QComboBox) and not tagged.isEditable()
    assert [tagged.itemText(i) for i in range(tagged.count())] == ["true", "false", "(missing)"]
    assert tagged.currentText() == "true"
    assert isinstance(bill, QLineEdit) and bill.text() == "39.1"
    assert "species" in view.label_form_title.text() and "classification" in view.label_form_title.text()
    body = {"rows": [{"island": "Biscoe", "bill_length_mm": 39.1, "sex": None, "tagged": True}]}
    assert view.body() == body and _curl_body(view) == body
    assert view.edit_curl.cursorPosition() == 0  # its start in view

    island.setEditText("Mars o'Neil")  # a level training never saw, typed, with a quote the shell must keep
    bill.setText("")  # empty: missing
    tagged.setCurrentText("false")
    sex.setCurrentText("male")
    body = {"rows": [{"island": "Mars o'Neil", "bill_length_mm": None, "sex": "male", "tagged": False}]}
    assert view.body() == body and _curl_body(view) == body  # the curl line sends exactly the form's body
    tagged.setCurrentText("(missing)")
    island.setCurrentText("(missing)")
    assert view.body()["rows"][0]["tagged"] is None and view.body()["rows"][0]["island"] is None
    assert _curl_body(view) == view.body()

    # A model without x-traindesk keeps its form: a field per named input; the answer of the model before is gone.
    view.text_answer.setPlainText("Adelie (0.98)")
    spec = {k: v for k, v in TABLE_SPEC.items() if k != "x-traindesk"}
    view.show_spec(spec)
    assert view.text_answer.toPlainText() == ""
    assert [name for name, _w in view.fields] == ["bill_length_mm", "bill_length_mm_missing", "island"]
    assert not view.label_form_title.isVisibleTo(view)


def test_a_text_column_has_a_text_box_and_a_date_column_a_date_field(qtbot: QtBot) -> None:
    from PySide6.QtWidgets import QLineEdit, QPlainTextEdit

    columns = [
        {"name": "message", "kind": "text", "example": "my parcel is late"},
        {"name": "sent", "kind": "datetime", "example": "2024-03-05T14:30:00"},
        {"name": "amount", "kind": "number", "example": 12.5},
    ]
    example = {"message": "my parcel is late", "sent": "2024-03-05T14:30:00", "amount": 12.5}
    table = {"task": "classification", "target": "urgent", "columns": columns, "example": {"rows": [example]}}
    view = ServeView()
    qtbot.addWidget(view)
    view.show_spec({**TABLE_SPEC, "x-traindesk": table})
    widgets = dict(view.fields)
    message, sent = widgets["message"], widgets["sent"]
    assert isinstance(message, QPlainTextEdit) and message.toPlainText() == "my parcel is late"
    assert isinstance(sent, QLineEdit) and sent.text() == "2024-03-05T14:30:00"
    assert view.body() == {"rows": [example]} and _curl_body(view) == view.body()
    message.setPlainText("Refund, please:\nit came broken")  # several lines, sent as they are
    sent.setText("")  # empty: missing
    assert view.body()["rows"][0] == {"message": "Refund, please:\nit came broken", "sent": None, "amount": 12.5}
    assert _curl_body(view) == view.body()


def test_the_answer_says_the_class_and_probabilities_or_the_value() -> None:
    from app.views.serve_form import answer_text

    text = answer_text(
        200,
        b'{"predictions": [{"class": "Adelie", "probabilities": {"Gentoo": 0.02, '
        b'"Adelie": 0.93, "Chinstrap": 0.05}}], "model_version": "abc"}',
    )
    assert text.splitlines() == [
        "HTTP 200",
        "class: Adelie",
        "  Adelie  0.930",
        "  Chinstrap  0.050",
        "  Gentoo  0.020",
        "model version abc",
    ]
    assert (
        answer_text(200, b'{"predictions": [{"value": 3120.5}], "model_version": "abc"}').splitlines()[1]
        == "value: 3120.5"
    )
    assert (
        answer_text(422, b'{"error": "row 1: column \'bill_length_mm\' is not numeric"}')
        == "HTTP 422\nrow 1: column 'bill_length_mm' is not numeric"
    )


def _metrics(ok: float, batches: float) -> str:
    return (
        "# TYPE traindesk_serve_requests_total counter\n"
        f'traindesk_serve_requests_total{{endpoint="predict",status="200"}} {ok}\n'
        "# TYPE traindesk_serve_batch_rows histogram\n"
        f'traindesk_serve_batch_rows_bucket{{le="1.0"}} {batches}\n'
        f'traindesk_serve_batch_rows_bucket{{le="+Inf"}} {batches}\n'
        f"traindesk_serve_batch_rows_count {batches}\ntraindesk_serve_batch_rows_sum {batches}\n"
    )


def test_workers_read_serving_while_batches_flow_and_only_current_ones_are_listed(qtbot: Any) -> None:
    from app.viewmodels.serve_metrics import parse_metrics
    from app.views.serve_monitor import ServeMonitor

    monitor = ServeMonitor()
    qtbot.addWidget(monitor)
    monitor.reset(100.0)
    workers = [
        {"worker": 0, "pid": 11, "state": "idle", "version": "v", "restarts": 0},
        {"worker": 1, "pid": 12, "state": "busy", "version": "v", "restarts": 0},
    ]
    monitor.show_metrics(parse_metrics(_metrics(0, 0)), 101.0)
    monitor.show_metrics(parse_metrics(_metrics(620, 300)), 102.0)  # 620 requests/s in 300 batches
    monitor.show_workers(workers)
    assert [monitor.table_workers.item(r, 2).text() for r in range(2)] == ["serving", "serving"]
    assert monitor.series["rps"] == [620.0]
    monitor.show_metrics(parse_metrics(_metrics(620, 300)), 103.0)  # a quiet second
    monitor.show_workers([dict(workers[0], state="idle"), dict(workers[1], pid=13, state="starting")])
    assert [monitor.table_workers.item(r, 2).text() for r in range(2)] == ["idle", "starting"]
    monitor.show_workers(workers[:1])
    assert monitor.table_workers.rowCount() == 1 and monitor.table_workers.item(0, 1).text() == "11"
    # each worker's share of the time computing, between two readings of its busy_s
    monitor.show_workers([dict(workers[0], busy_s=2.0), dict(workers[1], state="idle", busy_s=0.5)], now=10.0)
    monitor.show_workers([dict(workers[0], busy_s=2.45), dict(workers[1], state="idle", busy_s=0.5)], now=11.0)
    assert [monitor.table_workers.item(r, 2).text() for r in range(2)] == ["busy 45%", "idle"]


def test_a_long_status_line_does_not_widen_the_window(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    window = make_window()
    window.resize(1280, 800)
    view = window.serve_view
    window.tabs.setCurrentWidget(view)
    qtbot.waitUntil(view.isVisible, timeout=10_000)
    before = window.minimumSizeHint().width()
    view.set_model(tmp_path.joinpath(*["a-folder-with-a-rather-long-name"] * 14))
    with qtbot.waitSignal(view.failed, timeout=60_000) as failed:
        view.start()
    message = failed.args[0]
    assert len(message) > 400 and "not found" in message and "\n" not in message  # it names the long path
    qtbot.waitUntil(lambda: not view.serving, timeout=30_000)
    assert view.label_status.text() == message and view.label_status.toolTip() == message  # whole in its tip
    assert window.minimumSizeHint().width() == before and window.width() == 1280
    assert view.label_status.geometry().right() <= view.contentsRect().right()
    window.label_run_dir.setText(str(tmp_path / ("runs-" * 120)))  # the status bar's run folder line, too
    assert window.minimumSizeHint().width() == before


def test_the_serve_tab_follows_the_theme_and_its_form_has_room(qtbot: Any, make_window: Any) -> None:
    from PySide6.QtCore import QCoreApplication
    from PySide6.QtGui import QColor
    from PySide6.QtWidgets import QGroupBox

    window = make_window()
    view = window.serve_view
    plots = (view.plot_serve_latency, view.plot_serve_throughput, view.plot_serve_batches)

    def lightness() -> list[int]:
        return [QColor(p.backgroundBrush().color()).lightness() for p in plots]

    assert window._theme.name == "light" and min(lightness()) > 200
    window.action_dark.trigger()
    try:
        assert max(lightness()) < 60
    finally:
        window.action_dark.trigger()
    assert min(lightness()) > 200

    columns = [
        {"name": n, "kind": "number", "example": 1.5}
        for n in ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "a_rather_long_column_name")
    ]
    spec = dict(
        TABLE_SPEC,
        **{"x-traindesk": dict(TABLE_SPEC["x-traindesk"], columns=TABLE_SPEC["x-traindesk"]["columns"] + columns)},
    )
    window.tabs.setCurrentWidget(view)
    view.show_spec(spec)
    box = view.findChild(QGroupBox, "group_serve_try")
    for size, share in (((1280, 800), 0.35), ((900, 600), 0.0)):
        window.resize(*size)
        qtbot.waitUntil(lambda s=size: window.width() == s[0] and view.isVisible(), timeout=10_000)
        QCoreApplication.processEvents()  # the layouts' pending requests
        assert box.width() >= max(250, share * view.width()), size
        form_view = view.try_form.parentWidget()  # the scroll area's viewport
        in_view = [w for _n, w in view.fields if w.mapTo(form_view, w.rect().bottomLeft()).y() <= form_view.height()]
        assert len(in_view) >= 4, size  # the form scrolls for the rest
        for _name, w in view.fields:
            assert w.width() >= 80 and w.mapTo(form_view, w.rect().topRight()).x() <= form_view.width(), size


def test_a_served_table_models_form_is_built_from_its_server_and_its_example_answers(
    qtbot: QtBot, tmp_path: Path
) -> None:
    """A real table run served: the form holds its raw columns (never an encoded feature), pre-filled with a
    training row, and what the form sends answers 200 with the class the row's model gives."""
    from core.config import Config, apply_overrides
    from core.session import Session
    from tests import journey_tables as jt

    header, rows = jt.census(600, seed=0)
    source = jt.write_csv(tmp_path / "census.csv", header, rows)
    cfg = apply_overrides(
        Config(), [f'data.source="csv:{source}"', "data.target=species", "parallel.strategy=single", "train.epochs=3"]
    )
    session = Session(cfg, runs_dir=tmp_path / "runs")
    session.start()
    assert session.wait(120) == "finished"
    view = ServeView()
    qtbot.addWidget(view)
    view.set_model(session.run_dir)
    view.spin_port.setValue(0)
    view.spin_workers.setValue(1)
    with qtbot.waitSignal(view.url_ready, timeout=START_MS):
        view.start()
    try:
        qtbot.waitUntil(lambda: view.button_send.isEnabled() and bool(view.fields), timeout=30_000)
        names = [name for name, _w in view.fields]
        assert names == ["island", "bill_length_mm", "flipper_length_mm", "body_mass_g", "sex", "adult"]
        body = view.body()
        assert all(v is not None for v in body["rows"][0].values())  # a complete training row
        assert _curl_body(view) == body
        with qtbot.waitSignal(view.answered, timeout=30_000) as answer:
            view.send()
        assert answer.args[0].startswith("HTTP 200")
        assert any(cls in answer.args[0] for cls in ("Adelie", "Chinstrap", "Gentoo"))
    finally:
        with qtbot.waitSignal(view.stopped, timeout=30_000):
            view.stop()


def _latency_metrics(ok: float, fast: float) -> str:
    """``ok`` requests so far, ``fast`` of them under 10 ms."""
    return _metrics(ok, ok) + (
        "# TYPE traindesk_serve_latency_seconds histogram\n"
        f'traindesk_serve_latency_seconds_bucket{{le="0.01"}} {fast}\n'
        f'traindesk_serve_latency_seconds_bucket{{le="+Inf"}} {ok}\n'
        f"traindesk_serve_latency_seconds_count {ok}\ntraindesk_serve_latency_seconds_sum {ok * 0.005}\n"
    )


def test_serve_plots_have_no_negative_axes_and_draw_a_lone_request(qtbot: Any) -> None:
    from app.viewmodels.serve_metrics import parse_metrics
    from app.views.serve_monitor import ServeMonitor

    monitor = ServeMonitor()
    monitor.resize(900, 500)
    qtbot.addWidget(monitor)
    monitor.show()
    qtbot.waitExposed(monitor)
    monitor.reset(100.0)
    for now in (100.5, 101.0, 102.0):  # serving, no request yet: 0 requests/s, no latency
        monitor.show_metrics(parse_metrics(_latency_metrics(0, 0)), now)
    assert monitor.series["rps"] == [0.0, 0.0]
    plots = (monitor.plot_serve_latency, monitor.plot_serve_throughput, monitor.plot_serve_batches)

    def lowest() -> list[float]:
        monitor.grab()
        return [min(plot.getPlotItem().getViewBox().viewRange()[1][0], 0.0) for plot in plots]

    qtbot.waitUntil(lambda: lowest() == [0.0, 0.0, 0.0], timeout=5_000)  # no axis below zero (-0.5 for a flat 0)
    monitor.show_metrics(parse_metrics(_latency_metrics(1, 1)), 103.0)  # one request, alone
    monitor.show_metrics(parse_metrics(_latency_metrics(1, 1)), 104.0)
    p50 = monitor.curves["p50"]
    assert [round(v, 3) for v in monitor.series["p50"][2:3]] == [5.0]  # the lone reading (a nan on each side)
    for curve in (p50, monitor.curve_rps):  # drawn: a dot where a line has nothing to join
        points = curve.scatter.data
        assert len(points) and any(abs(float(y) - v) < 1e-6 for y in points["y"] for v in (5.0, 1.0)), curve
