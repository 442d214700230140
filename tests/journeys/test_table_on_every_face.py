"""Journeys: a table as users bring it, trained at defaults, then every face of its one model, agreeing.

For each kind of table (tests/journey_tables.py: text, number and yes/no columns with empty cells; a long-tailed
regression with far outliers and rows of zeros; a 10:1 class split; an all-number table; free text and
timestamps, each carrying half the class) the test trains with
only ``data.source`` and ``data.target`` set, and checks that the run's figure (summary.json's result, the log's
end line, the Runs table's row) is what ``traindesk evaluate`` measures of the default checkpoint; that every
export predicts what the run predicts; and that ``traindesk serve`` answers raw rows (shuffled keys, empty
cells, an unseen category, extra keys) exactly as ``traindesk predict`` answers the same rows of a CSV.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core import cli
from core.config import Config, apply_overrides
from core.data import load_data
from core.session import Session
from core.training.validation import result_line
from tests import journey_tables as jt
from tests.core.services.serve.test_serve import serving

FORMATS = ("safetensors", "state-dict", "torch-export", "onnx")


def train_at_defaults(csv_path: Path, target: str, runs_dir: Path) -> Session:
    cfg = apply_overrides(Config(), [f'data.source="csv:{csv_path}"', f"data.target={target}"])
    session = Session(cfg, runs_dir=runs_dir)
    session.start()
    if session.wait(600) is None:
        session.stop(5)
        pytest.fail("the run did not finish in time")
    assert session.error is None, session.error
    assert session.summary is not None and session.summary["status"] == "finished"
    return session


def baseline(session: Session) -> float:
    """scikit-learn's HistGradientBoosting on the run's own split: R², or accuracy."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.metrics import r2_score

    cfg = session.config
    data = load_data(cfg.data, seed=cfg.train.seed, share=False, task=cfg.train.task)
    xtr, ytr = data.train.x.numpy(), data.train.y.numpy()
    xva, yva = data.val.x.numpy(), data.val.y.numpy()
    k = len(data.info.categories)
    categorical = [False] * (xtr.shape[1] - k) + [True] * k
    if data.info.task == "regression":
        reg = HistGradientBoostingRegressor(categorical_features=categorical, random_state=0).fit(xtr, ytr)
        return float(r2_score(yva, reg.predict(xva)))
    clf = HistGradientBoostingClassifier(categorical_features=categorical, random_state=0).fit(xtr, ytr)
    return float((clf.predict(xva) == yva).mean())


def raw_rows(header: list[str], rows: list[list[Any]], target: str, unseen: tuple[str, str] | None) -> list[dict]:
    """The rows as a client sends them: keys shuffled, empty cells as "" or null or left out, numbers as
    numbers, an extra key, one unseen category."""
    rng = random.Random(1)
    out = []
    for i, cells in enumerate(rows):
        pairs = [(h, v) for h, v in zip(header, cells) if h != target]
        row: dict[str, Any] = {}
        for h, v in pairs:
            if v == "":
                choice = i % 3
                if choice == 0:
                    row[h] = ""
                elif choice == 1:
                    row[h] = None
                continue  # choice 2: the key is left out
            try:
                row[h] = float(v) if not v.isalpha() else v
            except ValueError:
                row[h] = v
        items = list(row.items())
        rng.shuffle(items)
        row = dict(items)
        row["comment"] = "ignored"
        out.append(row)
    if unseen is not None:
        out[0][unseen[0]] = unseen[1]
    return out


def as_csv(path: Path, header: list[str], rows: list[dict[str, Any]], target: str) -> Path:
    """The same rows as a CSV (empty cells for missing values) for ``traindesk predict``."""
    names = [h for h in header if h != target]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(names)
        for row in rows:
            w.writerow(["" if row.get(h) is None else row[h] for h in names])
    return path


def predicted(path: Path, classes: list[str] | None) -> np.ndarray:
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    if classes is None:
        value = [k for k in rows[0] if k != "id"][0]
        return np.array([[float(r[value])] for r in rows])
    return np.array([[float(r[f"prob_{c}"]) for c in classes] for r in rows])


def answers(body: dict[str, Any], classes: list[str] | None) -> np.ndarray:
    if classes is None:
        return np.array([[p["value"]] for p in body["predictions"]])
    return np.array([[p["probabilities"][c] for c in classes] for p in body["predictions"]])


def close(a: np.ndarray, b: np.ndarray, regression: bool, scale: float = 0.0) -> bool:
    """Probabilities within 1e-6; values within 1e-5 of themselves, or of ``scale`` (another runtime's float32
    arithmetic moves a standardised output by ~1e-7, which the target's spread multiplies)."""
    if not regression:
        return bool(np.allclose(a, b, atol=1e-6))
    return bool((np.abs(a - b) <= 1e-5 * np.maximum(np.abs(b), scale)).all())


TABLES = {
    # kind: (generator, rows, target, an unseen (column, value), what the model must reach against the baseline)
    "census": (jt.census, 20000, "species", ("island", "Atlantis"), 0.035),
    "gems": (jt.gems, 50000, "price", ("cut", "Flawless"), 0.03),
    "skewed": (jt.skewed, 6000, "churned", ("plan", "enterprise"), None),
    "numbers": (jt.numbers, 4000, "label", None, None),
    "tickets": (jt.tickets, 3000, "urgent", None, None),
}


def accuracy_without(run_dir: Path, tmp_path: Path, blank: str | None) -> float:
    """The run's accuracy on 400 new tickets with one column's cells blanked (None: as they are)."""
    header, rows = jt.tickets(400, seed=1)
    if blank is not None:
        j = header.index(blank)
        rows = [[("" if k == j else v) for k, v in enumerate(r)] for r in rows]
    source = jt.write_csv(tmp_path / f"tickets-{blank}.csv", header, rows)
    out = tmp_path / f"tickets-{blank}-predicted.csv"
    assert cli.main(["predict", str(run_dir), str(source), "--out", str(out), "--workers", "1"]) == 0
    with out.open() as fh:
        got = [r["predicted"] for r in csv.DictReader(fh)]
    return float(np.mean([g == r[-1] for g, r in zip(got, rows)]))


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(TABLES))
def test_a_table_trained_at_defaults_is_one_model_on_every_face(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, n, target, unseen, within = TABLES[kind]
    header, rows = make(n, seed=0)
    source = jt.write_csv(tmp_path / f"{kind}.csv", header, rows)
    session = train_at_defaults(source, target, tmp_path / "runs")
    run_dir = session.run_dir
    assert run_dir is not None
    summary = json.loads((run_dir / "summary.json").read_text())
    regression = summary["task"] == "regression"
    assert not [line for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"recovery"' in line], (
        "the defaults diverged"
    )

    # quality at defaults, against gradient boosting on the same split
    result = summary["result"]
    if within is not None:
        figure = result["val_r2"] if regression else result["val_accuracy"]
        assert figure >= baseline(session) - within, (figure, kind)

    # one figure: summary.json's result, evaluate of the default checkpoint, the log's end line, the Runs table
    assert result["checkpoint"] == "best" and result["select_by"] == (
        "val_rmse" if regression else "val_balanced_accuracy" if kind == "skewed" else "val_accuracy"
    )
    capsys.readouterr()
    assert cli.main(["evaluate", str(run_dir), "--json", "--no-write"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    if regression:
        assert evaluated["r2"] == pytest.approx(result["val_r2"], abs=1e-6)
    else:
        assert evaluated["accuracy"] == pytest.approx(result["val_accuracy"], abs=1e-6)
    from app.viewmodels.run_index import RunIndex

    [row] = [r for r in RunIndex(run_dir.parent).scan() if r.path == run_dir]
    assert row.metric == result["select_by"]
    assert row.best_figure == pytest.approx(result[result["select_by"]], abs=1e-6)
    assert result_line(summary) and "checkpoints/best.pt" in result_line(summary)

    if kind == "tickets":  # the words and the hour are both learned: each column blanked costs accuracy
        log = (run_dir / "metrics.jsonl").read_text()
        assert "column 'message' read as free text" in log and "column 'sent' read as dates" in log
        full = accuracy_without(run_dir, tmp_path, None)
        assert full >= 0.95, full
        for column in ("message", "sent"):
            assert accuracy_without(run_dir, tmp_path, column) <= full - 0.15, column

    # 50 raw rows as a client has them, the same rows as a CSV
    body_rows = raw_rows(header, rows[:50], target, unseen)
    new_csv = as_csv(tmp_path / "new.csv", header, body_rows, target)
    classes = None if regression else list(session.info.class_names)
    out = tmp_path / "run.csv"
    assert cli.main(["predict", str(run_dir), str(new_csv), "--out", str(out), "--workers", "1"]) == 0
    want = predicted(out, classes)
    assert len(want) == 50

    # every export predicts what the run predicts
    for fmt in FORMATS:
        folder = tmp_path / "exports" / fmt
        folder.mkdir(parents=True)
        assert cli.main(["export", str(run_dir), "--format", fmt, "--out", str(folder)]) == 0, fmt
        [made] = [p for p in folder.iterdir() if p.name.startswith("model.") and p.suffix != ".json"]
        got_path = tmp_path / f"{fmt}.csv"
        assert cli.main(["predict", str(made), str(new_csv), "--out", str(got_path), "--workers", "1"]) == 0, fmt
        spread = float(np.std(want)) if regression else 0.0
        assert close(predicted(got_path, classes), want, regression, spread), fmt

    # serve: the raw rows, answered as predict answered them; the example of its description answers too
    with serving(run_dir, tmp_path, "--workers", "1") as server:
        server.wait_ready()
        r = server.post("/predict", json={"rows": body_rows})
        assert r.status_code == 200, r.text
        assert close(answers(r.json(), classes), want, regression)
        if unseen is not None:
            assert r.json()["unseen"] == {unseen[0]: 1}
            assert server.metric("traindesk_serve_unseen_values_total") == 1
        spec = server.get("/openapi.json").json()
        described = {c["name"]: c for c in spec["x-traindesk"]["columns"]}
        assert set(described) == {h for h in header if h != target and h != "id"}
        assert not any(name.endswith("_missing") for name in described)
        for c in described.values():
            assert c["kind"] in ("number", "category", "bool", "datetime", "text")
            assert c["kind"] != "category" or c["levels"]
        example = spec["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]["example"]
        assert example == spec["x-traindesk"]["example"]
        assert server.post("/predict", json=example).status_code == 200
        wrong = dict(body_rows[2])
        number = next(c["name"] for c in described.values() if c["kind"] == "number")
        wrong[number] = "long"
        bad = server.post("/predict", json={"rows": body_rows[:2] + [wrong]})
        assert bad.status_code == 422
        assert bad.json()["error"] == f"rows[2]: column {number!r}: 'long' (text) is not a number"
