"""TrainDesk against PyTorch Lightning on the same work (optional extra ``bench``).

    .venv/bin/pip install -c constraints.txt -e '.[bench]'
    .venv/bin/python bench/lightning_compare.py [--repeats 3]

Same data (standardised digits), same MLP, batch, SGD settings and epochs.
Lightning: ``Trainer(accelerator="cpu")`` with a single device, and with
``strategy="ddp_spawn", devices=2``; logger, progress bar, checkpointing and
model summary off. Two figures each: training samples/s between the first
training batch and the end of the last training epoch (what ``summary.json``
reports for TrainDesk; timed inside rank 0 under ddp_spawn), and samples/s
over the whole call including start-up.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from core.config import Config, apply_overrides
from core.data import load_data
from core.launchers import local as launcher
from core.session import Session

OVERRIDES = ["data.source=builtin:digits", "model.hidden=[256,256]", "train.epochs=40", "train.batch_size=64"]


def lightning_run(cfg: Config, devices: int, strategy: str) -> tuple[float, float]:
    # Imported here, not at the top: TrainDesk's workers re-import this script as their
    # __main__, and a top-level `import lightning` would cost each of them a second.
    import lightning as L
    from _lightning_module import BenchModule

    data = load_data(cfg.data, seed=cfg.train.seed, share=False)
    train = torch.utils.data.TensorDataset(data.train.x, data.train.y)
    val = torch.utils.data.TensorDataset(data.val.x, data.val.y)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy,
        max_epochs=cfg.train.epochs,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    module = BenchModule(OVERRIDES)
    module.sync = devices > 1
    t0 = time.perf_counter()
    trainer.fit(
        module,
        torch.utils.data.DataLoader(train, batch_size=cfg.train.batch_size, shuffle=True),
        torch.utils.data.DataLoader(val, batch_size=2048),
    )
    wall = time.perf_counter() - t0
    samples = len(train) * cfg.train.epochs
    train_s = float(trainer.callback_metrics["bench_train_s"])
    return samples / train_s, samples / wall


def traindesk_run(cfg: Config, tmp: Path) -> tuple[float, float]:
    session = Session(cfg, runs_dir=tmp)
    t0 = time.perf_counter()
    session.start()
    session.wait(600)
    wall = time.perf_counter() - t0
    assert session.summary is not None and session.summary["status"] == "finished"
    return float(session.summary["samples_per_s"]), session.summary["samples"] / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if importlib.util.find_spec("lightning") is None:
        print("lightning is not installed: pip install -c constraints.txt -e '.[bench]'")
        return
    warnings.filterwarnings("ignore")
    os.environ.setdefault("PL_DISABLE_FORK", "1")
    launcher.warm_up(block=True)
    cfg = apply_overrides(Config(), OVERRIDES)
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = {
            "Lightning, single device": lambda: lightning_run(cfg, 1, "auto"),
            "Lightning, ddp_spawn, 2 devices": lambda: lightning_run(cfg, 2, "ddp_spawn"),
            "TrainDesk single": lambda: traindesk_run(apply_overrides(cfg, ["parallel.strategy=single"]), Path(tmp)),
            "TrainDesk hogwild, 2 workers": lambda: traindesk_run(
                apply_overrides(cfg, ["parallel.workers=2"]), Path(tmp)
            ),
            "TrainDesk ddp, 2 workers": lambda: traindesk_run(
                apply_overrides(cfg, ["parallel.strategy=ddp", "parallel.workers=2"]), Path(tmp)
            ),
        }
        for name, fn in cases.items():
            results = [fn() for _ in range(args.repeats)]
            rows.append((name, statistics.median(r[0] for r in results), statistics.median(r[1] for r in results)))
    ref_ddp = next(r for r in rows if r[0].startswith("Lightning, ddp"))
    ref_single = next(r for r in rows if r[0] == "Lightning, single device")
    print(f"workload: {' '.join(OVERRIDES)}; median of {args.repeats}")
    print(
        "| run | training samples/s | samples/s incl. start-up | vs Lightning ddp_spawn (training / incl. start-up) | vs Lightning single |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, train_rate, wall_rate in rows:
        print(
            f"| {name} | {train_rate:,.0f} | {wall_rate:,.0f} | {train_rate / ref_ddp[1]:.2f}x / {wall_rate / ref_ddp[2]:.2f}x "
            f"| {train_rate / ref_single[1]:.2f}x |"
        )


if __name__ == "__main__":
    main()
