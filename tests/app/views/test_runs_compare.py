"""The Runs table and Compare view over past runs (no training: runs are written by the test)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QTableView, QTableWidget, QWidget

from app.viewmodels.run_index import read_notes
from app.views.runs import COL
from core.config import Config


def write_run(
    runs: Path, name: str, cfg: Config, acc: float, status: str = "finished", epochs: int = 3, t0: float = 1000.0
) -> Path:
    run = runs / name
    run.mkdir(parents=True)
    (run / "config.toml").write_text(cfg.to_toml())
    recs: list[dict[str, Any]] = [{"kind": "state", "t": t0, "worker": None, "state": "starting", "detail": ""}]
    step = 0
    for epoch in range(1, epochs + 1):
        for _ in range(20):
            step += 1
            for w in range(2):
                recs.append(
                    {
                        "kind": "step",
                        "t": t0 + step * 0.05,
                        "worker": w,
                        "epoch": epoch,
                        "step": step,
                        "samples": step * 64,
                        "loss": 2.0 / step + 0.01 * w,
                        "lr": cfg.optim.lr,
                    }
                )
        recs.append(
            {
                "kind": "eval",
                "t": t0 + step * 0.05,
                "worker": 0,
                "epoch": epoch,
                "val_loss": 1.0 / epoch,
                "val_accuracy": acc * epoch / epochs,
            }
        )
    recs.append({"kind": "state", "t": t0 + step * 0.05 + 0.1, "worker": None, "state": status, "detail": ""})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (run / "summary.json").write_text(
        json.dumps(
            {
                "status": status,
                "strategy": cfg.parallel.strategy,
                "workers": 2,
                "epochs_done": epochs,
                "samples_per_s": 1234.0,
                "wall_s": 12.5,
                "dataset": "digits",
                "final": {"val_accuracy": acc, "val_loss": 1.0 / epochs, "train_loss": 0.1},
            }
        )
    )
    return run


@pytest.fixture
def three_runs(tmp_path: Path) -> list[Path]:
    runs = tmp_path / "runs"
    base = Config().replace("train", epochs=3)
    return [
        write_run(runs, "20250101-100000-a", base, 0.90),
        write_run(runs, "20250101-110000-b", base.replace("optim", lr=0.01), 0.95),
        write_run(runs, "20250101-120000-c", base.replace("model", hidden=(64,)), 0.80),
    ]


def rows(window: Any) -> list[str]:
    view = window.runs_view
    return [view.proxy.index(r, COL["name"]).data() for r in range(view.proxy.rowCount())]


def show_runs(qtbot: Any, window: Any, n: int) -> None:
    window.findChild(QAction, "action_show_runs").trigger()
    qtbot.waitUntil(lambda: window.runs_view.proxy.rowCount() == n, timeout=20_000)


def test_three_runs_listed_and_two_compared(
    qtbot: Any, make_window: Any, three_runs: list[Path], tmp_path: Path
) -> None:
    window = make_window()
    show_runs(qtbot, window, 3)
    table = window.findChild(QTableView, "table_runs")
    assert table is not None and table.model().rowCount() == 3
    assert rows(window) == [p.name for p in reversed(three_runs)]  # newest first
    compare = window.findChild(QAction, "action_compare")
    assert not compare.isEnabled()  # needs two runs

    window.runs_view.select_runs(three_runs[:2])
    assert compare.isEnabled()
    with qtbot.waitSignal(window.compare_view.compared, timeout=20_000):
        compare.trigger()
    assert window.tabs.currentWidget() is window.compare_view
    plot = window.findChild(QWidget, "plot_compare")
    assert plot is window.compare_view.plot
    for metric in ("figure", "val_loss", "train_loss"):
        assert len(window.compare_view.curves[metric]) == 2  # one curve per run
    assert window.compare_view.diff_keys() == ["optim.lr"]  # only what differs
    diff = window.findChild(QTableWidget, "table_compare_diff")
    shown = {diff.horizontalHeaderItem(c).text(): diff.item(0, c).text() for c in range(2)}
    assert shown == {three_runs[0].name: "0.05", three_runs[1].name: "0.01"}
    best = window.findChild(QTableWidget, "table_compare")
    starred = [best.item(r, 0).text() for r in range(2) if best.item(r, 1).text().endswith("★")]
    assert starred == [three_runs[1].name]  # the best accuracy is marked
    assert window.compare_view.best_marks["figure"].data["y"][0] == pytest.approx(0.95)

    # x axes: epoch and wall time too
    window.compare_view.combo_x.setCurrentIndex(window.compare_view.combo_x.findData("epoch"))
    x = window.compare_view.curves["figure"][0].xData
    assert list(x) == [1.0, 2.0, 3.0]

    window.compare_view.save_csv(tmp_path / "cmp.csv")
    window.compare_view.save_png(tmp_path / "cmp.png")
    lines = list(csv.reader((tmp_path / "cmp.csv").open()))
    assert lines[0] == ["run", "metric", "step", "epoch", "time_s", "value"]
    assert {row[0] for row in lines[1:]} == {three_runs[0].name, three_runs[1].name}
    assert (tmp_path / "cmp.png").stat().st_size > 1000


def test_notes_tags_rename_filter_sort_and_delete(
    qtbot: Any, make_window: Any, three_runs: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    window = make_window()
    show_runs(qtbot, window, 3)
    view = window.runs_view
    model = view.model
    r = model.row_for(three_runs[0])
    assert model.setData(model.index(r, COL["notes"]), "baseline, lr 0.05")
    assert model.setData(model.index(r, COL["tags"]), "base, digits,base")
    assert model.setData(model.index(r, COL["name"]), "my baseline")
    assert read_notes(three_runs[0]) == {
        "notes": "baseline, lr 0.05",
        "tags": ["base", "digits"],
        "name": "my baseline",
    }
    view.refresh()
    qtbot.waitUntil(lambda: not view.busy, timeout=10_000)
    assert "my baseline" in rows(window)  # kept across scans (stored in the run folder)

    view.edit_filter.setText("digits")  # tags are searched too
    assert view.proxy.rowCount() == 3  # every run's dataset is digits
    view.edit_filter.setText("baseline")
    assert rows(window) == ["my baseline"]
    view.edit_filter.setText("")

    # sort by best validation accuracy, ascending then descending: by value
    view.table.sortByColumn(COL["best_figure"], Qt.SortOrder.AscendingOrder)
    accs = [view.proxy.index(i, COL["best_figure"]).data() for i in range(3)]
    assert accs == ["0.8000", "0.9000", "0.9500"]
    view.table.sortByColumn(COL["best_figure"], Qt.SortOrder.DescendingOrder)
    assert view.proxy.index(0, COL["best_figure"]).data() == "0.9500"

    # delete asks, then moves to the trash
    asked: list[list[Path]] = []
    monkeypatch.setattr(view, "confirm_delete", lambda runs: asked.append(runs) or True)
    view.select_runs([three_runs[2]])
    view.action_delete.trigger()
    assert asked == [[three_runs[2]]]
    assert not three_runs[2].exists() and (three_runs[2].parent / ".trash" / three_runs[2].name).is_dir()
    qtbot.waitUntil(lambda: view.proxy.rowCount() == 2, timeout=10_000)


def test_opening_a_run_shows_its_settings_read_only(qtbot: Any, make_window: Any, three_runs: list[Path]) -> None:
    window = make_window()
    mine = window.panel.config()
    window.open_run(three_runs[1])
    qtbot.waitUntil(lambda: window.viewing_run == three_runs[1], timeout=20_000)
    panel = window.panel
    assert panel.mode == "view" and panel.frame_view.isVisible()
    assert panel.config().optim.lr == 0.01  # the run's settings
    assert not panel.combo_dataset.isEnabled() and not panel.combo_strategy.isEnabled()
    assert panel.edit_lr.isEnabled()  # what Fork and Continue may change
    assert not window.action_start.isEnabled()
    panel.button_my_settings.click()
    assert panel.mode == "edit" and panel.config() == mine
    window.open_run(three_runs[1])
    qtbot.waitUntil(lambda: window.panel.mode == "view", timeout=20_000)
    panel.button_use_settings.click()
    assert panel.mode == "edit" and panel.config().optim.lr == 0.01 and panel.combo_dataset.isEnabled()
    assert window.action_start.isEnabled()


def test_gui_runs_dir_is_remembered(qapp: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtWidgets import QApplication

    from app import main as main_module
    from app.main_window import MainWindow
    from app.shell.settings import AppSettings

    def fake_exec(self: Any) -> int:
        for w in QApplication.topLevelWidgets():
            if isinstance(w, MainWindow) and w.isVisible():
                w.close()
        return 0

    monkeypatch.setattr(QApplication, "exec", fake_exec)
    assert main_module.main(["--runs-dir", str(tmp_path / "elsewhere")]) == 0
    assert AppSettings().runs_dir == str(tmp_path / "elsewhere")


def test_a_sweep_without_a_named_best_worker_is_shown_by_the_worker_its_strategy_picks() -> None:
    """The comparison's sweep curve is the worker Sweep.result_worker chooses (the best last evaluation),
    not the worker with the best evaluation at any epoch."""
    from app.viewmodels.compare_runs import run_curves
    from core.strategies import get_strategy

    cfg = Config().replace("parallel", strategy="sweep", workers=2, sweep_lr=(0.1, 0.01))
    acc = {0: (0.9, 0.5), 1: (0.7, 0.8)}  # worker 0 peaks early, worker 1 ends best
    records: list[dict[str, Any]] = []
    for epoch in (1, 2):
        for w in (0, 1):
            records.append(
                {
                    "kind": "step",
                    "t": float(epoch),
                    "worker": w,
                    "epoch": epoch,
                    "step": epoch * 10,
                    "samples": epoch * 100,
                    "loss": 1.0 / epoch,
                    "lr": 0.1,
                }
            )
            records.append(
                {
                    "kind": "eval",
                    "t": epoch + 0.5,
                    "worker": w,
                    "epoch": epoch,
                    "samples": epoch * 100,
                    "val_accuracy": acc[w][epoch - 1],
                    "val_loss": 1.0 - acc[w][epoch - 1],
                }
            )
    strategy = get_strategy(cfg)
    chosen = strategy.result_worker_of(records)
    assert chosen == 1
    curves = run_curves(records, {}, separate=strategy.model_per_worker, result_worker=chosen)
    assert list(curves["val_accuracy"]["y"]) == [0.7, 0.8]


def test_a_raced_runs_lines_say_each_variant_at_each_rung_and_compare_names_it(qtbot: Any) -> None:
    from pathlib import Path

    from app.viewmodels.compare_runs import CompareRun
    from app.viewmodels.run_index import race_lines
    from app.views.compare import CompareView

    summary = {
        "races": [
            {
                "marker": "race: 2 variants from step 69, won by lr 0.15",
                "variants": [
                    {"label": "lr 0.15", "figures": [0.9611, 0.9722], "out": ""},
                    {"label": "as is", "figures": [0.95], "out": "rung 1: 0.9500 < 0.9611"},
                ],
            }
        ]
    }
    lines = race_lines(summary)
    assert lines == [
        "race: 2 variants from step 69, won by lr 0.15",
        "  lr 0.15: 0.9611 0.9722",
        "  as is: 0.9500 (rung 1: 0.9500 < 0.9611)",
    ]
    assert race_lines({}) == [] and race_lines({"races": ["junk"]}) == []
    view = CompareView()
    qtbot.addWidget(view)
    runs = [
        CompareRun(Path("/runs/a"), "a", {}, summary),
        CompareRun(Path("/runs/b"), "b", {}, {}),
    ]
    view.show_runs(runs)
    name = view.table_best.item(0, 0)
    assert name.text() == "a  (raced ×1)" and name.toolTip().splitlines()[1:] == lines
    assert view.table_best.item(1, 0).text() == "b"
