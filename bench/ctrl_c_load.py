"""Ctrl-C while `traindesk train` starts or reads its data: how long until the command has ended.

    .venv/bin/python bench/ctrl_c_load.py [--rows 3000000] [--at 0.2,1] [--repeat 3]

Writes a CSV of ROWS rows x 32 features and a label (pyarrow, seconds), then
runs ``python -m core train --set data.source=csv:FILE`` as a user does and
sends SIGINT to its process group (as a terminal's Ctrl-C does) AT seconds
after the launch. For each: the exit status, the seconds from the signal to
the exit, whether a run directory was made and whether any process of the
group was still there 1 s after the exit.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def make_csv(path: Path, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(0)
    cols = {f"f{i}": np.round(rng.normal(size=rows), 2).astype(np.float32) for i in range(32)}
    cols["label"] = rng.integers(0, 5, rows)
    with path.open("wb") as fh:
        fh.write((",".join(cols) + "\n").encode())
        pacsv.write_csv(
            pa.table(cols), fh, write_options=pacsv.WriteOptions(include_header=False, quoting_style="none")
        )


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def interrupt_at(csv: Path, runs: Path, delay: float) -> tuple[int, float, bool, bool]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "core",
            "train",
            "--epochs",
            "5",
            "--runs-dir",
            str(runs),
            "--set",
            f"data.source=csv:{csv}",
        ],
        cwd=runs.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    time.sleep(delay)
    os.killpg(proc.pid, signal.SIGINT)
    sent = time.perf_counter()
    code = proc.wait(120)
    took = time.perf_counter() - sent
    deadline = time.monotonic() + 1.0
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    made = runs.is_dir() and any(p.is_dir() for p in runs.iterdir())
    return code, took, made, group_alive(proc.pid)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--at", default="0.2,1", help="seconds after the launch, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("command: " + " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]))
    print(f"machine: {os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="traindesk-bench-") as tmp:
        csv = Path(tmp) / "big.csv"
        make_csv(csv, args.rows)
        print(f"input: {args.rows:,} rows x 33 columns, {csv.stat().st_size / 1e6:,.0f} MB")
        print(f"{'Ctrl-C at':>10} {'exit':>5} {'to exit (s)':>12} {'run dir':>8} {'left':>5}")
        for k in range(args.repeat):
            for at in [float(a) for a in args.at.split(",")]:
                code, took, made, left = interrupt_at(csv, Path(tmp) / f"runs-{k}-{at}", at)
                print(f"{at:>9.1f}s {code:>5} {took:>12.2f} {'yes' if made else 'no':>8} {'yes' if left else 'no':>5}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
