"""Cold start from the shell: `traindesk train` launched to its first step record, against `import torch`.

    .venv/bin/python bench/cold_start.py [--repeats 5]

Each round runs, one after the other, a fresh ``python -c "import torch"`` and
a fresh ``traindesk train --epochs 1`` (built-in digits, the default config):
the second's figure is the time from launching the command to the ``t`` of
the first step record a worker wrote in ``metrics.jsonl``. It pays for
everything a user waits for: the interpreter, torch, the forkserver's own
imports (started first, so they overlap this process's), loading the data and
the first training step. Medians over the rounds, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINDESK = [sys.executable, "-m", "core"]


def import_torch_s() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - t0


def first_record_s() -> float:
    with tempfile.TemporaryDirectory(prefix="traindesk-bench-") as runs:
        t0 = time.time()
        subprocess.run(
            [*TRAINDESK, "train", "--epochs", "1", "--runs-dir", runs, "--quiet"],
            check=True,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        metrics = next(Path(runs).glob("*/metrics.jsonl"))
        for line in metrics.read_text().splitlines():
            record = json.loads(line)
            if record.get("kind") == "step":
                return float(record["t"]) - t0
    raise SystemExit("the run wrote no step record")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPU cores; load average {os.getloadavg()[0]:.1f}")
    imports, starts = [], []
    for _ in range(args.repeats):
        imports.append(import_torch_s())
        starts.append(first_record_s())
    imp, start = statistics.median(imports), statistics.median(starts)
    print(f"python -c 'import torch'             median {imp:.2f} s  ({', '.join(f'{x:.2f}' for x in imports)})")
    print(f"traindesk train -> first step record  median {start:.2f} s  ({', '.join(f'{x:.2f}' for x in starts)})")
    print(f"ratio                                 {start / imp:.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
