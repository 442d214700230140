"""The engine's hogwild against hand-written Hogwild loops, side by side in one run.

    .venv/bin/python bench/hogwild_reference.py [--repeats 3] [--only mlp|mnist]

- ``mlp``: digits-sized work (synthetic 64 features, 10 classes, 20,000 rows),
  MLP [256, 256], SGD, batch 64: the engine's hogwild x2 against a plain
  40-line shared-memory Hogwild of the same model, data tensors, permutations,
  batch, optimizer and per-epoch evaluation by process 0. The engine builds
  its SGD with torch's fused kernel; the plain loop uses torch's default, as
  people write it, and a third row gives it the fused kernel too.
- ``mnist``: 60,000 synthetic 1x28x28 images (an NPZ file), the network of
  pytorch/examples' mnist_hogwild given to the engine as ``custom:``, against a
  loop in the shape of mnist_hogwild (``model.share_memory()``, ``train(rank)``
  per process, a shuffling DataLoader, SGD lr 0.01 momentum 0.5, batch 64), run
  once with torch's default threads in each process and once with one thread
  per process (and that once more with the allocator setting the engine's
  workers use, ``core.host.machine.keep_freed_memory``).
All report training samples per second: every process's samples over the wall
time from the first training step to the last (the engine's ``samples_per_s``
is measured the same way); medians over interleaved repeats. The engine's
workers each train a shard of every epoch; mnist_hogwild's processes each
walk the whole data set: both count every sample they train on, and the
engine runs twice the epochs so that each of its processes trains as many
samples as each reference process does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
import torch.nn.functional as F
from engine_vs_bare import engine

from core.config import Config, apply_overrides
from core.data import load_data
from core.host.machine import keep_freed_memory
from core.launchers import local as launcher
from core.training.models import build_model
from core.worker.trainer import epoch_indices

HERE = Path(__file__).resolve().parent
MLP = [
    "data.source=builtin:synthetic?n=25000&features=64&classes=10",
    "model.hidden=[256,256]",
    "train.epochs=10",
    "train.batch_size=64",
    "optim.lr=0.05",
    "optim.momentum=0.9",
    "data.val_fraction=0.2",
]


# -- a plain shared-memory Hogwild, the way a person writes it --------------------------------------
def _hand_worker(
    rank: int, world: int, cfg: Config, model: Any, x: Any, y: Any, vx: Any, vy: Any, out: Any, fused: bool
) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(cfg.train.seed + rank)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.optim.lr, momentum=cfg.optim.momentum, fused=fused or None)
    samples, t0 = 0, time.perf_counter()
    for epoch in range(1, cfg.train.epochs + 1):
        model.train()
        perm = epoch_indices(len(y), epoch, cfg.train.seed, rank, world)
        for start in range(0, len(perm), cfg.train.batch_size):
            idx = perm[start : start + cfg.train.batch_size]
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            loss.item()
            opt.step()
            samples += len(yb)
        if rank == 0:
            model.eval()
            with torch.no_grad():
                (model(vx).argmax(1) == vy).float().mean().item()
    out[3 * rank : 3 * rank + 3] = [samples, t0, time.perf_counter()]


def _rate(out: Any, workers: int) -> float:
    """All samples over the wall time from the first process's start to the last one's end."""
    rows = [out[3 * r : 3 * r + 3] for r in range(workers)]
    return sum(r[0] for r in rows) / (max(r[2] for r in rows) - min(r[1] for r in rows))


def hand_hogwild(cfg: Config, workers: int = 2, fused: bool = False) -> float:
    data = load_data(cfg.data, seed=cfg.train.seed)
    info = data.info
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, info.input_shape, info.num_classes, info.image_shape)
    model.share_memory()
    ctx = launcher.get_context()
    out = ctx.Array("d", 3 * workers)
    procs = [
        ctx.Process(
            target=_hand_worker,
            args=(r, workers, cfg, model, data.train.x, data.train.y, data.val.x, data.val.y, out, fused),
        )
        for r in range(workers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return _rate(out, workers)


# -- the shape of pytorch/examples mnist_hogwild -----------------------------------------------------
class _Images(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def _mnist_train(
    rank: int, model: Any, x: Any, y: Any, threads: int, epochs: int, out: Any, keep: bool = False
) -> None:
    if keep:
        keep_freed_memory()
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(1 + rank)
    loader = torch.utils.data.DataLoader(_Images(x, y), batch_size=64, shuffle=True, num_workers=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    samples, t0 = 0, time.perf_counter()
    for _ in range(epochs):
        model.train()
        for data, target in loader:
            opt.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            opt.step()
            samples += len(target)
    out[3 * rank : 3 * rank + 3] = [samples, t0, time.perf_counter()]


def mnist_reference(npz: Path, threads: int, epochs: int, processes: int = 2, keep: bool = False) -> float:
    sys.path.insert(0, str(HERE))
    from _mnist_net import Net

    arrays = np.load(npz)
    x = torch.from_numpy(arrays["x"]).float().share_memory_()
    y = torch.from_numpy(arrays["y"]).long().share_memory_()
    torch.manual_seed(1)
    model = Net()
    model.share_memory()
    ctx = launcher.get_context()
    out = ctx.Array("d", 3 * processes)
    procs = [
        ctx.Process(target=_mnist_train, args=(r, model, x, y, threads, epochs, out, keep)) for r in range(processes)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return _rate(out, processes)  # each process walks the whole data set, as mnist_hogwild does


def make_mnist(path: Path, n: int = 60_000) -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, n)
    x = rng.random((n, 1, 28, 28), dtype=np.float32) * 0.2
    for c in range(10):  # a faint class-dependent stripe: learnable
        x[y == c, 0, 2 * c : 2 * c + 3, :] += 0.8
    np.savez(path, x=x, y=y)


def rounds(cases: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for label, fn in cases.items():
            results[label].append(fn())
    return results


def report(title: str, results: dict[str, list[float]], reference: list[str]) -> dict[str, float]:
    """Prints the medians and the engine's ratios; returns the ratios by reference."""
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"## {title}")
    print(f"{'what':<48} {'samples/s':>10}   runs")
    for label, value in med.items():
        print(f"{label:<48} {value:>10,.0f}   {', '.join(f'{v:,.0f}' for v in results[label])}")
    engine_value = med[next(k for k in med if k.startswith("engine"))]
    for ref in reference:
        print(f"engine / {ref}: {engine_value / med[ref]:.2f}x")
    print()
    return {ref: engine_value / med[ref] for ref in reference}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=["mlp", "mnist"])
    parser.add_argument("--mnist-epochs", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the engine's ratios to this file (bench/check.py)")
    args = parser.parse_args()
    ratios: dict[str, float] = {}
    launcher.warm_up(block=True)
    print(f"{os.cpu_count()} cores, torch {torch.__version__}; median of {args.repeats}\n")
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        if args.only in (None, "mlp"):
            cfg = apply_overrides(
                Config(), MLP + ["parallel.strategy=hogwild", "parallel.workers=2", "parallel.threads_per_worker=1"]
            )
            results = rounds(
                {
                    "engine hogwild x2 (1 thread each)": lambda: engine(cfg, runs),
                    "hand-written hogwild x2 (1 thread each)": lambda: hand_hogwild(cfg),
                    "hand-written, fused SGD as the engine's": lambda: hand_hogwild(cfg, fused=True),
                },
                args.repeats,
            )
            mlp = report(
                "mlp: " + " ".join(MLP),
                results,
                ["hand-written hogwild x2 (1 thread each)", "hand-written, fused SGD as the engine's"],
            )
            ratios["mlp_vs_hand"] = mlp["hand-written hogwild x2 (1 thread each)"]
            ratios["mlp_vs_hand_fused"] = mlp["hand-written, fused SGD as the engine's"]
        if args.only in (None, "mnist"):
            npz = Path(tmp) / "mnist.npz"
            make_mnist(npz)
            cfg = apply_overrides(
                Config(),
                [
                    f"data.source=npz:{npz}",
                    f"model.kind=custom:{HERE / '_mnist_net.py'}:make",
                    # 2 epochs of the engine, whose workers each train half of every epoch, give each worker as
                    # many samples as a reference process trains in 1 (it walks the whole set): equal stretches
                    "data.standardize=false",
                    "data.val_fraction=0.0",
                    f"train.epochs={2 * args.mnist_epochs}",
                    "train.batch_size=64",
                    "optim.lr=0.01",
                    "optim.momentum=0.5",
                    "parallel.strategy=hogwild",
                    "parallel.workers=2",
                    "parallel.threads_per_worker=1",
                ],
            )
            e = args.mnist_epochs
            results = rounds(
                {
                    "engine hogwild x2 (1 thread each)": lambda: engine(cfg, runs),
                    "mnist_hogwild shape, default threads": lambda: mnist_reference(npz, 0, e),
                    "mnist_hogwild shape, 1 thread per process": lambda: mnist_reference(npz, 1, e),
                    "the same, keeping freed memory as the engine": lambda: mnist_reference(npz, 1, e, keep=True),
                },
                args.repeats,
            )
            mnist = report(
                "mnist: 60,000 x 1x28x28, mnist_hogwild network, batch 64, SGD 0.01/0.5",
                results,
                [
                    "mnist_hogwild shape, default threads",
                    "mnist_hogwild shape, 1 thread per process",
                    "the same, keeping freed memory as the engine",
                ],
            )
            ratios["mnist_vs_default_threads"] = mnist["mnist_hogwild shape, default threads"]
            ratios["mnist_vs_one_thread"] = mnist["mnist_hogwild shape, 1 thread per process"]
    if args.json:
        args.json.write_text(json.dumps(ratios, indent=1))


if __name__ == "__main__":
    main()
