"""``traindesk export RUN_DIR --format F``: the command line over core.services.export."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def configure_cli(p: argparse.ArgumentParser) -> None:
    """export a run's trained model (safetensors, state-dict, torch-export, onnx, onnx-int8), verified"""
    from core.services.formats import EXPORT_FORMATS, OUTPUTS

    p.add_argument("run_dir", help="the run directory (holds checkpoints/last.pt)")
    p.add_argument("--format", required=True, choices=list(EXPORT_FORMATS))
    p.add_argument(
        "--out",
        help="file to write (default: RUN_DIR/exports/model.<ext>, model-int8.onnx for onnx-int8); a folder takes "
        "that name",
    )
    p.add_argument(
        "--output",
        choices=OUTPUTS,
        default="probabilities",
        help="what the torch-export and onnx graphs return (default: probabilities)",
    )
    p.add_argument(
        "--max-loss",
        type=float,
        default=None,
        metavar="POINTS",
        help="onnx-int8: the most points of accuracy (or R² x 100) on the validation rows the file may lose "
        "against the trained model before it is refused (default: 1)",
    )
    p.add_argument(
        "--accept-loss",
        action="store_true",
        help="onnx-int8: write the file whatever it loses (its cost is still measured and recorded)",
    )
    p.add_argument(
        "--checkpoint",
        choices=("last", "best"),
        default=None,
        help="the weights at the end of the run (last) or of its best evaluation (best); "
        "default: best when checkpoints/best.pt exists, else last",
    )


def cmd_export(args: argparse.Namespace) -> int:
    from core.services.export import export_run
    from core.services.runs.files import RunDir

    which = args.checkpoint or RunDir(Path(args.run_dir).expanduser()).default_checkpoint()
    from core.services.export import MAX_LOSS

    result = export_run(
        Path(args.run_dir),
        args.format,
        Path(args.out) if args.out else None,
        args.output,
        which,
        MAX_LOSS if args.max_loss is None else args.max_loss,
        args.accept_loss,
    )
    sys.stderr.write(result.summary() + f" ({result.seconds:.1f} s)\n")
    for path in result.files:
        print(path)
    return 0
