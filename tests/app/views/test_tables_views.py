"""The window's views on a model trained on a table with a numeric target (regression)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.views.evaluate import EvaluateView
from core.config import Config, apply_overrides
from core.session import Session


def test_evaluate_view_shows_regression_figures(qtbot: Any, tmp_path: Path) -> None:
    cfg = apply_overrides(Config(), ["data.source=builtin:diabetes", "parallel.strategy=single", "train.epochs=3"])
    session = Session(cfg, runs_dir=tmp_path)
    session.start()
    assert session.wait(120) == "finished"
    assert session.run_dir is not None
    view = EvaluateView()
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.evaluated, timeout=60_000) as blocker:
        view.load_run(session.run_dir)
    full = blocker.args[0]
    assert full["task"] == "regression" and full["n"] == 89
    text = view.label_summary.text()
    assert text.startswith("RMSE ") and f"R² {full['r2']:.3f}" in text
    assert view.table_confusion.rowCount() == 0 and view.table_per_class.rowCount() == 0


def test_predict_view_scores_a_regression_test_table(qtbot: Any) -> None:
    from app.views.predict import PredictView

    view = PredictView()
    qtbot.addWidget(view)
    view.show_test_evaluation({"rmse": 1.25, "mae": 0.5, "r2": 0.912, "n": 40})
    assert view.label_test.text() == "Test set: RMSE 1.25 · MAE 0.5 · R² 0.912 on 40 labelled samples"
    assert view.table_test_per_class.rowCount() == 0


def test_predict_view_names_a_table_models_raw_columns(qtbot: Any, tmp_path: Path) -> None:
    """Not the encoded features (a number's *_missing indicator), nor an ignored id: the columns a CSV needs."""

    from app.views.predict import PredictView
    from tests.trained_run import make_run

    rows = ["row_id,size,island,tagged,label"]
    for i in range(60):
        size = "" if i % 7 == 0 else f"{1.5 + (i % 9) * 0.25:g}"
        rows.append(
            f"{1000 + i},{size},{('Biscoe', 'Dream', 'Torgersen')[i % 3]},{'yes' if i % 2 else 'no'},"
            f"{('adelie', 'gentoo')[(i % 3 == 0) ^ (i % 2)]}"
        )
    (tmp_path / "penguins.csv").write_text("\n".join(rows) + "\n")
    run = make_run(tmp_path / "runs", source=f"csv:{tmp_path / 'penguins.csv'}", steps=5)
    view = PredictView()
    qtbot.addWidget(view)
    view.set_model(run)
    qtbot.waitUntil(lambda: view.label_columns.text() != "", timeout=30_000)
    assert view.label_columns.text() == "Takes 3 columns: size, island, tagged (a CSV is matched by these names)"
    assert view.label_columns.toolTip() == "size, island, tagged"
    view.wait(30.0)
