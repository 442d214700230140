"""``traindesk runs``: the runs of a folder with status and each run's own figure; ``--import-tensorboard DIR``
makes another tool's TensorBoard logs read-only runs of it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.cli import EXIT_OK


def configure_cli(runs: argparse.ArgumentParser) -> None:
    runs.add_argument("--runs-dir", default="runs")
    runs.add_argument(
        "--import-tensorboard",
        metavar="DIR",
        help="import another tool's TensorBoard logs (a Lightning lightning_logs/ or one version_N of it) as "
        "read-only runs: one per folder of event files, each once",
    )


def cmd_runs(args: argparse.Namespace) -> int:
    from core.metric_names import figure_text, run_figures, run_metric
    from core.services.runs.past import list_runs, read_config

    if args.import_tensorboard:
        return import_tensorboard(args.import_tensorboard, args.runs_dir)
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
        status = "imported" if run.imported() is not None else summary.get("status", "?")
        rate = summary.get("samples_per_s")
        print(
            f"{run.name:<44} {status:<9} {summary.get('epochs_done', 0):>6} "
            f"{figure:>18} {f'{rate:,.0f}' if isinstance(rate, (int, float)) else '-':>11}"
        )
    return EXIT_OK


def import_tensorboard(source: str, runs_dir: str) -> int:
    """One line on stdout per run the logs are (its folder, imported now or before); stderr says which were
    there already and which folders were skipped, and why."""
    from core.services.runs.imported import import_tensorboard as import_logs

    for found in import_logs(source, runs_dir):
        if found.run_dir is None:
            sys.stderr.write(f"runs: skipped {found.source}: {found.skipped}\n")
            continue
        if found.already:
            sys.stderr.write(f"runs: {found.source} was imported already, as {found.run_dir}\n")
        print(found.run_dir)
    return EXIT_OK
