"""What writing every run's TensorBoard files (RUN/tb/) costs in samples/s: the same runs with it on and off.

    .venv/bin/python bench/tensorboard_cost.py [--repeats 5] [--quick]

The files are written in the session's process from the records the workers send (never in a worker), so
they should cost nothing measurable. Each workload (``single``, and ``hogwild`` with 2 and 4 workers, on
digits with a small batch: a step record every 10 ms from each worker, the most the engine sends) runs
with TensorBoard on and off in alternation, ``--repeats`` rounds; it prints the medians, their ranges and
the ratio on/off, and the size of one run's tb/ folder. ``--quick`` is a check that the script runs
(tiny runs, one round): its figures mean nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine_vs_bare import engine, machine

from core.config import Config, apply_overrides
from core.launchers import local as launcher
from core.runfiles.layout import RunDir, list_runs
from core.session.machinery import recording

BASE = ["data.source=builtin:digits", "model.hidden=[256,256]", "train.batch_size=16"]
WORKLOADS = [("single", 1), ("hogwild", 2), ("hogwild", 4)]


def run(cfg: Config, runs_dir: Path, tensorboard: bool) -> float:
    recording.TENSORBOARD = tensorboard
    try:
        return engine(cfg, runs_dir)
    finally:
        recording.TENSORBOARD = True


def tb_size(runs_dir: Path) -> tuple[int, int]:
    """(bytes, files) of the newest run's tb/ folder."""
    newest = list_runs(runs_dir)[0]
    files = [p for p in RunDir(newest).tensorboard.glob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="tiny runs, one round: checks the script runs")
    args = parser.parse_args()
    repeats, epochs = (1, 1) if args.quick else (args.repeats, args.epochs)
    launcher.warm_up(block=True)
    print(f"machine: {machine()}")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"median of {repeats} round(s), on and off in alternation; samples/s as summary.json counts them\n")
    print(f"{'workload':<22} {'tb on':>10} {'tb off':>10}  {'on/off':>6}  ranges (on | off)        tb/ of a run")
    with tempfile.TemporaryDirectory() as tmp:
        for strategy, workers in WORKLOADS:
            cfg = apply_overrides(
                Config(),
                [*BASE, f"train.epochs={epochs}", f"parallel.strategy={strategy}", f"parallel.workers={workers}"],
            )
            on: list[float] = []
            off: list[float] = []
            size = (0, 0)
            for _ in range(repeats):
                on.append(run(cfg, Path(tmp), True))
                size = tb_size(Path(tmp))
                off.append(run(cfg, Path(tmp), False))
            med_on, med_off = statistics.median(on), statistics.median(off)
            ranges = f"{min(on):,.0f}-{max(on):,.0f} | {min(off):,.0f}-{max(off):,.0f}"
            print(
                f"{strategy + f', {workers} worker(s)':<22} {med_on:>10,.0f} {med_off:>10,.0f}  "
                f"{med_on / med_off:>6.3f}  {ranges:<24} {size[0] / 1024:,.0f} KiB in {size[1]} file(s)"
            )


if __name__ == "__main__":
    main()
