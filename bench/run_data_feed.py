"""How fast RunData (the Training tab's curves) takes records: records per second, no Qt.

    .venv/bin/python bench/run_data_feed.py [--steps 100000] [--workers 4] [--repeat 3]

Step records of ``--workers`` hogwild workers, fed in batches of 1,000 (a live
frame holds far fewer); best of ``--repeat``. Every record goes through the
run's Timeline (its time since the first training step) and the loss, mean,
throughput and learning-rate series.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.viewmodels.run_data import RunData


def records(steps: int, workers: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = [{"kind": "state", "t": 999.0, "worker": None, "state": "starting"}]
    t = 1000.0
    for i in range(1, steps + 1):
        for w in range(workers):
            t += 0.0001
            out.append(
                {
                    "kind": "step",
                    "t": t,
                    "worker": w,
                    "epoch": 1 + i // 1000,
                    "step": i,
                    "samples": 64 * i,
                    "loss": 1.0 / i,
                    "lr": 0.05,
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    recs = records(args.steps, args.workers)
    best = float("inf")
    for _ in range(args.repeat):
        data = RunData()
        data.expected_workers = args.workers
        t0 = time.perf_counter()
        for k in range(0, len(recs), 1000):
            data.add(recs[k : k + 1000])
        best = min(best, time.perf_counter() - t0)
    print(f"records: {len(recs):,}  best of {args.repeat}: {best:.2f} s  {len(recs) / best:,.0f} records/s")


if __name__ == "__main__":
    main()
