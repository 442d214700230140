"""Each run's own figure (the metric its train.select_by names) in the Runs table, Compare and Find fastest,
as ``traindesk runs`` prints it: a regression run shows its RMSE, not blank accuracy cells."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QTableWidget

from app.flows import advisor as advisor_flow
from app.flows.advisor import advice_table
from app.views.runs import COL
from core import cli
from core.config import Config
from tests.written_runs import classifier_run, regression_run


def show_runs(qtbot: Any, window: Any, n: int) -> None:
    window.findChild(QAction, "action_show_runs").trigger()
    qtbot.waitUntil(lambda: window.runs_view.proxy.rowCount() == n, timeout=20_000)


def cells(window: Any, attr: str) -> dict[str, str]:
    view = window.runs_view
    return {
        view.proxy.index(r, COL["name"]).data(): view.proxy.index(r, COL[attr]).data()
        for r in range(view.proxy.rowCount())
    }


def header(window: Any, attr: str) -> str:
    return str(window.runs_view.proxy.headerData(COL[attr], Qt.Orientation.Horizontal))


def test_runs_table_and_compare_show_a_regression_runs_figure(
    qtbot: Any, make_window: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    a = regression_run(runs, "20250101-100000-a", 0.70)
    b = regression_run(runs, "20250101-110000-b", 0.60)
    window = make_window()
    show_runs(qtbot, window, 2)
    assert header(window, "best_figure") == "Best RMSE" and header(window, "final_figure") == "Final RMSE"
    assert cells(window, "best_figure") == {a.name: "0.7000", b.name: "0.6000"}
    assert cells(window, "final_figure") == {a.name: "0.7000", b.name: "0.6000"}

    # the command line says the same figure, from the same place
    assert cli.main(["runs", "--runs-dir", str(runs)]) == 0
    printed = capsys.readouterr().out
    assert "RMSE 0.7000" in printed and "RMSE 0.6000" in printed

    # Compare: the RMSE curves, the lower the better, starred
    window.runs_view.select_runs([a, b])
    with qtbot.waitSignal(window.compare_view.compared, timeout=20_000):
        window.findChild(QAction, "action_compare").trigger()
    view = window.compare_view
    assert len(view.curves["figure"]) == 2
    assert view.best_marks["figure"].data["y"][0] == pytest.approx(0.60)
    table = window.findChild(QTableWidget, "table_compare")
    assert table.horizontalHeaderItem(1).text() == "best RMSE"
    best = {table.item(r, 0).text(): table.item(r, 1).text() for r in range(2)}
    assert best == {a.name: "0.7000", b.name: "0.6000 ★"}

    # a classifier beside them: every figure names itself, each compared with its own kind
    c = classifier_run(runs, "20250101-120000-c", 0.95)
    window.runs_view.refresh()
    qtbot.waitUntil(lambda: window.runs_view.proxy.rowCount() == 3, timeout=20_000)
    assert header(window, "best_figure") == "Best figure"
    assert cells(window, "best_figure") == {a.name: "RMSE 0.7000", b.name: "RMSE 0.6000", c.name: "val acc 0.9500"}
    view.table_best.clear()
    with qtbot.waitSignal(view.compared, timeout=20_000):
        view.compare([a, b, c])
    shown = {table.item(r, 0).text(): table.item(r, 1).text() for r in range(3)}
    assert shown == {a.name: "RMSE 0.7000", b.name: "RMSE 0.6000 ★", c.name: "val acc 0.9500"}


def test_find_fastest_names_r2_on_a_regression(
    qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    from core.services import advisor

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3))
    y = x @ np.array([1.0, 2.0, -1.0]) + rng.normal(0, 0.1, 300)
    csv = tmp_path / "prices.csv"
    csv.write_text("a,b,c,price\n" + "".join(",".join(f"{v:.4f}" for v in (*r, t)) + "\n" for r, t in zip(x, y)))
    monkeypatch.setattr(advisor_flow, "ADVISOR_SECONDS", 0.6)
    monkeypatch.setattr(advisor, "candidates", lambda *_a, **_k: [("single", 1)])  # one probe is enough here
    window = make_window()
    window.panel.set_config(Config().replace("data", source=f"csv:{csv}", target="price"))
    shown: list[dict[str, Any]] = []
    monkeypatch.setattr(window, "ask_use_advice", lambda result: shown.append(result) or False)
    window.action_find_fastest.trigger()
    qtbot.waitUntil(lambda: not window.advising, timeout=120_000)
    assert shown, "no suggestion was offered"
    assert shown[0]["metric"] == "val_r2" and shown[0]["probes"][0]["best_accuracy"] is not None
    table = advice_table(shown[0])
    assert "<th>R²</th>" in table and "val acc" not in table
