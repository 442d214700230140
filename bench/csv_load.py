"""CSV loading: TrainDesk's reader against numpy.loadtxt and pyarrow.csv on the same file.

    .venv/bin/python bench/csv_load.py [--rows 300000] [--features 32] [--repeat 3]

The file has ``--features`` float columns and an integer ``label`` column
(about 100 MB at 300,000 x 32). "traindesk" is ``core.data``'s CSV source as
training reads it: the features as float32 and the labels encoded, all checks
included (standardisation and the split are not part of it). numpy.loadtxt and
pyarrow.csv.read_csv read the same file into arrays (pyarrow with its default
options: threads, type inference). Figures are the best of N rounds, taken
round robin so that each round sees the same load on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.data import _csv  # noqa: E402


def make_csv(path: Path, rows: int, features: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (rows, features))
    y = rng.integers(0, 10, rows)
    with path.open("w") as fh:
        fh.write(",".join([f"f{i}" for i in range(features)] + ["label"]) + "\n")
        np.savetxt(fh, np.column_stack([x, y]), fmt=["%.8g"] * features + ["%d"], delimiter=",")


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each figure is the best of N")
    args = parser.parse_args()
    print("command: " + " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]))
    print(f"machine: {os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="traindesk-bench-") as tmp:
        path = Path(tmp) / "data.csv"
        make_csv(path, args.rows, args.features)
        print(f"input: {args.rows:,} rows x {args.features} features + label ({path.stat().st_size / 1e6:.0f} MB)")
        cases: dict[str, Callable[[], object]] = {
            "traindesk (core.data csv source)": lambda: _csv(str(path), "label", f"csv:{path}"),
            "numpy.loadtxt": lambda: np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32),
        }
        try:
            import pyarrow.csv as pacsv

            cases["pyarrow.csv.read_csv"] = lambda: pacsv.read_csv(path)
        except ModuleNotFoundError:
            print("pyarrow: not installed, skipped")
        for fn in cases.values():  # warm: imports and the page cache
            fn()
        best = {name: timed(fn) for name, fn in cases.items()}
        for _ in range(args.repeat - 1):
            for name, fn in cases.items():
                best[name] = min(best[name], timed(fn))
    fastest = min((s for n, s in best.items() if not n.startswith("traindesk")), default=1.0)
    print(f"\n{'':<36} {'seconds':>8}   vs fastest library reader")
    for name, seconds in best.items():
        print(f"{name:<36} {seconds:>8.2f}   {seconds / fastest:>6.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
