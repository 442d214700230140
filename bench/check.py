"""The benchmark guard: the ratios that matter, each against its floor in bench/floors.json.

    .venv/bin/python bench/check.py [--only NAME,...] [--record] [--list]

Runs the benchmark scripts of bench/ at quick settings (a few minutes on 2 cores), each with
``--json`` so that their figures are read, not parsed from print-outs, and prints one line per
figure: its name, the value measured, its floor and OK or FELL. Every figure is a ratio of two
things measured in the same run (ours against a reference), so a machine's speed cancels out.
A figure whose ``better`` is "lower" has a ceiling, not a floor: it falls when it rises above it.

Exit status: 1 if any figure fell or could not be measured, else 0. ``--only`` runs the figures
named (and only the scripts they need); ``--record`` appends what was measured to each figure's
history in floors.json (the date and the machine's cores), and never moves a floor: a floor is
set by hand, from a figure's history on a quiet machine with a margin for noise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FLOORS = HERE / "floors.json"

Reader = Callable[[Any], float]


@dataclass(frozen=True)
class Job:
    """One script at its quick settings; it writes its figures to the file given after ``--json``."""

    script: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Figure:
    job: str
    read: Reader


def _serve(data: dict[str, Any]) -> float:
    rps = {(p["server"], p["clients"]): p["rps"] for p in data["points"] if p["model"] == "mlp"}
    return float(rps[("traindesk", 64)] / rps[("constant", 64)])


def _predict(data: dict[str, Any]) -> dict[str, float]:
    return {c["workers"]: c["median_s"] for c in data["cases"]}


def _memory(command: str) -> Reader:
    def read(data: dict[str, Any]) -> float:
        return float(next(p["peak_x_data"] for p in data["points"] if p["command"] == command))

    return read


JOBS: dict[str, Job] = {
    "serve": Job(
        "serve_load.py",
        ("--models", "mlp", "--servers", "traindesk,constant", "--clients", "64", "--duration", "4"),
    ),
    "hogwild": Job("hogwild_reference.py", ("--only", "mlp", "--repeats", "3")),
    "engine": Job(
        "engine_vs_bare.py", ("--only", "digits-mlp", "--quick", "--set", "train.epochs=50", "--repeats", "3")
    ),
    "predict": Job(
        "predict_throughput.py",
        ("--rows", "200000", "--formats", "onnx", "--input", "csv", "--workers", "auto,1,2", "--repeat", "3"),
    ),
    "csv": Job("csv_load.py", ("--rows", "300000", "--repeat", "3", "--no-loadtxt")),
    "images": Job(
        "predict_images.py",
        ("--counts", "200,600", "--formats", "onnx", "--bare", "200", "--dir", "/tmp/traindesk-bench-check-photos"),
    ),
    "memory": Job(
        "memory_growth.py",
        (
            *("--rows", "3000000", "--formats", "csv", "--predict", "csv", "--predict-workers", "1"),
            *("--dir", "/tmp/traindesk-bench-check-tables"),
        ),
    ),
}

FIGURES: dict[str, Figure] = {
    "serve_vs_constant": Figure("serve", _serve),
    "hogwild_vs_hand_written": Figure("hogwild", lambda d: d["mlp_vs_hand"]),
    "single_vs_bare_loop": Figure(
        "engine", lambda d: next(v for k, v in d["digits-mlp"].items() if k.startswith("single_vs_bare"))
    ),
    "predict_workers_2_vs_1": Figure("predict", lambda d: _predict(d)["1"] / _predict(d)["2"]),
    "predict_default_vs_faster": Figure(
        "predict", lambda d: min(_predict(d)["1"], _predict(d)["2"]) / _predict(d)["auto"]
    ),
    "csv_numeric_vs_pyarrow": Figure("csv", lambda d: d["numeric"]["vs_pyarrow_median"]),
    "csv_mixed_vs_pyarrow": Figure("csv", lambda d: d["mixed"]["vs_pyarrow_median"]),
    "images_vs_bare_timm": Figure("images", lambda d: d["onnx"]["vs_bare"]),
    "images_peak_growth": Figure("images", lambda d: d["onnx"]["peak_growth"]),
    "memory_train_csv_vs_data": Figure("memory", _memory("train csv")),
    "memory_predict_csv_vs_data": Figure("memory", _memory("predict csv, table model")),
}


@dataclass(frozen=True)
class Verdict:
    name: str
    measured: float | None  # None: the figure could not be measured
    floor: float
    better: str

    @property
    def fell(self) -> bool:
        if self.measured is None:
            return True
        return self.measured < self.floor if self.better == "higher" else self.measured > self.floor

    def line(self) -> str:
        shown = "—" if self.measured is None else f"{self.measured:.2f}"
        bound = "floor" if self.better == "higher" else "ceiling"
        state = "FELL" if self.fell else "OK"
        return f"{self.name:<30} {shown:>8}   {bound} {self.floor:<6.2f} {state}"


def load_floors(path: Path = FLOORS) -> dict[str, dict[str, Any]]:
    floors = json.loads(path.read_text(encoding="utf-8"))
    for name, entry in floors.items():
        if entry.get("better") not in ("higher", "lower"):
            raise SystemExit(f'{path}: {name}: \'better\' must be "higher" or "lower", not {entry.get("better")!r}')
        if not isinstance(entry.get("floor"), (int, float)):
            raise SystemExit(f"{path}: {name}: 'floor' must be a number")
    return floors


def judge(measured: dict[str, float | None], floors: dict[str, dict[str, Any]]) -> tuple[list[Verdict], int]:
    """Each measured figure against its floor; the exit status is 1 when any fell or is missing."""
    verdicts = []
    for name, value in measured.items():
        if name not in floors:
            raise SystemExit(f"{name}: no floor in {FLOORS.name}; add one before checking it")
        verdicts.append(Verdict(name, value, float(floors[name]["floor"]), floors[name]["better"]))
    return verdicts, int(any(v.fell for v in verdicts))


def record(measured: dict[str, float | None], floors: dict[str, dict[str, Any]], path: Path = FLOORS) -> None:
    """Appends the measured values to each figure's history; the floors stay where they are."""
    today = datetime.date.today().isoformat()
    machine = f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end"
    for name, value in measured.items():
        if value is not None:
            floors[name]["history"].append({"date": today, "value": round(value, 3), "machine": machine})
    path.write_text(json.dumps(floors, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def run_job(name: str, job: Job, tmp: Path) -> Any:
    """Runs one script (its print-out passes through) and returns what it wrote, or None if it failed."""
    out = tmp / f"{name}.json"
    cmd = [sys.executable, str(HERE / job.script), *job.args, "--json", str(out)]
    print(f"\n# {name}: python bench/{job.script} {' '.join(job.args)}", flush=True)
    t0 = time.perf_counter()
    code = subprocess.call(cmd, cwd=HERE.parent, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    print(f"({time.perf_counter() - t0:.0f} s, exit {code})", flush=True)
    if code != 0 or not out.exists():
        return None
    return json.loads(out.read_text())


def measure(names: list[str], tmp: Path) -> dict[str, float | None]:
    results: dict[str, Any] = {}
    for job in dict.fromkeys(FIGURES[n].job for n in names):
        results[job] = run_job(job, JOBS[job], tmp)
    measured: dict[str, float | None] = {}
    for name in names:
        data = results[FIGURES[name].job]
        try:
            measured[name] = None if data is None else float(FIGURES[name].read(data))
        except (KeyError, StopIteration, ZeroDivisionError) as exc:
            print(f"{name}: not in the script's figures ({exc!r})", file=sys.stderr)
            measured[name] = None
    return measured


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated figure names (see --list)")
    ap.add_argument("--record", action="store_true", help="append the measured values to floors.json's history")
    ap.add_argument("--list", action="store_true", help="print the figures and their floors, run nothing")
    args = ap.parse_args(argv)
    floors = load_floors()
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise SystemExit(f"--only: no figure {', '.join(unknown)}; the figures are {', '.join(FIGURES)}")
    if args.list:
        for name in names:
            entry = floors[name]
            print(f"{name:<30} {entry['better']:<6} {entry['floor']:<6} {entry['what']}")
        return 0
    t0 = time.perf_counter()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="traindesk-check-") as tmp:
        measured = measure(names, Path(tmp))
    verdicts, status = judge(measured, floors)
    print(
        f"\n## bench-check: {len(verdicts)} figure(s), {time.perf_counter() - t0:.0f} s; "
        f"{os.cpu_count()} cores, load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    for verdict in verdicts:
        print(verdict.line())
    fell = [v.name for v in verdicts if v.fell]
    print(f"fell: {', '.join(fell)}" if fell else "nothing fell")
    if args.record:
        record(measured, floors)
        print(f"recorded in {FLOORS.relative_to(HERE.parent)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
