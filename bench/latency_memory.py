"""Start, pause and stop latency, and memory per process.

    .venv/bin/python bench/latency_memory.py [--repeats 5]

- cold start: Session.start() -> first step record, in a fresh process whose
  forkserver is not running yet (torch already imported, as in the window);
  also with the plain ``spawn`` start method;
- warm start: the same, for the runs after the first in that process;
- pause: pause() -> every worker has reported "paused" (no step after that);
- stop: stop() -> every worker process has exited and the summary is written;
- memory: PSS (proportional set size: shared pages split between sharers)
  and RSS of the session process and of each hogwild worker, with 1, 2 and 4
  workers, on an MLP of ~4.5 M parameters (18 MB of weights).
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import torch
from core.launchers import local as launcher
from core.config import Config, apply_overrides
from core.session import RecordBuffer, Session

def first_record(runs, repeats):
    out = []
    for i in range(repeats):
        cfg = apply_overrides(Config(), ["train.epochs=2"])
        s = Session(cfg, runs_dir=runs)
        buf = RecordBuffer(); s.add_listener(buf.put)
        t0 = time.time(); s.start()
        first = None
        while first is None:
            for r in buf.drain(0.5):
                if r["kind"] == "step" and first is None:
                    first = r["t"]
        s.wait(60)
        out.append(first - t0)
    return out

if __name__ == "__main__":
    print(json.dumps(first_record(sys.argv[1], int(sys.argv[2]))))
"""


def start_latency(method: str, repeats: int, tmp: Path) -> tuple[float, list[float]]:
    script = tmp / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINDESK_START_METHOD": method}
    res = subprocess.run(
        [sys.executable, str(script), str(tmp / f"runs-{method}"), str(repeats + 1)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    times = json.loads(res.stdout.strip().splitlines()[-1])
    return times[0], times[1:]


def pss_rss_kib(pid: int) -> tuple[int, int]:
    pss = rss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1])
            elif line.startswith("Rss:"):
                rss = int(line.split()[1])
    except OSError:
        pass
    return pss, rss


def pause_stop_latency(repeats: int, tmp: Path) -> tuple[list[float], list[float]]:
    from core.config import Config, apply_overrides
    from core.session import RecordBuffer, Session

    pauses, stops = [], []
    for _ in range(repeats):
        cfg = apply_overrides(Config(), ["train.epochs=100000", "parallel.workers=2"])
        s = Session(cfg, runs_dir=tmp / "runs-ps")
        buf = RecordBuffer()
        s.add_listener(buf.put)
        s.start()
        while not any(r["kind"] == "step" for r in buf.drain(0.2)):
            pass
        time.sleep(0.5)
        buf.drain(0)
        t0 = time.time()
        s.pause()
        paused: dict[int, float] = {}
        while len(paused) < s.num_workers:
            for r in buf.drain(0.2):
                if r["kind"] == "state" and r["worker"] is not None and r["state"] == "paused":
                    paused[r["worker"]] = r["t"]
        pauses.append(max(paused.values()) - t0)
        s.resume()
        time.sleep(0.3)
        pids = s.worker_pids()
        t0 = time.perf_counter()
        s.stop(10)
        while any(
            Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1][:3]
            for p in pids
        ):
            time.sleep(0.001)
        stops.append(time.perf_counter() - t0)
    return pauses, stops


def memory(tmp: Path) -> list[dict[str, Any]]:
    """One fresh process per worker count, so no run inherits another's memory."""
    rows = []
    for workers in (1, 2, 4):
        res = subprocess.run(
            [sys.executable, __file__, "--memory-row", str(workers), str(tmp)],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
    return rows


def memory_row(workers: int, tmp: Path) -> dict[str, Any]:
    from core.config import Config, apply_overrides
    from core.session import RecordBuffer, Session

    cfg = apply_overrides(
        Config(),
        [
            "train.epochs=100000",
            f"parallel.workers={workers}",
            "data.source=builtin:synthetic?n=20000&features=256&classes=10",
            "model.hidden=[2048,2048]",
        ],
    )
    s = Session(cfg, runs_dir=tmp / f"runs-mem-{workers}")
    buf = RecordBuffer()
    s.add_listener(buf.put)
    s.start()
    while not any(r["kind"] == "step" for r in buf.drain(0.2)):
        pass
    time.sleep(2.0)
    workers_mem = [pss_rss_kib(p) for p in s.worker_pids()]
    parent = pss_rss_kib(os.getpid())
    s.stop(10)
    return {
        "workers": workers,
        "parameters": s.num_parameters,
        "parent_pss_mib": parent[0] / 1024,
        "parent_rss_mib": parent[1] / 1024,
        "worker_pss_mib": statistics.mean(m[0] for m in workers_mem) / 1024,
        "worker_rss_mib": statistics.mean(m[1] for m in workers_mem) / 1024,
        "total_pss_mib": (parent[0] + sum(m[0] for m in workers_mem)) / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory-row", nargs=2, metavar=("WORKERS", "TMP"), help=argparse.SUPPRESS)
    parser.add_argument("--memory-only", action="store_true", help="only the memory table")
    args = parser.parse_args()
    if args.memory_row:
        print(json.dumps(memory_row(int(args.memory_row[0]), Path(args.memory_row[1]))))
        return
    from core.launchers import local as launcher

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.memory_only:
            print_memory(tmp)
            return
        print("| what | median | all (s) |")
        print("|---|---:|---|")
        for method in ("forkserver", "spawn"):
            cold, warm = start_latency(method, args.repeats, tmp)
            print(f"| start -> first record, cold, {method} | {cold * 1000:.0f} ms | {cold:.3f} |")
            print(
                f"| start -> first record, warm, {method} | {statistics.median(warm) * 1000:.0f} ms | "
                + ", ".join(f"{w:.3f}" for w in warm)
                + " |"
            )
        launcher.warm_up(block=True)
        pauses, stops = pause_stop_latency(args.repeats, tmp)
        print(
            f"| pause() -> all workers paused (2 workers) | {statistics.median(pauses) * 1000:.1f} ms | "
            + ", ".join(f"{p:.4f}" for p in pauses)
            + " |"
        )
        print(
            f"| stop() -> all workers exited (2 workers) | {statistics.median(stops) * 1000:.0f} ms | "
            + ", ".join(f"{p:.3f}" for p in stops)
            + " |"
        )
        print()
        print_memory(tmp)


def print_memory(tmp: Path) -> None:
    print(
        "| hogwild workers | parameters | session PSS / RSS (MiB) | per worker PSS / RSS (MiB) | all processes PSS (MiB) |"
    )
    print("|---:|---:|---:|---:|---:|")
    for row in memory(tmp):
        print(
            f"| {row['workers']} | {row['parameters']:,} | {row['parent_pss_mib']:.0f} / {row['parent_rss_mib']:.0f} | "
            f"{row['worker_pss_mib']:.0f} / {row['worker_rss_mib']:.0f} | {row['total_pss_mib']:.0f} |"
        )


if __name__ == "__main__":
    main()
