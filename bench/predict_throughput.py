"""Batch prediction time: `traindesk predict` end to end, as a user runs it, with no --workers, 1 and 2.

    .venv/bin/python bench/predict_throughput.py [--rows 2000,200000,2000000] [--formats onnx,safetensors]
                                                 [--workers auto,1,2] [--input csv,npz] [--repeat 3] [--warm]
                                                 [--tables 2000000x8,200000x32] [--json PATH]

The headline is the whole command, started as a subprocess the way a user
types it (``python -m core predict MODEL INPUT --out FILE [--workers N]``):
interpreter start, imports, the pool's start-up, reading, predicting and
writing the CSV. Commands run round robin, ``--repeat`` rounds; each figure
is the median of the rounds with the best in brackets, and the ratios are
against ``--workers 1`` on the same input. The model is the default MLP
(64 -> 256 -> 256 -> 10) with untrained weights (time does not depend on
them).

``--tables ROWSxCOLUMNS,...`` times tables instead: for each, a model trained
by the engine (as ``traindesk train`` does, one epoch) on 3,000 rows of that
many number columns and a label, exported to ONNX (its schema in front), then
a CSV of ROWS rows of the same columns predicted (read, encoded, predicted and
written: the path of a table model, the blocks or the pool's pieces).

``--warm`` adds the old in-process figures apart: ``predict()`` in this
process with the forkserver already started (its start-up printed apart),
against a bare ``model(x)`` loop over the same batches: the ceiling, not
what a user waits for.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.config import Config, to_dict, to_toml
from core.host.machine import keep_freed_memory
from core.launchers import local as launcher
from core.runfiles.writing import atomic_write_text, make_run_dir
from core.services.export import export_run
from core.services.predict import BATCH_ROWS, predict, predict_preload
from core.training.checkpoint import save_checkpoint
from core.training.models import build_model

FEATURES, CLASSES = 64, 10


def make_checkpoint(root: Path) -> Path:
    cfg = Config().replace("data", source=f"builtin:synthetic?n=2000&features={FEATURES}&classes={CLASSES}")
    torch.manual_seed(0)
    model = build_model(cfg.model, (FEATURES,), CLASSES)
    run_dir = make_run_dir(root, "bench")
    atomic_write_text(run_dir / "config.toml", to_toml(cfg))
    rng = np.random.default_rng(0)
    save_checkpoint(
        run_dir / "checkpoints" / "last.pt",
        {
            "config": to_dict(cfg),
            "info": {
                "name": "synthetic",
                "input_shape": [FEATURES],
                "num_classes": CLASSES,
                "class_names": [f"class{i}" for i in range(CLASSES)],
                "feature_names": [f"f{i}" for i in range(FEATURES)],
                "image_shape": None,
                "mean": rng.normal(0, 1, FEATURES).tolist(),
                "std": rng.uniform(0.5, 2, FEATURES).tolist(),
            },
            "model": model.state_dict(),
            "optimizers": None,
            "epoch": 0,
            "steps": 0,
        },
    )
    return run_dir


def make_input(root: Path, rows: int, kind: str) -> Path:
    x = np.round(np.random.default_rng(1).normal(0, 1.5, (rows, FEATURES)), 4).astype(np.float32)
    path = root / f"input-{rows}.{kind}"
    if kind == "npz":
        np.savez(path, x=x)
        return path
    import pyarrow as pa
    import pyarrow.csv as pacsv

    with path.open("wb") as fh:  # pyarrow writes it in seconds where np.savetxt takes minutes
        fh.write((",".join(f"f{i}" for i in range(FEATURES)) + "\n").encode())
        pacsv.write_csv(
            pa.table({f"f{i}": c for i, c in enumerate(x.T)}),
            fh,
            write_options=pacsv.WriteOptions(include_header=False, quoting_style="none"),
        )
    return path


def table_csv(path: Path, rows: int, columns: int, seed: int, label: bool) -> Path:
    """``rows`` rows of ``columns`` numbers (4 decimals), and a label of three classes when ``label``."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    x = np.round(np.random.default_rng(seed).normal(0, 1.5, (rows, columns)), 4)
    table = {f"f{i}": x[:, i] for i in range(columns)}
    if label:
        table["label"] = np.array(["abc"[k] for k in ((x[:, 0] > 0).astype(int) + (x[:, 1] > 1)).tolist()])
    with path.open("wb") as fh:
        pacsv.write_csv(pa.table(table), fh, write_options=pacsv.WriteOptions(quoting_style="none"))
    return path


def table_case(root: Path, rows: int, columns: int) -> tuple[Path, Path]:
    """An ONNX export of a model trained on a table of ``columns`` numbers, and a CSV of ``rows`` rows for it."""
    from core.config import apply_overrides
    from core.session import Session

    train = table_csv(root / f"train-{columns}.csv", 3000, columns, 0, label=True)
    cfg = apply_overrides(
        Config(), [f'data.source="csv:{train}"', "parallel.strategy=single", "train.epochs=1", "train.seed=0"]
    )
    session = Session(cfg, runs_dir=root / "runs")
    session.start()
    if session.wait(600) != "finished" or session.run_dir is None:
        raise SystemExit(f"training the {columns}-column table failed")
    (root / f"table-{columns}").mkdir()
    model = export_run(session.run_dir, "onnx", root / f"table-{columns}" / "model.onnx").path
    return model, table_csv(root / f"table-{rows}x{columns}.csv", rows, columns, 1, label=False)


def tables(root: Path, spec: str, workers: list[str], repeat: int) -> list[dict[str, object]]:
    """``--tables``: each case's model and input, the commands round robin as ``end_to_end`` runs them."""
    cases: list[dict[str, object]] = []
    for case in [c.strip() for c in spec.split(",") if c.strip()]:
        rows, _, columns = case.partition("x")
        model, inp = table_case(root, int(rows), int(columns))
        print(f"input: {inp.name}: {inp.stat().st_size / 1e6:,.1f} MB, {columns} number columns; a table's model")
        cases += end_to_end({"table-onnx": model}, [inp], workers, repeat, root / "out.csv")
    return cases


def command(model: Path, inp: Path, out: Path, workers: str) -> list[str]:
    """`traindesk predict` as a user types it."""
    cmd = [sys.executable, "-m", "core", "predict", str(model), str(inp), "--out", str(out)]
    return cmd if workers == "auto" else [*cmd, "--workers", workers]


def run_command(cmd: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
    return seconds


def end_to_end(
    models: dict[str, Path], inputs: list[Path], workers: list[str], repeat: int, out: Path
) -> list[dict[str, object]]:
    """The headline: each command's wall time, median (best) of ``repeat`` round-robin rounds; also returned."""
    cases = {
        (fmt, inp, w): command(model, inp, out, w) for inp in inputs for fmt, model in models.items() for w in workers
    }
    times: dict[tuple[str, Path, str], list[float]] = {case: [] for case in cases}
    load = os.getloadavg()[0]
    for _ in range(repeat):
        for case, cmd in cases.items():
            times[case].append(run_command(cmd))
    print(
        f"\nend to end (the command as a user runs it), seconds: median of {repeat} (best); load average before: {load:.1f}"
    )
    print(
        f"{'input':<24} {'model':<12} "
        + " ".join(f"{'--workers ' + w if w != 'auto' else 'no --workers':>20}" for w in workers)
        + "   ratios to --workers 1 (median)"
    )
    for inp in inputs:
        for fmt in models:
            med = {w: statistics.median(times[(fmt, inp, w)]) for w in workers}
            best = {w: min(times[(fmt, inp, w)]) for w in workers}
            cells = " ".join(f"{f'{med[w]:.2f} ({best[w]:.2f})':>20}" for w in workers)
            ratios = "  ".join(f"{w}: {med['1'] / med[w]:.2f}x" for w in workers if w != "1" and "1" in med)
            print(f"{inp.name:<24} {fmt:<12} {cells}   {ratios}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return [
        {"input": inp.name, "model": fmt, "workers": w, "median_s": statistics.median(ts), "best_s": min(ts)}
        for (fmt, inp, w), ts in times.items()
    ]


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


def first_process_s(model: Path) -> float:
    """Time until the forkserver that `traindesk predict` starts (its preloads) has run a first process."""
    t0 = time.perf_counter()
    launcher.warm_up(block=True, preload=predict_preload(model), tensors=False)
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


def warm_pool(
    root: Path, run_dir: Path, models: dict[str, Path], rows: int, kind: str, workers: list[str], repeat: int
) -> None:
    """The in-process figures, pool started first: what prediction itself costs, not what a user waits."""
    inp = make_input(root, rows, kind)
    print(
        f"\nwarm pool, in this process: {rows:,} rows ({kind}); the first worker process (forkserver and its "
        f"preloads) ran after {first_process_s(next(iter(models.values()))):.2f} s (not counted below)"
    )
    cases: dict[str, Callable[[], None]] = {"bare model(x) loop, 1 process": bare_loop(rows)}
    for fmt, model in models.items():
        for w in [w for w in workers if w != "auto"]:
            cases[f"predict {fmt} --workers {w}"] = functools.partial(predict_to_null, model, inp, int(w))
    # Round robin, best of N: on a shared machine the figures of one round see the same load.
    best = {name: timed(fn) for name, fn in cases.items()}
    for _ in range(repeat - 1):
        for name, fn in cases.items():
            best[name] = min(best[name], timed(fn))
    report(best, rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="2000,200000,2000000", help="input sizes, comma-separated")
    parser.add_argument("--formats", default="onnx,safetensors")
    parser.add_argument("--workers", default="auto,1,2", help="worker counts to run (auto: no --workers)")
    parser.add_argument("--input", default="csv,npz", help="input kinds: csv, npz or both")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; figures are the median (and best)")
    parser.add_argument("--warm", action="store_true", help="also the in-process figures with a warm pool")
    parser.add_argument(
        "--tables", default="", help="ROWSxCOLUMNS,...: a table model's CSV of that many number columns instead"
    )
    parser.add_argument("--json", type=Path, help="also write every command's seconds here (bench/check.py reads it)")
    args = parser.parse_args()
    keep_freed_memory()  # as `traindesk predict` does before it predicts
    workers = [w.strip() for w in args.workers.split(",") if w.strip()]
    print("command: " + " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]))
    print(
        f"machine: {os.cpu_count()} CPU cores, torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory(prefix="traindesk-bench-") as tmp:
        root = Path(tmp)
        if args.tables:
            cases = tables(root, args.tables, workers, args.repeat)
            if args.json:
                args.json.write_text(json.dumps({"cases": cases}, indent=1))
            return 0
        run_dir = make_checkpoint(root / "runs")
        (root / "exports").mkdir()
        models: dict[str, Path] = {}
        for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
            try:
                models[fmt] = export_run(run_dir, fmt, root / "exports").path
            except Exception as exc:  # e.g. the onnx extra is not installed
                print(f"{fmt}: skipped ({exc})")
        inputs = [make_input(root, int(r), k) for r in args.rows.split(",") for k in args.input.split(",")]
        for inp in inputs:
            print(
                f"input: {inp.name}: {inp.stat().st_size / 1e6:,.1f} MB, {FEATURES} features; batches of {BATCH_ROWS}"
            )
        cases = end_to_end(models, inputs, workers, args.repeat, root / "out.csv")
        if args.json:
            args.json.write_text(json.dumps({"cases": cases}, indent=1))
        if args.warm:
            warm_pool(
                root, run_dir, models, int(args.rows.split(",")[-1]), args.input.split(",")[0], workers, args.repeat
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
