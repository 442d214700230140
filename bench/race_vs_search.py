"""From one plateaued run's state, what the same wall time buys: going on unchanged, a race of 4 variants, or an
Optuna search of the same settings from scratch.

    .venv/bin/python bench/race_vs_search.py [--epochs 8] [--quick]

The run (a table of 20,000 rows whose class is a wavy function of 8 numbers, an MLP 64-64, SGD at a rate
too high for it: its accuracy flattens early and wobbles around 0.75-0.8) trains for ``--epochs``; its checkpoint is then copied three times. (b) races ``optim.lr`` 0.1x, 0.3x, 1x, 3x from it (rungs
at 2 and 6 epochs after the start: two, then one, go on; the winner installed as the run) and sets the wall time
T; (a) continues a copy unchanged and is stopped after T; (c) runs an Optuna search (TPE, median pruning, two
trials at a time, each as many epochs as the race trained after the start) over the same four rates from
scratch and is stopped after T. Each line is the figure the
result hands on (``summary.json``'s kept model, else its last evaluation), the run's figure before, and the
wall time. ``--quick`` checks that the script runs (one epoch and a short race): its figures mean nothing.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine_vs_bare import machine

from core.config import Config, apply_overrides, from_dict, to_dict
from core.launchers import local as launcher
from core.metric_names import run_figures, run_metric
from core.runfiles.layout import RunDir
from core.services.race.plan import plan_race
from core.services.race.race import Race
from core.session import Session

BASE = [
    'data.target="label"',
    "model.hidden=[64,64]",
    'optim.name="sgd"',
    "optim.lr=0.15",
    "optim.momentum=0.9",
    "train.batch_size=32",
    "parallel.strategy=single",
    "parallel.workers=1",
    "train.early_stop_patience=0",
]
FACTORS = (0.1, 0.3, 1.0, 3.0)


def wavy_table(path: Path, rows: int = 20_000) -> Path:
    """A table an MLP learns slowly: the class is the sign of a wavy function of 8 numbers, with noise."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (rows, 8))
    score = np.sin(4 * x[:, 0]) * np.cos(4 * x[:, 1]) + np.sin(3 * x[:, 2] * x[:, 3]) + 0.3 * rng.normal(size=rows)
    y = (score > 0).astype(int)
    lines = [",".join([f"x{i}" for i in range(8)] + ["label"])]
    lines += [",".join(f"{v:.4f}" for v in row) + f",{label}" for row, label in zip(x, y)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def figure(run: Path) -> float:
    summary = RunDir(run).read_summary() or {}
    metric = run_metric(summary)
    kept, last = run_figures(summary, metric)
    value = kept if kept is not None else last
    return float("nan") if value is None else value


def stopped_after(session: Session, seconds: float) -> Path:
    """Run ``session`` and stop it after ``seconds`` of wall time (or when it ends by itself)."""
    timer = threading.Timer(seconds, lambda: session.stop(60))
    session.start()
    timer.start()
    try:
        session.wait()
    finally:
        timer.cancel()
    assert session.run_dir is not None, session.error
    return Path(session.run_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=12, help="epochs of the run before the race")
    parser.add_argument("--rungs", default="2,6", help="the race's rungs, epochs after the start")
    parser.add_argument("--quick", action="store_true", help="one epoch and a short race: checks the script runs")
    args = parser.parse_args()
    epochs = 1 if args.quick else args.epochs
    launcher.warm_up(block=True)
    print(f"machine: {machine()}")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        source = f'data.source="csv:{wavy_table(root / "wavy.csv")}"'
        base = [source, *BASE]
        cfg = apply_overrides(Config(), [*base, f"train.epochs={epochs}"])
        parent = Session(cfg, runs_dir=root / "runs")
        parent.start()
        assert parent.wait() == "finished", parent.error
        run = Path(parent.run_dir or "")
        before = figure(run)
        copies = {name: root / name / run.name for name in ("race", "same")}
        for path in copies.values():
            shutil.copytree(run, path)
        lr = cfg.optim.lr
        # (b) the race sets the wall time
        t0 = time.perf_counter()
        vary = ["optim.lr=" + ",".join(f"{f:g}x" for f in FACTORS)]
        plan = plan_race(copies["race"], vary, rungs=[1] if args.quick else [int(r) for r in args.rungs.split(",")])
        record = Race(plan).run()
        wall = time.perf_counter() - t0
        raced = figure(copies["race"])
        winner = record.variants[record.winner or 0].label
        # (a) the same run going on unchanged, for the same wall time
        same = Session.from_run(copies["same"], epochs=100000)
        t1 = time.perf_counter()
        on = figure(stopped_after(same, wall))
        same_wall = time.perf_counter() - t1
        # (c) an Optuna search of the same rates from scratch, for the same wall time
        rates = [round(lr * f, 6) for f in FACTORS]
        # each trial trains as many epochs as the race's variants did after the start
        space = to_dict(apply_overrides(Config(), [*base, f"train.epochs={plan.rungs[-1]}"]))
        space["parallel"].update(strategy="search", workers=2)
        space["search"].update({"trials": 100, "optim.lr": rates})
        search_cfg = from_dict(space)
        t2 = time.perf_counter()
        searched = figure(stopped_after(Session(search_cfg, runs_dir=root / "search"), wall))
        search_wall = time.perf_counter() - t2
    print(f"run: wavy table, MLP [64, 64], SGD lr {lr} momentum 0.9, batch 32, {epochs} epochs: val acc {before:.4f}\n")
    print(f"{'from the run at epoch ' + str(epochs):<44} {'val acc':>8} {'wall s':>7}")
    print(f"{'(a) going on unchanged':<44} {on:>8.4f} {same_wall:>7.1f}")
    print(f"{'(b) race of 4 rates, won by ' + winner:<44} {raced:>8.4f} {wall:>7.1f}")
    print(f"{'(c) Optuna search of those rates, from scratch':<44} {searched:>8.4f} {search_wall:>7.1f}")
    print(f"\nrungs {plan.rungs} epochs after the start; race figures at each rung:")
    for v in record.variants:
        print(f"  {v.label:<12} {' '.join(f'{f:.4f}' for f in v.figures if f is not None):<24} {v.out}")


if __name__ == "__main__":
    main()
