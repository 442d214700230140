"""What the mirrors cost in samples/s: the same runs with neither, with TensorBoard's files, and with both
TensorBoard's files and an MLflow server on this machine, in one process, in alternation.

    .venv/bin/python bench/tracking_cost.py [--repeats 5] [--quick]

TensorBoard's files are written and MLflow is sent to from the session's process (never a worker), so both
should cost nothing measurable. Each workload (``single``, and ``hogwild`` with 2 workers, on digits with a
small batch: a step record every few milliseconds from each worker, the most the engine sends) runs in the
three ways in turn, ``--repeats`` rounds; the script prints the medians, their ranges, the ratios to
"neither" and, for scale, the same training in a bare PyTorch loop (one process, no records). The MLflow
server (``mlflow server``, sqlite store, one worker) runs on the same cores as the training, as a server on
a workstation would. ``--quick`` checks that the script runs (tiny runs, one round): its figures mean nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine_vs_bare import bare_loop, engine, machine

from core.config import Config, apply_overrides
from core.launchers import local as launcher
from core.runfiles.layout import RunDir, list_runs
from core.session.machinery import recording
from core.tracking.mlflow_mirror import read_mirrors
from tests.core.tracking.mlflow_server import MlflowServer

BASE = ["data.source=builtin:digits", "model.hidden=[256,256]", "train.batch_size=16"]
WORKLOADS = [("single", 1), ("hogwild", 2)]
WAYS = ("neither", "tensorboard", "tb + mlflow")


def run(cfg: Config, runs_dir: Path, way: str, uri: str) -> float:
    recording.TENSORBOARD = way != "neither"
    if way == "tb + mlflow":
        cfg = cfg.with_changes({"tracking.mlflow": uri})
    try:
        rate = engine(cfg, runs_dir)
    finally:
        recording.TENSORBOARD = True
    if way == "tb + mlflow":
        newest = list_runs(runs_dir)[0]
        entry = read_mirrors(newest.path).get(uri)
        if entry is None or entry.ended != "FINISHED":
            raise RuntimeError(f"{newest.name} did not reach MLflow: {RunDir(newest).mlflow}")
    return rate


def settled(server: MlflowServer, quiet_s: float = 0.2, window_s: float = 2.0, timeout_s: float = 120.0) -> None:
    """Wait until the server's processes are idle: after its first answer it spends some seconds of CPU
    starting its job workers, which would be counted against the first runs."""
    import psutil

    assert server.proc is not None
    root = psutil.Process(server.proc.pid)

    def cpu() -> float:
        total = 0.0
        for p in [root, *root.children(recursive=True)]:
            try:
                t = p.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += t.user + t.system
        return total

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = cpu()
        time.sleep(window_s)
        if cpu() - before < quiet_s:
            return


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
    print(f"median of {repeats} round(s), the three ways in turn; samples/s as summary.json counts them\n")
    print(f"{'workload':<20} {'way':<12} {'samples/s':>10} {'/neither':>9}  range")
    with tempfile.TemporaryDirectory() as tmp:
        server = MlflowServer(Path(tmp) / "mlflow").start()
        settled(server)
        try:
            for strategy, workers in WORKLOADS:
                cfg = apply_overrides(
                    Config(),
                    [*BASE, f"train.epochs={epochs}", f"parallel.strategy={strategy}", f"parallel.workers={workers}"],
                )
                rates: dict[str, list[float]] = {way: [] for way in WAYS}
                run(cfg, Path(tmp) / "runs", "neither", server.uri)  # a first run warms the caches: not counted
                for _ in range(repeats):
                    for way in WAYS:
                        rates[way].append(run(cfg, Path(tmp) / "runs", way, server.uri))
                base = statistics.median(rates["neither"])
                name = f"{strategy}, {workers} worker(s)"
                for way in WAYS:
                    med = statistics.median(rates[way])
                    span = f"{min(rates[way]):,.0f}-{max(rates[way]):,.0f}"
                    print(f"{name:<20} {way:<12} {med:>10,.0f} {med / base:>9.3f}  {span}")
                if workers == 1:
                    bare = bare_loop(cfg, 1)
                    print(f"{name:<20} {'bare loop':<12} {bare:>10,.0f} {bare / base:>9.3f}  (one process, no records)")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
