"""Batch prediction throughput: `traindesk predict` with 1, 2 and 4 workers against a bare model(x) loop.

    .venv/bin/python bench/predict_throughput.py [--rows 200000] [--formats safetensors,onnx]
                                                 [--workers 1,2,4] [--input csv|npz] [--repeat 5]

The model is the default MLP (64 -> 256 -> 256 -> 10) with untrained weights
(throughput does not depend on them). "predict" figures are end to end, as
the CLI does it: load the exported model, read the input, predict, format the
CSV (written to /dev/null); the forkserver that starts worker processes is
started first and its start-up time printed apart. The bare loop is only
``model(x)`` over the same batches on already standardised tensors, in this
process: the ceiling.
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.launchers import local as launcher  # noqa: E402
from core.checkpoint import save_checkpoint  # noqa: E402
from core.config import Config, to_dict, to_toml  # noqa: E402
from core.export import export_run  # noqa: E402
from core.machine import keep_freed_memory  # noqa: E402
from core.models import build_model  # noqa: E402
from core.predict import BATCH_ROWS, PREDICT_PRELOAD, predict  # noqa: E402
from core.runlog import atomic_write_text, make_run_dir  # noqa: E402

FEATURES, CLASSES = 64, 10


def make_checkpoint(root: Path) -> Path:
    cfg = Config().replace("data", source=f"builtin:synthetic?n=2000&features={FEATURES}&classes={CLASSES}")
    torch.manual_seed(0)
    model = build_model(cfg.model, (FEATURES,), CLASSES)
    run_dir = make_run_dir(root, "bench")
    atomic_write_text(run_dir / "config.toml", to_toml(cfg))
    rng = np.random.default_rng(0)
    save_checkpoint(run_dir / "checkpoints" / "last.pt", {
        "config": to_dict(cfg),
        "info": {"name": "synthetic", "input_shape": [FEATURES], "num_classes": CLASSES,
                 "class_names": [f"class{i}" for i in range(CLASSES)],
                 "feature_names": [f"f{i}" for i in range(FEATURES)], "image_shape": None,
                 "mean": rng.normal(0, 1, FEATURES).tolist(), "std": rng.uniform(0.5, 2, FEATURES).tolist()},
        "model": model.state_dict(), "optimizers": None, "epoch": 0, "steps": 0,
    })
    return run_dir


def make_input(root: Path, rows: int, kind: str) -> Path:
    x = np.random.default_rng(1).normal(0, 1.5, (rows, FEATURES)).astype(np.float32)
    if kind == "npz":
        np.savez(root / "input.npz", x=x)
        return root / "input.npz"
    header = ",".join(f"f{i}" for i in range(FEATURES))
    np.savetxt(root / "input.csv", x, fmt="%.6g", delimiter=",", header=header, comments="")
    return root / "input.csv"


def timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bare_loop(rows: int) -> Callable[[], None]:
    """model(x) over the same batches, one process, default threads: no I/O, no formatting."""
    torch.manual_seed(0)
    model = build_model(Config().model, (FEATURES,), CLASSES).eval()
    x = torch.randn(rows, FEATURES)

    def run() -> None:
        with torch.inference_mode():
            for xb in x.split(BATCH_ROWS):
                torch.softmax(model(xb), dim=1)

    return run


def first_process_s() -> float:
    """Time until the forkserver that `traindesk predict` starts (its preloads) has run a first process."""
    t0 = time.perf_counter()
    launcher.warm_up(block=True, preload=PREDICT_PRELOAD)
    return time.perf_counter() - t0


def report(best: dict[str, float], rows: int) -> None:
    bare = rows / best["bare model(x) loop, 1 process"]
    print(f"\n{'':<44} {'rows/s':>12}   vs bare   seconds")
    for name, seconds in best.items():
        rate = rows / seconds
        print(f"{name:<44} {rate:>12,.0f}   {rate / bare:>6.2f}x   {seconds:>7.2f}")
        head, _, workers = name.rpartition(" --workers ")
        if head and workers != "1" and f"{head} --workers 1" in best:
            one = rows / best[f"{head} --workers 1"]
            print(f"{f'  {workers} workers / 1 worker':<44} {rate / one:>12.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def predict_to_null(model: Path, inp: Path, workers: int) -> None:
    result = predict(model, inp, workers)
    with open(os.devnull, "w") as fh:
        result.write_csv(fh)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--formats", default="safetensors,onnx")
    parser.add_argument("--workers", default="1,2,4", help="worker counts to measure")
    parser.add_argument("--input", choices=("csv", "npz"), default="csv")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; each figure is the best of N")
    args = parser.parse_args()
    keep_freed_memory()  # as `traindesk predict` does before it predicts
    print("command: " + " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]))
    print(f"machine: {os.cpu_count()} CPU cores, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="traindesk-bench-") as tmp:
        root = Path(tmp)
        run_dir = make_checkpoint(root / "runs")
        inp = make_input(root, args.rows, args.input)
        print(f"input: {args.rows:,} rows x {FEATURES} features ({args.input}, {inp.stat().st_size / 1e6:.0f} MB); "
              f"batches of {BATCH_ROWS}")
        print(f"process start-up: first worker process (forkserver, torch preloaded) ran after "
              f"{first_process_s():.2f} s (paid once per `traindesk predict --workers N` call, not counted below)")
        (root / "exports").mkdir()
        cases: dict[str, Callable[[], None]] = {"bare model(x) loop, 1 process": bare_loop(args.rows)}
        for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
            try:
                model = export_run(run_dir, fmt, root / "exports").path
            except Exception as exc:  # e.g. the onnx extra is not installed
                print(f"{fmt}: skipped ({exc})")
                continue
            for workers in [int(w) for w in args.workers.split(",")]:
                cases[f"predict {fmt} --workers {workers}"] = functools.partial(predict_to_null, model, inp, workers)
        # Round robin, best of N: on a shared machine the figures of one round see the same load.
        best = {name: timed(fn) for name, fn in cases.items()}
        for _ in range(args.repeat - 1):
            for name, fn in cases.items():
                best[name] = min(best[name], timed(fn))
        report(best, args.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
