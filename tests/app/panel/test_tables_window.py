"""The window on real tables: the column list with editable kinds, and the task the target implies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.panel.panel import ConfigPanel
from core.config import Config


def _wait_idle(qtbot: Any, panel: ConfigPanel) -> None:
    qtbot.waitUntil(lambda: not panel._refresh_timer.isActive() and not panel._calls.busy, timeout=20_000)


@pytest.fixture
def panel(qtbot: Any) -> Any:
    p = ConfigPanel()
    qtbot.addWidget(p)
    yield p
    p.shutdown()


def _mixed_csv(path: Path, float_target: bool = False) -> Path:
    """24 rows: a number with 3 empty cells, a text category of 3 levels (one empty), a yes/no column, a label."""
    lines = ["size,island,tagged,label"]
    for i in range(24):
        size = "" if i % 8 == 0 else f"{1.5 + i * 0.25:g}"
        island = "" if i == 5 else ("Biscoe", "Dream", "Torgersen")[i % 3]
        label = f"{i * 0.37:.2f}" if float_target else ("a", "b", "c")[i % 3]
        lines.append(f"{size},{island},{'yes' if i % 2 else 'no'},{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _rows(panel: ConfigPanel) -> dict[str, tuple[str, str, str]]:
    t = panel.table_columns
    return {
        t.item(r, 0).text(): (t.cellWidget(r, 1).currentText(), t.item(r, 2).text(), t.item(r, 3).text())
        for r in range(t.rowCount())
    }


def test_columns_list_kinds_missing_and_levels_and_a_combo_writes_data_columns(
    qtbot: Any, panel: ConfigPanel, tmp_path: Path
) -> None:
    path = _mixed_csv(tmp_path / "mixed.csv")
    panel.set_config(Config().replace("data", source=f"csv:{path}", target="label"))
    qtbot.waitUntil(lambda: panel.table_columns.rowCount() == 3, timeout=20_000)
    assert _rows(panel) == {
        "size": ("number", "3", ""),
        "tagged": ("bool", "0", ""),
        "island": ("category", "1", "3: Biscoe, Dream, Torgersen"),
    }  # the levels by name
    assert panel.table_columns.isVisibleTo(panel)
    assert panel.label_dataset_summary.text() == "24 samples, 4 features, 3 classes"  # the columns are in the list
    assert panel.label_target_task.text() == "classification: 3 classes"
    assert panel.config().data.columns == ()

    combo = next(
        panel.table_columns.cellWidget(r, 1)
        for r in range(3)
        if panel.table_columns.cellWidget(r, 1).property("column") == "tagged"
    )
    combo.setCurrentText("ignore")
    assert dict(panel.config().data.columns) == {"tagged": "ignore"}
    # The list is described again with the override: the engine's schema now ignores the column.
    qtbot.waitUntil(
        lambda: _rows(panel).get("tagged", ("",))[0] == "ignore" and "set in data.columns" in _rows(panel)["tagged"][2],
        timeout=20_000,
    )
    _wait_idle(qtbot, panel)

    # A kind the engine refuses: the one-line error in the summary, the list kept so the change can be undone.
    size = next(
        panel.table_columns.cellWidget(r, 1)
        for r in range(3)
        if panel.table_columns.cellWidget(r, 1).property("column") == "size"
    )
    size.setCurrentText("category")  # 21 distinct values in 24 rows: more levels than the rows allow
    qtbot.waitUntil(lambda: "⚠" in panel.label_dataset_summary.text(), timeout=20_000)
    assert "size" in panel.label_dataset_summary.text()
    assert panel.table_columns.rowCount() == 3
    size.setCurrentText("number")
    qtbot.waitUntil(
        lambda: "⚠" not in panel.label_dataset_summary.text() and "samples" in panel.label_dataset_summary.text(),
        timeout=20_000,
    )
    assert dict(panel.config().data.columns) == {"tagged": "ignore", "size": "number"}
    _wait_idle(qtbot, panel)

    # A loaded config's overrides show in the combos and come back out of config().
    panel.set_config(Config().replace("data", source=f"csv:{path}", target="label", columns=(("island", "ignore"),)))
    qtbot.waitUntil(lambda: _rows(panel).get("island", ("",))[0] == "ignore", timeout=20_000)
    assert _rows(panel)["tagged"][0] == "bool"
    assert dict(panel.config().data.columns) == {"island": "ignore"}
    _wait_idle(qtbot, panel)
    panel.set_mode("view")  # a past run's settings: its column kinds are shown, not edited
    assert not any(panel.table_columns.cellWidget(r, 1).isEnabled() for r in range(3))
    panel.set_mode("edit")
    assert all(panel.table_columns.cellWidget(r, 1).isEnabled() for r in range(3))


def test_target_chooser_says_regression_for_a_float_target(qtbot: Any, panel: ConfigPanel, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow.csv as pacsv

    csv = _mixed_csv(tmp_path / "float.csv", float_target=True)
    parquet = tmp_path / "float.parquet"
    pq.write_table(pacsv.read_csv(csv), parquet)
    panel.set_config(Config().replace("data", source=f"parquet:{parquet}", target="label"))
    qtbot.waitUntil(lambda: panel.label_target_task.text().startswith("regression"), timeout=20_000)
    assert panel.label_target_task.text() == "regression: the target holds fractional numbers"
    assert _rows(panel)["size"] == ("number", "3", "")
    _wait_idle(qtbot, panel)
    panel.combo_dataset.setCurrentIndex(panel.combo_dataset.findData("builtin:digits"))
    qtbot.waitUntil(lambda: "1,797 samples" in panel.label_dataset_summary.text(), timeout=20_000)
    assert panel.table_columns.rowCount() == 0 and not panel.table_columns.isVisibleTo(panel)
    assert panel.label_target_task.text() == ""
    _wait_idle(qtbot, panel)


def _regression_eval(actual: list[float], predicted: list[float]) -> dict[str, Any]:
    from core.training.losses import regression_report

    return {
        "task": "regression",
        **regression_report(predicted, actual),
        "checkpoint": {"which": "last"},
        "pairs": [[a, p] for a, p in zip(actual, predicted)],
        "pairs_axes": "actual, predicted",
    }


def test_evaluate_view_plots_predicted_vs_actual_and_residuals_for_regression(qtbot: Any) -> None:
    import numpy as np

    from app.views.evaluate import EvaluateView

    view = EvaluateView()
    qtbot.addWidget(view)
    view.show()
    actual = [1.0, 2.0, 3.0, 4.0, 5.0]
    predicted = [1.5, 1.5, 3.25, 4.0, 4.0]
    full = _regression_eval(actual, predicted)
    view.show_evaluation(full)
    assert view.regression_panel.isVisible() and not view.table_confusion.isVisible()
    x, y = view.scatter_actual.getData()
    assert np.allclose(x, actual) and np.allclose(y, predicted)
    x, y = view.scatter_residuals.getData()
    assert np.allclose(x, predicted) and np.allclose(y, [-0.5, 0.5, -0.25, 0.0, 1.0])
    metrics = {
        view.table_metrics.item(r, 0).text(): view.table_metrics.item(r, 1).text()
        for r in range(view.table_metrics.rowCount())
    }
    assert metrics == {
        "RMSE": f"{full['rmse']:.4g}",
        "MAE": f"{full['mae']:.4g}",
        "R²": f"{full['r2']:.4g}",
        "samples": "5",
    }
    assert metrics["MAE"] == "0.45"  # (0.5 + 0.5 + 0.25 + 0 + 1) / 5
    from app.plots.live import PlotColors
    from app.shell.theme import style_plot_widget

    style_plot_widget(view.plot_residuals, PlotColors(background="#202020", foreground="#dddddd"))
    assert view.plot_residuals.backgroundBrush().color().name() == "#202020"  # the window's theme applies

    # A classification run afterwards: today's views, the regression ones emptied and hidden.
    view.show_evaluation(
        {
            "task": "classification",
            "accuracy": 0.5,
            "n": 2,
            "macro": {"f1": 0.5},
            "misclassified_total": 1,
            "confusion": [[1, 0], [1, 0]],
            "per_class": [
                {"class": "a", "precision": 0.5, "recall": 1.0, "f1": 0.667, "support": 1},
                {"class": "b", "precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1},
            ],
        }
    )
    assert view.table_confusion.isVisible() and not view.regression_panel.isVisible()
    assert view.table_per_class.rowCount() == 2 and view.table_metrics.rowCount() == 0
    assert len(view.scatter_actual.getData()[0]) == 0


def test_validation_plot_shows_rmse_for_a_regression_run(qtbot: Any) -> None:
    import numpy as np

    from app.plots.live import ValPlot
    from app.viewmodels.run_data import RunData

    data = RunData()
    plot = ValPlot(data)
    qtbot.addWidget(plot)
    changes = data.add(
        [
            {
                "kind": "eval",
                "t": 100.0 + e,
                "worker": 0,
                "epoch": e,
                "val_loss": 1.0 / e,
                "val_rmse": 2.0 / e,
                "val_mae": 1.5 / e,
                "val_r2": 0.5,
            }
            for e in (1, 2, 3)
        ]
    )
    plot.refresh(changes)
    assert data.task == "regression"
    assert plot.acc_plot.titleLabel.toolTip() == "Validation RMSE"
    assert plot.acc_plot.getAxis("left").labelText == "RMSE"
    assert np.allclose(plot.acc_curves[0].yData, [2.0, 1.0, 2.0 / 3])
    assert plot.csv_header()[-1] == "val_rmse"

    # A classification run in the same plot: accuracy again, limited to [0, 1].
    data = RunData()
    plot.reset(data)
    plot.refresh(data.add([{"kind": "eval", "t": 1.0, "worker": 0, "epoch": 1, "val_loss": 0.7, "val_accuracy": 0.8}]))
    assert plot.acc_plot.titleLabel.toolTip() == "Validation accuracy"
    assert plot.acc_plot.getAxis("left").labelText == "accuracy"
    assert np.allclose(plot.acc_curves[0].yData, [0.8])


def test_a_mixed_table_trains_from_the_window_as_it_is(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    """Text categories, a yes/no column, empty cells and a text target: Start trains it, no edit to the file."""
    import json

    rows = ["size,island,tagged,label"]
    for i in range(120):
        size = "" if i % 10 == 0 else f"{1.5 + (i % 7) * 0.25:g}"
        island = "" if i % 11 == 0 else ("Biscoe", "Dream", "Torgersen")[i % 3]
        rows.append(f"{size},{island},{'yes' if i % 2 else 'no'},{('adelie', 'gentoo')[(i % 3 == 0) ^ (i % 2)]}")
    path = tmp_path / "penguins.csv"
    path.write_text("\n".join(rows) + "\n")
    window = make_window()
    window.panel.set_config(
        Config()
        .replace("data", source=f"csv:{path}", target="label")
        .replace("train", epochs=3)
        .replace("parallel", strategy="single", workers=1)
    )
    qtbot.waitUntil(lambda: window.panel.table_columns.rowCount() == 3, timeout=30_000)
    window.action_start.trigger()
    qtbot.waitUntil(lambda: window.controller.ended, timeout=120_000)
    summary = json.loads((window.controller.run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["epochs_done"] == 3, summary.get("error")
    assert summary["final"]["val_accuracy"] is not None


DIAMONDS = ("carat", "cut", "color", "clarity", "depth", "table", "price", "x", "y", "z")
CUTS = ("Fair", "Good", "Ideal", "Premium", "Very Good")


def _diamonds_csv(path: Path, rows: int = 40) -> Path:
    """Ten columns, none named label: three text categories, fractional numbers, an integer price."""
    lines = [",".join(DIAMONDS)]
    for i in range(rows):
        carat = 0.3 + i * 0.05
        clarity = ("I1", "SI1", "SI2", "VS1", "VS2", "VVS1", "VVS2", "IF")[i % 8]
        lines.append(
            f"{carat:.2f},{CUTS[i % 5]},{'DEFGHIJ'[i % 7]},{clarity},"
            f"{60 + i % 5 * 0.5:.1f},{55 + i % 4},{int(400 + 2900 * carat + 37 * (i % 3))},"
            f"{carat * 4:.2f},{carat * 4.1:.2f},{carat * 2.5:.2f}"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_tables_columns_are_listed_and_its_target_offered_from_them_before_any_target(
    qtbot: Any, panel: ConfigPanel, tmp_path: Path
) -> None:
    cfg = Config().replace("data", source=f"csv:{_diamonds_csv(tmp_path / 'diamonds.csv')}")
    assert cfg.data.target == "label"  # the default: not one of this table's columns
    panel.show_run_config(cfg, "a run")  # read-only: the columns are listed, nothing is proposed
    qtbot.waitUntil(lambda: panel.table_columns.rowCount() == len(DIAMONDS), timeout=20_000)
    rows = _rows(panel)
    assert list(rows) == list(DIAMONDS)
    assert rows["cut"] == ("category", "0", "5: " + ", ".join(CUTS)) and rows["price"] == ("number", "0", "")
    assert [panel.combo_target.itemText(i) for i in range(panel.combo_target.count())] == list(DIAMONDS)
    assert panel.combo_target.isEditable() and panel.combo_target.currentText() == "label"
    summary = panel.label_dataset_summary.text()
    assert summary == "40 rows, 10 columns; choose the target column" and "⚠" not in summary
    assert panel.label_target_task.text() == "pick the target column: the column to predict"
    _wait_idle(qtbot, panel)

    panel.restore_own_config()
    panel.set_config(cfg)  # the user's own settings: the obvious target is proposed, then the task follows
    qtbot.waitUntil(lambda: panel.label_target_task.text().startswith("regression"), timeout=20_000)
    assert panel.combo_target.currentText() == "price" and panel.config().data.target == "price"
    assert list(_rows(panel)) == [c for c in DIAMONDS if c != "price"]  # the target is not a feature
    assert panel.combo_target.count() == len(DIAMONDS)
    _wait_idle(qtbot, panel)
    panel.combo_target.setCurrentText("cut")  # another column picked; typing stays possible (editable)
    qtbot.waitUntil(lambda: panel.label_target_task.text() == "classification: 5 classes", timeout=20_000)
    assert panel.config().data.target == "cut" and "price" in _rows(panel)
    _wait_idle(qtbot, panel)


@pytest.mark.parametrize("size", [(1280, 800), (900, 600)])
def test_a_wide_table_fits_the_config_panel(
    qtbot: Any, make_window: Any, tmp_path: Path, size: tuple[int, int]
) -> None:
    from PySide6.QtCore import QCoreApplication, QPoint
    from PySide6.QtWidgets import QScrollArea, QWidget

    window = make_window()
    window.resize(*size)
    panel = window.panel
    panel.set_config(Config().replace("data", source=f"csv:{_diamonds_csv(tmp_path / 'diamonds.csv')}", target="price"))
    qtbot.waitUntil(lambda: panel.label_target_task.text().startswith("regression"), timeout=30_000)
    _wait_idle(qtbot, panel)
    QCoreApplication.processEvents()  # the layouts' pending requests
    view = window.findChild(QScrollArea, "config_scroll").viewport()
    assert panel.width() <= view.width()
    clipped = [
        f"{type(w).__name__} {w.objectName()!r}: x {w.mapTo(view, QPoint(0, 0)).x()}, width {w.width()}"
        for w in panel.findChildren(QWidget)
        if w.isVisible()
        and not 0 <= w.mapTo(view, QPoint(0, 0)).x() <= w.mapTo(view, QPoint(0, 0)).x() + w.width() <= view.width()
    ]
    assert clipped == [], f"{size}: panel {panel.width()} px in a {view.width()} px view"

    t = panel.table_columns  # every column in view (9 rows, the target aside), its levels named
    assert t.rowCount() == 9 and t.verticalScrollBar().maximum() == 0 and t.horizontalScrollBar().maximum() == 0
    cut = next(r for r in range(9) if t.item(r, 0).text() == "cut")
    assert t.item(cut, 3).text() == "5: " + ", ".join(CUTS) and t.item(cut, 3).toolTip() == "5 levels: " + ", ".join(
        CUTS
    )
    assert t.columnWidth(3) >= 50
    target = panel.combo_target
    assert target.width() >= 150 and target.width() >= target.fontMetrics().horizontalAdvance("flipper_length_mm")


def test_a_table_whose_description_fails_still_lists_its_columns_to_fix_it(
    qtbot: Any, panel: ConfigPanel, tmp_path: Path
) -> None:
    path = tmp_path / "people.csv"  # notes has no value at all: the engine refuses it and says to ignore it
    path.write_text("age,notes,label\n" + "\n".join(f"{20 + i},,{'ab'[i % 2]}" for i in range(40)) + "\n")
    panel.set_config(Config().replace("data", source=f"csv:{path}", target="label"))
    qtbot.waitUntil(lambda: panel.table_columns.rowCount() == 2, timeout=20_000)
    assert "⚠" in panel.label_dataset_summary.text() and "all missing" in panel.label_dataset_summary.text()
    assert list(_rows(panel)) == ["age", "notes"] and panel.combo_target.currentText() == "label"  # kept
    assert panel.label_target_task.text() == ""  # the summary says what is wrong
    notes = next(
        panel.table_columns.cellWidget(r, 1)
        for r in range(2)
        if panel.table_columns.cellWidget(r, 1).property("column") == "notes"
    )
    notes.setCurrentText("ignore")
    qtbot.waitUntil(lambda: panel.label_target_task.text() == "classification: 2 classes", timeout=20_000)
    assert "⚠" not in panel.label_dataset_summary.text() and dict(panel.config().data.columns) == {"notes": "ignore"}
    _wait_idle(qtbot, panel)


def test_free_text_and_dates_are_listed_with_what_they_become(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    import os

    from tests import journey_tables as jt

    header, rows = jt.tickets(120, seed=2)
    source = jt.write_csv(tmp_path / "tickets.csv", header, rows)
    window = make_window()
    window.resize(1280, 800)
    panel = window.panel
    panel.set_config(Config().replace("data", source=f"csv:{source}", target="urgent"))
    qtbot.waitUntil(lambda: panel.label_target_task.text().startswith("classification"), timeout=30_000)
    _wait_idle(qtbot, panel)
    t = panel.table_columns
    listed = {t.item(r, 0).text(): r for r in range(t.rowCount())}
    kinds = {name: t.cellWidget(r, 1).currentText() for name, r in listed.items()}
    assert kinds == {"amount": "number", "message": "text", "sent": "datetime"}
    assert t.item(listed["message"], 3).text() == "free text"
    assert "character n-grams" in t.item(listed["message"], 3).toolTip()
    assert t.item(listed["sent"], 3).text() == "dates, year first"
    combo = t.cellWidget(listed["sent"], 1)
    assert "datetime:dmy" in [combo.itemText(i) for i in range(combo.count())]
    assert "datetime:dmy" not in [t.cellWidget(listed["amount"], 1).itemText(i) for i in range(combo.count() - 2)]
    tuned = Config().replace("data", source=f"csv:{source}", target="urgent")
    panel.set_config(tuned.replace("model", text_encoder="org/encoder", finetune="full"))
    qtbot.waitUntil(lambda: t.rowCount() == 3 and t.item(listed["message"], 3) is not None, timeout=30_000)
    qtbot.waitUntil(lambda: "org/encoder" in t.item(listed["message"], 3).toolTip(), timeout=30_000)
    assert t.item(listed["message"], 3).text() == "free text, sentence encoder"
    assert "(fine-tuned)" in t.item(listed["message"], 3).toolTip()
    if os.environ.get("TRAINDESK_SHOT"):
        window.grab().save(os.environ["TRAINDESK_SHOT"])
