"""Memory as tables grow: peak PSS of the whole process tree and wall time of `traindesk train` and `predict`.

    .venv/bin/python bench/memory_growth.py [--rows 300000,1000000,3000000] [--features 32]
                                            [--formats csv,parquet,npz] [--predict csv] [--dir DIR]
                                            [--predict-workers N] [--json PATH]

Each table has ``--features`` normal numbers (four decimals) and an integer ``label`` of 10 classes,
written as CSV, Parquet and an uncompressed NPZ (the prediction input is the CSV without its label).
The prediction input is predicted by the model trained on the CSV (its schema reads the columns by
name) and by the one trained on the NPZ (plain numbers). Every command runs as a user types it (``python -m core train ...``: hogwild x 2, the linear model, one
epoch), while this script sums the proportional set size (PSS: shared pages split between the
processes that map them) of the command and all its children every 0.2 s; the peak is printed with
the wall time and the peak as a multiple of the table's float32 data (rows x (features + 1) x 4 bytes).
``--dir`` keeps the files (made once) between invocations.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]


def tree_pss(root: psutil.Process) -> int:
    """The PSS of ``root`` and every process under it, in bytes (processes that end meanwhile count 0)."""
    total = 0
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for p in procs:
        try:
            total += p.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return total


def measure(cmd: list[str], env: dict[str, str]) -> tuple[float, int, int, str, str]:
    """Run ``cmd``; (wall seconds, peak tree PSS in bytes, exit status, its standard output and error)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    peak = 0
    done = threading.Event()
    root = psutil.Process(proc.pid)

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_pss(root))
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    if proc.returncode != 0:
        print(
            f"  failed ({proc.returncode}): {' '.join(cmd)}\n  {err.decode(errors='replace')[-600:]}", file=sys.stderr
        )
    return wall, peak, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def make_tables(folder: Path, rows: int, features: int) -> dict[str, Path]:
    """The table as CSV, Parquet and NPZ, and its features alone as CSV (made once per folder)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    stem = folder / f"table_{rows}x{features}"
    paths = {
        "csv": stem.with_suffix(".csv"),
        "parquet": stem.with_suffix(".parquet"),
        "npz": stem.with_suffix(".npz"),
        "predict_csv": folder / f"features_{rows}x{features}.csv",
    }
    if all(p.exists() for p in paths.values()):
        return paths
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 1, (10, features)).astype(np.float32)
    y = rng.integers(0, 10, rows)
    x = np.round(centres[y] + rng.normal(0, 1.5, (rows, features)).astype(np.float32), 4).astype(np.float32)
    names = [f"f{i}" for i in range(features)]
    table = pa.table({**{n: x[:, i] for i, n in enumerate(names)}, "label": y})
    pacsv.write_csv(table, paths["csv"])
    pacsv.write_csv(table.drop_columns(["label"]), paths["predict_csv"])
    pq.write_table(table, paths["parquet"])
    np.savez(paths["npz"], x=x, y=y)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="300000,1000000,3000000")
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--formats", default="csv,parquet,npz")
    ap.add_argument("--predict", default="csv", help="inputs to predict from (csv; none for no prediction)")
    ap.add_argument("--dir", default=None, help="keep the tables here (default: a temporary folder)")
    ap.add_argument("--predict-workers", type=int, help="predict with --workers N (default: the command's own choice)")
    ap.add_argument("--json", type=Path, help="also write every command's peak and wall time here (bench/check.py)")
    args = ap.parse_args()
    points: list[dict[str, object]] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.dir) if args.dir else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"{os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.0f} GiB; peak PSS of the process tree")
        print(f"{'command':<28} {'rows':>10} {'data f32':>9} {'peak PSS':>9} {'x data':>7} {'wall s':>7}")
        for rows in [int(r) for r in args.rows.split(",")]:
            paths = make_tables(folder, rows, args.features)
            data = rows * (args.features + 1) * 4
            runs: dict[str, Path] = {}
            for fmt in [f for f in args.formats.split(",") if f]:
                name = f"{fmt}_{rows}"
                cmd = [py, "-m", "core", "train", "--quiet", "--runs-dir", str(Path(tmp) / "runs"), "--name", name]
                cmd += ["--epochs", "1", "--set", f'data.source="{fmt}:{paths[fmt]}"', "--set", 'model.kind="linear"']
                wall, peak, rc, out, _ = measure(cmd, env)
                if rc == 0:
                    runs[fmt] = Path(out.strip().splitlines()[-1])
                    points.append({"command": f"train {fmt}", "rows": rows, "peak_x_data": peak / data, "wall_s": wall})
                print(
                    f"{'train ' + fmt:<28} {rows:>10,} {data / 1e9:>8.2f}G {peak / 1e9:>8.2f}G "
                    f"{peak / data:>6.2f}x {wall:>7.1f}",
                    flush=True,
                )
            for fmt in [f for f in args.predict.split(",") if f and f != "none"]:
                # the table's own model (its schema reads the columns by name), and one trained on the NPZ's
                # array (plain numbers: the CSV is cut into pieces the pool parses)
                for label, trained in (("table model", "csv"), ("array model", "npz")):
                    if trained not in runs:
                        continue
                    out = Path(tmp) / "predictions.csv"
                    wall, peak, rc, _, err = measure(
                        [
                            py,
                            "-m",
                            "core",
                            "predict",
                            str(runs[trained]),
                            str(paths[f"predict_{fmt}"]),
                            "--out",
                            str(out),
                            *(["--workers", str(args.predict_workers)] if args.predict_workers else []),
                        ],
                        env,
                    )
                    if rc == 0:
                        command = f"predict {fmt}, {label}"
                        points.append({"command": command, "rows": rows, "peak_x_data": peak / data, "wall_s": wall})
                    used = re.search(r"(\d+) worker\(s\)", err)  # without --workers: as many as repay a pool
                    print(
                        f"{'predict ' + fmt + ', ' + label:<28} {rows:>10,} {data / 1e9:>8.2f}G {peak / 1e9:>8.2f}G "
                        f"{peak / data:>6.2f}x {wall:>7.1f}  {used.group(1) if used else '?'} process(es)",
                        flush=True,
                    )
    if args.json:
        args.json.write_text(json.dumps({"points": points}, indent=1))


if __name__ == "__main__":
    main()
