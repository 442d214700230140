"""``traindesk runs``: the runs of a folder with status and each run's own figure."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.cli import EXIT_OK


def configure_cli(runs: argparse.ArgumentParser) -> None:
    runs.add_argument("--runs-dir", default="runs")


def cmd_runs(args: argparse.Namespace) -> int:
    from core.metric_names import figure_text, run_figures, run_metric
    from core.services.runs.past import list_runs, read_config

    runs = list_runs(Path(args.runs_dir))
    if not runs:
        print(f"no runs in {args.runs_dir}")
        return EXIT_OK
    print(f"{'run':<44} {'status':<9} {'epochs':>6} {'figure':>18} {'samples/s':>11}")
    for run in runs:
        summary = run.read_summary()
        if summary is None:
            print(f"{run.name:<44} {'running?':<9}")
            continue
        metric = run_metric(summary, read_config(run))
        kept, last = run_figures(summary, metric)
        figure = figure_text(metric, kept if kept is not None else last) or "-"  # the run's model, once kept
        print(
            f"{run.name:<44} {summary.get('status', '?'):<9} {summary.get('epochs_done', 0):>6} "
            f"{figure:>18} {summary.get('samples_per_s', 0):>11,.0f}"
        )
    return EXIT_OK
