"""The benchmark guard (bench/check.py): its floors file's shape and its verdicts, on made-up figures (no benchmark runs)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_check", ROOT / "bench" / "check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


check = _load_check()


def test_every_figure_has_a_floor_with_a_direction_and_a_history() -> None:
    floors = json.loads((ROOT / "bench" / "floors.json").read_text(encoding="utf-8"))
    assert sorted(floors) == sorted(check.FIGURES)
    for name, entry in floors.items():
        assert entry["better"] in ("higher", "lower"), name
        assert isinstance(entry["floor"], (int, float)) and entry["floor"] > 0, name
        assert entry["what"] and entry["set_from"], name
        assert isinstance(entry["history"], list), name
        for point in entry["history"]:
            assert re.fullmatch(r"\d{4}-\d\d-\d\d", point["date"]) and point["machine"], name
            assert isinstance(point["value"], (int, float)), name
        quiet = [p["value"] for p in entry["history"] if "quiet" in p["machine"]]
        if entry["better"] == "higher":  # a floor a quiet machine's figure would fail at random is a bug
            assert all(v > entry["floor"] for v in quiet), name
        else:
            assert all(v < entry["floor"] for v in quiet), name


def test_every_figure_comes_from_a_script_that_writes_json() -> None:
    for name, figure in check.FIGURES.items():
        job = check.JOBS[figure.job]
        script = ROOT / "bench" / job.script
        assert script.exists(), name
        assert '"--json"' in script.read_text(encoding="utf-8"), f"{job.script} has no --json"


def test_a_figure_below_its_floor_or_above_its_ceiling_fell_and_the_status_is_1() -> None:
    floors = {
        "up": {"better": "higher", "floor": 1.0, "history": []},
        "down": {"better": "lower", "floor": 2.0, "history": []},
    }
    verdicts, status = check.judge({"up": 1.1, "down": 1.9}, floors)
    assert [v.fell for v in verdicts] == [False, False] and status == 0
    verdicts, status = check.judge({"up": 0.9, "down": 1.9}, floors)
    assert [v.fell for v in verdicts] == [True, False] and status == 1
    assert verdicts[0].line().split() == ["up", "0.90", "floor", "1.00", "FELL"]
    verdicts, status = check.judge({"up": 1.1, "down": 2.1}, floors)
    assert [v.fell for v in verdicts] == [False, True] and status == 1
    assert verdicts[1].line().split() == ["down", "2.10", "ceiling", "2.00", "FELL"]
    verdicts, status = check.judge({"up": None}, floors)  # a script that failed
    assert verdicts[0].fell and status == 1


def test_a_figure_without_a_floor_is_an_error_that_names_it() -> None:
    with pytest.raises(SystemExit, match="new_ratio: no floor"):
        check.judge({"new_ratio": 1.0}, {})


def test_the_ratios_are_read_from_what_the_scripts_write() -> None:
    seconds = {"auto": 1.0, "1": 1.5, "2": 1.0}
    cases = [{"input": "in.csv", "model": "onnx", "workers": w, "median_s": s, "best_s": s} for w, s in seconds.items()]
    assert check.FIGURES["predict_workers_2_vs_1"].read({"cases": cases}) == pytest.approx(1.5)
    assert check.FIGURES["predict_default_vs_faster"].read({"cases": cases}) == pytest.approx(1.0)
    points = [
        {"model": "mlp", "server": s, "clients": 64, "rps": r} for s, r in (("traindesk", 600), ("constant", 1000))
    ]
    assert check.FIGURES["serve_vs_constant"].read({"points": points}) == pytest.approx(0.6)
    memory = {"points": [{"command": "train csv", "rows": 3, "peak_x_data": 2.8, "wall_s": 1.0}]}
    assert check.FIGURES["memory_train_csv_vs_data"].read(memory) == pytest.approx(2.8)


def test_record_appends_to_the_history_and_leaves_the_floor(tmp_path: Path) -> None:
    floors = {"up": {"better": "higher", "floor": 1.0, "what": "w", "set_from": "s", "history": []}}
    path = tmp_path / "floors.json"
    check.record({"up": 0.5}, floors, path)
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written["up"]["floor"] == 1.0
    assert [p["value"] for p in written["up"]["history"]] == [0.5]


def test_only_with_an_unknown_figure_says_which() -> None:
    with pytest.raises(SystemExit, match="no figure nonsense"):
        check.main(["--only", "nonsense", "--list"])
