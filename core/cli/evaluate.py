"""``traindesk evaluate RUN_DIR``: the command line over core.services.evaluate_run, and its plain-text report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def configure_cli(p: argparse.ArgumentParser) -> None:
    """evaluate a run on its validation split (accuracy, per-class metrics, confusion matrix)"""
    p.add_argument("run_dir", help="the run directory (holds checkpoints/last.pt)")
    p.add_argument("--json", action="store_true", help="print eval.json instead of the text report")
    p.add_argument("--no-write", action="store_true", help="do not write eval.json or update summary.json")
    p.add_argument(
        "--checkpoint",
        choices=("last", "best"),
        default=None,
        help="the weights at the end of the run (last) or of its best evaluation (best); "
        "default: best when checkpoints/best.pt exists, else last (the run's model and figure). "
        "eval.json records that default only",
    )


def cmd_evaluate(args: argparse.Namespace) -> int:
    from core.services.evaluate_run import evaluate_run
    from core.services.runs.files import RunDir

    run = RunDir(Path(args.run_dir).expanduser())
    handed_on = run.default_checkpoint()
    which = args.checkpoint or handed_on
    write = not args.no_write and which == handed_on  # eval.json is the run's model's record, as in the window
    full = evaluate_run(run.path, write=write, checkpoint=which)
    sys.stdout.write(json.dumps(full, indent=2) + "\n" if args.json else format_report(full))
    if write:
        sys.stderr.write(f"wrote {run.evaluation}\n")
    elif not args.no_write:
        sys.stderr.write(
            f"evaluated checkpoints/{which}.pt (epoch {full['checkpoint']['epoch']}); not written: "
            f"{run.evaluation.name} records checkpoints/{handed_on}.pt, the run's model\n"
        )
    return 0


def format_report(full: dict[str, Any], samples: str = "validation samples") -> str:
    """A plain-text report of ``core.training.scores``' figures: accuracy, per-class table, confusion matrix
    (regression: RMSE, MAE, R²); ``samples`` says what was scored."""
    if "per_class" not in full:
        return f"RMSE {full['rmse']:.4g}, MAE {full['mae']:.4g}, R² {full['r2']:.4f} on {full['n']} {samples}\n"
    wrong = full.get("misclassified_total", full["n"] - sum(row[k] for k, row in enumerate(full["confusion"])))
    lines = [
        f"accuracy {full['accuracy']:.4f} on {full['n']} {samples} (macro F1 {full['macro']['f1']:.4f}, {wrong} misclassified)",
        "",
    ]
    width = max(8, *(len(c["class"]) for c in full["per_class"]))
    lines.append(f"{'class':<{width}} {'precision':>9} {'recall':>7} {'f1':>7} {'support':>8}")
    for c in full["per_class"]:
        lines.append(
            f"{c['class']:<{width}} {c['precision']:>9.4f} {c['recall']:>7.4f} {c['f1']:>7.4f} {c['support']:>8}"
        )
    lines += ["", "confusion matrix (rows: true, columns: predicted)"]
    cm = full["confusion"]
    cell = max(4, len(str(max((max(r) for r in cm), default=0))) + 1, *(len(c["class"]) + 1 for c in full["per_class"]))
    names = [c["class"] for c in full["per_class"]]
    lines.append(" " * width + "".join(f"{n:>{cell}}" for n in names))
    for name, row in zip(names, cm):
        lines.append(f"{name:<{width}}" + "".join(f"{v:>{cell}}" for v in row))
    return "\n".join(lines) + "\n"
