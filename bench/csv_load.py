"""CSV loading: TrainDesk's reader against numpy.loadtxt and pyarrow.csv on the same file.

    .venv/bin/python bench/csv_load.py [--rows 300000] [--features 32] [--repeat 5] [--table numeric|mixed|both]

The numeric file has ``--features`` float columns and an integer ``label``
column (about 100 MB at 300,000 x 32); the mixed one has 24 float columns,
one text column of five words and an integer ``label`` (numpy.loadtxt cannot
read it, so pyarrow alone is the reference there). "traindesk" is ``core.data``'s CSV source as
training reads it: every column read, kinds inferred, the schema fitted (medians,
statistics) and the rows encoded as float32, labels encoded, all checks included
(the split is not part of it). numpy.loadtxt and
pyarrow.csv.read_csv read the same file into arrays (pyarrow with its default
options: threads, type inference). Each case runs N rounds, round robin so
that each round sees the same load on a shared machine; the best and the
median of the N are printed, with their ratios to the fastest library reader.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.config import DataConfig
from core.data import fit_table, read_source


def traindesk_read(path: Path) -> np.ndarray:
    """The CSV source as training reads it: columns read, kinds inferred, schema fitted, rows encoded."""
    cfg = DataConfig(source=f"csv:{path}")
    raw = read_source(cfg)
    fit_table(raw, cfg, np.arange(len(raw.y)))
    assert raw.x is not None
    return raw.x


def make_csv(path: Path, rows: int, features: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (rows, features))
    y = rng.integers(0, 10, rows)
    with path.open("w") as fh:
        fh.write(",".join([f"f{i}" for i in range(features)] + ["label"]) + "\n")
        np.savetxt(fh, np.column_stack([x, y]), fmt=["%.8g"] * features + ["%d"], delimiter=",")


WORDS = np.array(["alpha", "beta", "gamma", "delta", "epsilon"])


def make_mixed_csv(path: Path, rows: int, features: int = 24) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (rows, features))
    words = WORDS[rng.integers(0, len(WORDS), rows)]
    y = rng.integers(0, 3, rows)
    with path.open("w") as fh:
        fh.write(",".join([f"f{i}" for i in range(features)] + ["word", "label"]) + "\n")
        for lo in range(0, rows, 50_000):
            numbers = np.char.mod("%.6g", x[lo : lo + 50_000])
            lines = [",".join(r) for r in numbers.tolist()]
            fh.write("".join(f"{a},{w},{b}\n" for a, w, b in zip(lines, words[lo : lo + 50_000], y[lo : lo + 50_000])))


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def compare(path: Path, numeric: bool, repeat: int, loadtxt: bool = True) -> dict[str, float]:
    """Prints each reader's best and median; returns TrainDesk's time over pyarrow's (best, median)."""
    cases: dict[str, Callable[[], object]] = {"traindesk (core.data csv source)": lambda: traindesk_read(path)}
    if numeric and loadtxt:
        cases["numpy.loadtxt"] = lambda: np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32)
    try:
        import pyarrow.csv as pacsv

        cases["pyarrow.csv.read_csv"] = lambda: pacsv.read_csv(path)
    except ModuleNotFoundError:
        print("pyarrow: not installed, skipped")
    for fn in cases.values():  # warm: imports and the page cache
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            times[name].append(timed(fn))
    best = {name: min(ts) for name, ts in times.items()}
    median = {name: statistics.median(ts) for name, ts in times.items()}
    libraries = [n for n in cases if not n.startswith("traindesk")]
    fast_best = min(best[n] for n in libraries)
    fast_median = min(median[n] for n in libraries)
    print(f"{'':<36} {'best s':>7} {'median s':>9}   vs fastest library reader (best / median)")
    for name in cases:
        print(
            f"{name:<36} {best[name]:>7.2f} {median[name]:>9.2f}   "
            f"{best[name] / fast_best:>5.2f}x / {median[name] / fast_median:.2f}x"
        )
    ours, arrow = "traindesk (core.data csv source)", "pyarrow.csv.read_csv"
    if arrow not in cases:
        return {}
    return {"vs_pyarrow_best": best[ours] / best[arrow], "vs_pyarrow_median": median[ours] / median[arrow]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=5, help="rounds per case")
    parser.add_argument("--table", choices=("numeric", "mixed", "both"), default="both")
    parser.add_argument("--no-loadtxt", action="store_true", help="leave numpy.loadtxt out (the slowest reader)")
    parser.add_argument("--json", type=Path, help="also write TrainDesk / pyarrow per table here (bench/check.py)")
    args = parser.parse_args()
    ratios: dict[str, dict[str, float]] = {}
    print("command: " + " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]))
    print(f"machine: {os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.1f}")
    tables = ["numeric", "mixed"] if args.table == "both" else [args.table]
    with tempfile.TemporaryDirectory(prefix="traindesk-bench-") as tmp:
        for table in tables:
            path = Path(tmp) / f"{table}.csv"
            if table == "numeric":
                make_csv(path, args.rows, args.features)
                shape = f"{args.features} numbers + label"
            else:
                make_mixed_csv(path, args.rows)
                shape = "24 numbers + 1 text column + label"
            print(f"\n{table}: {args.rows:,} rows x {shape} ({path.stat().st_size / 1e6:.0f} MB)")
            ratios[table] = compare(path, table == "numeric", args.repeat, not args.no_loadtxt)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps(ratios, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
