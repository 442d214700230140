"""One training step with the optimizer TrainDesk builds against torch's default one, same model and batch.

    .venv/bin/python bench/optimizer_step.py [--rounds 15] [--steps 300] [--threads 1]

The model is the default MLP (64 -> 256 -> 256 -> 10), batch 64, one thread
(as each hogwild worker runs). "default" is ``torch.optim.X(params, lr)`` as a
hand-written loop builds it; "TrainDesk" is ``core.training.optimizers.make_optimizer``
(fused kernels where torch has them). Each figure is the median of
``--rounds`` interleaved rounds of ``--steps`` steps: zero_grad, forward,
cross-entropy, backward, ``loss.item()``, step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.config import Config, OptimConfig
from core.training.models import build_model
from core.training.optimizers import make_optimizer

DEFAULTS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "sgd": lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9),
    "adam": lambda p, lr: torch.optim.Adam(p, lr=lr),
    "adamw": lambda p, lr: torch.optim.AdamW(p, lr=lr),
}


def traindesk_optimizer(name: str) -> Callable[..., torch.optim.Optimizer]:
    """make_optimizer for optimizer ``name``, called as the defaults are: (params, lr)."""
    return lambda p, lr: make_optimizer(p, OptimConfig(name=name), lr)


def steps(model: Any, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        loss.item()
        opt.step()
    return (time.perf_counter() - t0) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {args.threads} thread(s); default MLP, batch 64; "
        f"median of {args.rounds} rounds of {args.steps} steps\n"
    )
    print(f"{'optimizer':<10} {'default us/step':>16} {'TrainDesk us/step':>18} {'speed-up':>9}")
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    for name, default in DEFAULTS.items():
        models = []
        for build in (default, traindesk_optimizer(name)):
            torch.manual_seed(0)
            model = build_model(Config().model, (64,), 10)
            models.append((model, build(model.parameters(), 1e-3)))
        times: list[list[float]] = [[], []]
        for model, opt in models:
            steps(model, opt, x, y, 50)  # warm-up
        for _ in range(args.rounds):
            for k, (model, opt) in enumerate(models):
                times[k].append(steps(model, opt, x, y, args.steps))
        plain, ours = (statistics.median(t) * 1e6 for t in times)
        print(f"{name:<10} {plain:>16.0f} {ours:>18.0f} {plain / ours:>8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
