"""Image-folder training: the engine against a bare DataLoader loop over the same folder, in one run.

    .venv/bin/python bench/image_folder.py [--images 6000] [--loader-workers 2] [--epochs 2] [--repeats 3]

The folder holds ``--images`` PNG files, 28x28 grey, in ten class folders
(written once, with a faint class-dependent stripe so there is something to
learn). Both sides train the built-in cnn (16 and 32 channels) with SGD (lr
0.05, momentum 0.9), batch 64, one training process with one compute thread,
and ``--loader-workers`` DataLoader processes that open, decode and
standardise every image on every epoch:

- engine: ``traindesk``'s single strategy on ``images:DIR`` (no validation
  split, ``data.loader_workers``); samples/s as its summary reports it;
- bare: the loop a user would write: a ``Dataset`` that opens each PNG with
  PIL, a shuffling ``DataLoader`` with the same workers, forward, backward,
  step; samples/s over the same stretch (first training step to last).

Medians over interleaved rounds, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import torch
import torch.nn.functional as F
from engine_vs_bare import engine

from core.config import Config, apply_overrides
from core.launchers import local as launcher
from core.training.models import build_model

BATCH, LR, MOMENTUM = 64, 0.05, 0.9


def make_folder(root: Path, n: int) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(n):
        c = i % 10
        pixels = rng.integers(0, 50, (28, 28), dtype=np.uint8)
        pixels[2 * c : 2 * c + 3, :] += 180
        folder = root / f"class{c}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels, mode="L").save(folder / f"{i:06d}.png")


class FolderDataset(torch.utils.data.Dataset):
    """What a user writes without torchvision: PIL opens each file, numpy scales it."""

    def __init__(self, root: Path, mean: float, std: float) -> None:
        self.items = [(str(p), k) for k, d in enumerate(sorted(root.iterdir())) for p in sorted(d.glob("*.png"))]
        self.mean, self.std = mean, std

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        path, label = self.items[i]
        with Image.open(path) as img:
            arr = np.asarray(img.convert("L"), dtype=np.float32) / 255.0
        return torch.from_numpy((arr[None] - self.mean) / self.std), label


def bare(root: Path, cfg: Config, loader_workers: int, epochs: int) -> float:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model(cfg.model, (1, 28, 28), 10)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loader = torch.utils.data.DataLoader(
        FolderDataset(root, 0.2, 0.3),
        batch_size=BATCH,
        shuffle=True,
        num_workers=loader_workers,
        persistent_workers=loader_workers > 0,
    )
    samples, first, last = 0, None, 0.0
    for _ in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
            samples += len(yb)
            now = time.perf_counter()
            first = now if first is None else first
            last = now
    del loader
    return samples / max(last - (first or last), 1e-9)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=6000)
    parser.add_argument("--loader-workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    launcher.warm_up(block=True)
    threads = torch.get_num_threads()
    print(f"{os.cpu_count()} cores, torch {torch.__version__}; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="traindesk-bench-") as tmp:
        root = Path(tmp) / "images"
        t0 = time.perf_counter()
        make_folder(root, args.images)
        print(
            f"{args.images:,} PNG images (28x28 grey, 10 classes) written in {time.perf_counter() - t0:.1f} s; "
            f"batch {BATCH}, cnn [16, 32], SGD {LR}/{MOMENTUM}, {args.epochs} epochs, "
            f"{args.loader_workers} DataLoader workers, 1 compute thread\n"
        )
        cfg = apply_overrides(
            Config(),
            [
                f"data.source=images:{root}",
                "data.val_fraction=0.0",
                f"data.loader_workers={args.loader_workers}",
                "model.kind=cnn",
                f"train.epochs={args.epochs}",
                f"train.batch_size={BATCH}",
                f"optim.lr={LR}",
                f"optim.momentum={MOMENTUM}",
                "parallel.strategy=single",
                "parallel.workers=1",
                "parallel.threads_per_worker=1",
            ],
        )
        runs = Path(tmp) / "runs"
        results: dict[str, list[float]] = {"engine (single, images:DIR)": [], "bare DataLoader loop": []}
        for _ in range(args.repeats):
            results["engine (single, images:DIR)"].append(engine(cfg, runs))
            results["bare DataLoader loop"].append(bare(root, cfg, args.loader_workers, args.epochs))
            torch.set_num_threads(threads)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"{'what':<32} {'samples/s':>10}   runs")
    for label, value in med.items():
        print(f"{label:<32} {value:>10,.0f}   {', '.join(f'{v:,.0f}' for v in results[label])}")
    print(f"engine / bare: {med['engine (single, images:DIR)'] / med['bare DataLoader loop']:.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
