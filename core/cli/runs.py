"""``traindesk runs``: the runs of a folder with status and final accuracy."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.cli import EXIT_OK


def configure_cli(runs: argparse.ArgumentParser) -> None:
    runs.add_argument("--runs-dir", default="runs")


def cmd_runs(args: argparse.Namespace) -> int:
    from core.runfiles.layout import list_runs

    runs = list_runs(Path(args.runs_dir))
    if not runs:
        print(f"no runs in {args.runs_dir}")
        return EXIT_OK
    print(f"{'run':<44} {'status':<9} {'epochs':>6} {'val_acc':>8} {'samples/s':>11}")
    for run in runs:
        summary = run.read_summary()
        if summary is None:
            print(f"{run.name:<44} {'running?':<9}")
            continue
        final = {**(summary.get("final") or {}), **(summary.get("result") or {})}  # the run's model, once kept
        acc = final.get("val_accuracy")
        acc_text = f"{acc:.4f}" if isinstance(acc, (int, float)) else "-"
        if acc is None and isinstance(final.get("val_r2"), (int, float)):  # regression: R² in that column
            acc_text = f"R² {final['val_r2']:.3f}"
        print(
            f"{run.name:<44} {summary.get('status', '?'):<9} {summary.get('epochs_done', 0):>6} "
            f"{acc_text:>8} {summary.get('samples_per_s', 0):>11,.0f}"
        )
    return EXIT_OK
