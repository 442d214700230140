"""A ddp run launched by TrainDesk's local launcher against the same run under torchrun, in one script.

    .venv/bin/python bench/torchrun_vs_local.py [--repeats 3] [--epochs 40]

Both train the same config with two ranks: locally (``traindesk train
--strategy ddp --workers 2``: the forkserver starts the ranks) and as two
simulated nodes (two ``torchrun --nnodes=2 --nproc-per-node=1`` agents at a
localhost c10d rendezvous, each rank its own process group member; rank 0 also
collects every rank's records through the group). Prints the training
samples/s of each (``summary.json``), medians over interleaved repeats, and the
ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_run(args: list[str], runs: Path) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "core",
            "train",
            "--quiet",
            "--strategy",
            "ddp",
            "--workers",
            "2",
            "--runs-dir",
            str(runs),
            *args,
        ],
        capture_output=True,
        text=True,
        env=ENV,
        check=True,
    )
    return json.loads((Path(out.stdout.strip().splitlines()[-1]) / "summary.json").read_text())


def torchrun_run(args: list[str], runs: Path) -> dict:
    port = free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                "--nproc-per-node=1",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{port}",
                f"--rdzv-id=bench-{port}",
                "-m",
                "core",
                "train",
                "--quiet",
                "--runs-dir",
                str(runs),
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=ENV,
        )
        for _ in range(2)
    ]
    outs = [p.communicate()[0].strip() for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"torchrun failed: exit codes {[p.returncode for p in procs]}")
    run_dir = Path(next(o for o in outs if o).splitlines()[-1])
    return json.loads((run_dir / "summary.json").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=40)
    opts = parser.parse_args()
    args = ["--epochs", str(opts.epochs), "--set", "parallel.threads_per_worker=1"]
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"digits, MLP [256, 256], batch 64, {opts.epochs} epochs, 2 ranks, 1 thread each"
    )
    local, elastic = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(opts.repeats):  # interleaved: both see the same machine load
            local.append(local_run(args, Path(tmp) / f"local{i}")["samples_per_s"])
            elastic.append(torchrun_run(args, Path(tmp) / f"torchrun{i}")["samples_per_s"])
    lo, tr = statistics.median(local), statistics.median(elastic)
    print(f"{'launch':<34} {'samples/s (median)':>18}   runs")
    print(f"{'local ddp x2 (forkserver)':<34} {lo:>18,.0f}   {', '.join(f'{v:,.0f}' for v in local)}")
    print(f"{'torchrun, 2 nodes x 1 rank':<34} {tr:>18,.0f}   {', '.join(f'{v:,.0f}' for v in elastic)}")
    print(f"torchrun / local: {tr / lo:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
