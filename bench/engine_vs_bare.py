"""Engine throughput against a bare PyTorch loop, side by side in one run.

    .venv/bin/python bench/engine_vs_bare.py [--repeats 3] [--only digits-mlp] [--quick] [--set KEY=VALUE]
                                             [--json PATH]

For each workload (digits + small MLP; synthetic 128 features + MLP [1024, 1024])
it measures, with medians over repeats:
- a bare loop in this process (same data tensors, batch, optimizer; one
  evaluation per epoch like the engine) at 1 thread and at all cores;
- the engine's ``single`` at the same thread counts, ``hogwild`` and ``ddp``
  with 1, 2 and 4 workers;
and prints samples/s and ratios: single vs the bare loop at the same threads,
the parallel strategies vs the bare loop at its fastest thread count.
``--quick`` runs the bare loop and ``single`` at one thread alone (threads that spin
for each other on a busy machine make a two-thread run many times slower); ``--set`` changes
every workload's config (``train.epochs=50``: a shorter run); ``--json`` also
writes each workload's ``single`` / bare ratio at each thread count.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F

from core.config import Config, apply_overrides
from core.data import load_data
from core.launchers import local as launcher
from core.session import Session
from core.training.models import build_model
from core.training.optimizers import make_optimizer
from core.worker.trainer import epoch_indices

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

WORKLOADS: dict[str, list[str]] = {
    "digits-mlp": ["data.source=builtin:digits", "model.hidden=[256,256]", "train.epochs=150", "train.batch_size=64"],
    "synthetic-mlp1024": [
        "data.source=builtin:synthetic?n=48000&features=128&classes=10",
        "model.hidden=[1024,1024]",
        "train.epochs=1",
        "train.batch_size=128",
    ],
}


def bare_loop(cfg: Config, threads: int) -> float:
    """The loop a person writes by hand; returns training samples/s (evaluation included)."""
    data = load_data(cfg.data, seed=cfg.train.seed, share=False)
    info = data.info
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(cfg.train.seed)
        model = build_model(cfg.model, info.input_shape, info.num_classes, info.image_shape)
        opt = make_optimizer(model.parameters(), cfg.optim, cfg.optim.lr)
        x, y, bs = data.train.x, data.train.y, cfg.train.batch_size
        samples = 0
        t0 = time.perf_counter()
        for epoch in range(1, cfg.train.epochs + 1):
            model.train()
            perm = epoch_indices(len(y), epoch, cfg.train.seed, 0, 1)
            for start in range(0, len(perm), bs):
                idx = perm[start : start + bs]
                xb, yb = x.index_select(0, idx), y.index_select(0, idx)
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(xb), yb)
                loss.backward()
                loss.item()
                opt.step()
                samples += len(yb)
            model.eval()
            with torch.no_grad():
                (model(data.val.x).argmax(1) == data.val.y).float().mean().item()
        return samples / (time.perf_counter() - t0)
    finally:
        torch.set_num_threads(previous)


def engine(cfg: Config, runs_dir: Path) -> float:
    session = Session(cfg, runs_dir=runs_dir)
    session.start()
    if session.wait(600) != "finished":
        session.stop(5)
        raise RuntimeError(f"engine run ended {session.state}: {session.error}")
    assert session.summary is not None
    return float(session.summary["samples_per_s"])


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {CORES} cores, Python {platform.python_version()}, torch {torch.__version__}"


def run_workload(
    name: str, overrides: list[str], repeats: int, runs_dir: Path, quick: bool = False
) -> tuple[list[tuple[str, float, str]], dict[str, float]]:
    """Every case once per round, ``repeats`` rounds (drift hits all cases alike); the rows and the ratios."""
    base = apply_overrides(Config(), overrides)
    threads = [1] if quick else sorted({1, CORES})
    cases: dict[str, Callable[[], float]] = {}
    for t in threads:
        cases[f"bare loop, {t} thread(s)"] = lambda t=t: bare_loop(base, t)
    for t in threads:
        cfg = apply_overrides(base, ["parallel.strategy=single", f"parallel.threads_per_worker={t}"])
        cases[f"engine single, {t} thread(s)"] = lambda cfg=cfg: engine(cfg, runs_dir)
    for strategy, workers in [(s, n) for s in ("hogwild", "ddp") for n in (() if quick else (1, 2, 4))]:
        cfg = apply_overrides(base, [f"parallel.strategy={strategy}", f"parallel.workers={workers}"])
        cases[f"engine {strategy}, {workers} worker(s)"] = lambda cfg=cfg: engine(cfg, runs_dir)
    results: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for label, fn in cases.items():
            results[label].append(fn())
    med = {k: statistics.median(v) for k, v in results.items()}
    bare = {t: med[f"bare loop, {t} thread(s)"] for t in threads}
    best_threads = max(bare, key=lambda t: bare[t])
    best = bare[best_threads]
    rows: list[tuple[str, float, str]] = []
    for label, value in med.items():
        spread = f" (range {min(results[label]):,.0f}-{max(results[label]):,.0f})"
        if label.startswith("bare"):
            t = int(label.split(", ")[1].split()[0])
            ratio = "1.00 (reference)" if t == best_threads else f"{value / best:.2f} of best bare"
        elif label.startswith("engine single"):
            t = int(label.split(", ")[1].split()[0])
            ratio = f"{value / bare[t]:.2f}x bare at {t} thread(s)"
        else:
            ratio = f"{value / best:.2f}x best bare ({best_threads} thr)"
        rows.append((label, value, ratio + spread))
    ratios = {f"single_vs_bare_{t}_threads": med[f"engine single, {t} thread(s)"] / bare[t] for t in threads}
    return rows, ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=sorted(WORKLOADS), help="run one workload")
    parser.add_argument("--quick", action="store_true", help="the bare loop and single at 1 thread alone")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="for every workload")
    parser.add_argument("--json", type=Path, help="also write single / bare per workload here (bench/check.py)")
    args = parser.parse_args()
    ratios: dict[str, dict[str, float]] = {}
    launcher.warm_up(block=True)
    print(f"machine: {machine()}")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"median of {args.repeats} repeat(s); samples/s counts training samples, evaluation time included\n")
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides in WORKLOADS.items():
            if args.only and name != args.only:
                continue
            overrides = [*overrides, *args.set]
            print(f"## {name}: {' '.join(overrides)}")
            print(f"{'what':<34} {'samples/s':>12}  ratio")
            rows, ratios[name] = run_workload(name, overrides, args.repeats, Path(tmp), args.quick)
            for label, value, ratio in rows:
                print(f"{label:<34} {value:>12,.0f}  {ratio}")
            print()
    if args.json:
        args.json.write_text(json.dumps(ratios, indent=1))


if __name__ == "__main__":
    main()
