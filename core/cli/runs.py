"""``traindesk runs``: the runs of a folder with status and each run's own figure; ``--to-mlflow`` mirrors them,
``--import-tensorboard DIR`` makes another tool's TensorBoard logs read-only runs of it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from core.cli import EXIT_FAILED, EXIT_OK, ArgumentError


def configure_cli(runs: argparse.ArgumentParser) -> None:
    runs.add_argument("--runs-dir", default="runs")
    runs.add_argument(
        "--to-mlflow",
        metavar="URI",
        help="mirror runs to this MLflow tracking URI (what each has not sent; all of --runs-dir without RUN)",
    )
    runs.add_argument("run", nargs="*", metavar="RUN", help="with --to-mlflow: run folders (or names in --runs-dir)")
    runs.add_argument(
        "--import-tensorboard",
        metavar="DIR",
        help="import another tool's TensorBoard logs (a Lightning lightning_logs/ or one version_N of it) as "
        "read-only runs: one per folder of event files, each once",
    )


def cmd_runs(args: argparse.Namespace) -> int:
    if args.to_mlflow is not None:
        return _to_mlflow(args)
    if args.run:
        raise ArgumentError("traindesk runs: RUN folders are for --to-mlflow URI")
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


def _to_mlflow(args: argparse.Namespace) -> int:
    """Send runs to an MLflow tracking URI: a line per run (its MLflow run, what was sent), exit 1 if one failed."""
    from core.services.runs.files import list_runs, not_a_run
    from core.services.tracking import MirrorError, check_uri, mirror_run

    uri = check_uri(args.to_mlflow)
    runs = [_run_folder(r, Path(args.runs_dir), not_a_run) for r in args.run] or [
        r.path
        for r in list_runs(Path(args.runs_dir))
        if r.imported() is None  # another tool's, unless named
    ]
    if not runs:
        print(f"no runs in {args.runs_dir}")
        return EXIT_OK
    failed = 0
    for run in runs:
        try:
            done = mirror_run(run, uri)
        except MirrorError as exc:
            failed += 1
            sys.stderr.write(f"{run.name}: {exc}\n")
            continue
        where = done.entry.link or f"run {done.entry.run_id}"
        what = f"{done.sent:,} metric points sent" if done.sent else "nothing new"
        still = "; live: its own process sends its end" if done.live else ""
        print(f"{run.name}: {where} ({what}{still})")
    return EXIT_FAILED if failed else EXIT_OK


def _run_folder(given: str, runs_dir: Path, not_a_run: Any) -> Path:
    path = Path(given)
    if not path.is_dir() and (runs_dir / given).is_dir():
        path = runs_dir / given
    reason = not_a_run(path)
    if reason:
        raise ArgumentError(f"traindesk runs --to-mlflow: {reason}")
    return path


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
