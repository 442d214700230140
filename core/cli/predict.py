"""``traindesk predict MODEL INPUT``: the command line over core.services.predict."""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from core.errors import UserError


def configure_cli(p: argparse.ArgumentParser) -> None:
    """predict classes for a CSV, Parquet, JSON lines, NPZ or image folder with an exported model"""
    from core.services.predict import BATCH_ROWS

    p.add_argument(
        "model", help="exported model (.safetensors with model.json, .pt2, .onnx), a run directory or a checkpoint file"
    )
    from core.services.inputs import INPUT_KINDS

    kinds = "; ".join(f"{k.label} ({', '.join(k.suffixes) or 'a folder'}): {k.help}" for k in INPUT_KINDS)
    p.add_argument("input", help=f"the training features, raw: {kinds}")
    p.add_argument("--out", help="predictions CSV (default: standard output)")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes to split the input across, one compute thread each: this one and N-1 more "
        "(default: one per CPU core for a large input, this process alone for a small one)",
    )
    p.add_argument(
        "--checkpoint",
        choices=("best", "last"),
        default=None,
        help="a run directory's weights: its best evaluation or its end "
        "(default: best when checkpoints/best.pt exists, else last)",
    )
    p.add_argument(
        "--by-position",
        action="store_true",
        help="take a table's columns in order when their names differ from the model's features "
        "(the same number of columns; an id and a label column are left out)",
    )
    p.add_argument(
        "--on",
        choices=("local", "ray"),
        default="local",
        help="where the rows are predicted: this machine (default), or a Ray cluster with Ray Data "
        "(--workers predictor actors, default 2; needs traindesk[ray])",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="the Ray cluster to predict on (default: RAY_ADDRESS, else a Ray of this machine's own)",
    )
    p.add_argument("--batch-rows", type=int, default=BATCH_ROWS, help=argparse.SUPPRESS)


def cmd_predict(args: argparse.Namespace) -> int:
    if args.batch_rows < 1:
        raise UserError(f"predict: --batch-rows must be at least 1, got {args.batch_rows}")
    out = Path(args.out).expanduser() if args.out else None
    if out is not None and not out.parent.is_dir():
        raise UserError(f"predict: cannot write {out}: folder {out.parent} does not exist")
    from core.services.machine import drop_cuda_library_pages, keep_freed_memory, skip_pandas, trim_freed_memory
    from core.services.runs.files import RunDir

    keep_freed_memory()  # this process predicts itself with --workers 1 (and small inputs)
    if args.on == "local":  # Ray Data works in pandas; a local prediction never does
        skip_pandas()
        if _runs_on_torch(args):  # an ONNX graph never imports torch (0.5-1.5 s of the command)
            import torch  # noqa: F401 - imported now to let go of what its CUDA libraries' loading left

            drop_cuda_library_pages()
    if args.on == "ray":
        from core.services.ray_cluster import require_ray

        require_ray("predict")
        from core.services.predict.on_ray import predict_on_ray

        result = predict_on_ray(
            Path(args.model),
            Path(args.input),
            args.workers,
            args.batch_rows,
            args.checkpoint,
            args.by_position,
            args.ray_address,
        )
    else:
        if args.ray_address:
            raise UserError("predict: --ray-address goes with --on ray")
        result = _predict_streamed(args, out)  # without --out its rows are on standard output already
        if result is None:  # their reader went away
            return 0
    for note in result.notes:
        sys.stderr.write(f"predict: {note}\n")
    scores = result.evaluation()  # a labelled input is a test set: the figures the window's Predict tab shows
    if scores is not None:
        from core.cli.evaluate import format_report

        sys.stderr.write("test set: " + format_report(scores, "labelled samples"))
    if out is None:
        if result.written is None:  # Ray's rows, written now
            _to_stdout(lambda: result.write_csv(sys.stdout))
        return 0
    if result.written is None:
        result.save(out)
    # what the streamed blocks left in the heap and in pyarrow's pool goes back before the process exits:
    # torch's CUDA libraries read about 140 MB of their pages again in their destructors at exit
    trim_freed_memory()
    rate = result.n_rows / max(result.seconds, 1e-9)
    used = result.model_path
    run = RunDir(used.parent.parent)
    label = f"{run.name}/{used.relative_to(run.path).as_posix()}" if used.parent == run.checkpoints else used.name
    sys.stderr.write(
        f"predicted {result.n_rows:,} rows with {label} in {result.seconds:.2f} s "
        f"({rate:,.0f} rows/s, {result.workers} worker(s))\n"
    )
    print(out)
    return 0


def _runs_on_torch(args: argparse.Namespace) -> bool:
    """Whether the model predicted needs torch; a model path that does not resolve is said by ``predict``."""
    from core.services.formats import needs_torch, resolve_model_path

    try:
        return needs_torch(resolve_model_path(Path(args.model), args.checkpoint))
    except Exception:
        return True


def _to_stdout(write: Callable[[], object]) -> bool:
    """``write()`` to standard output; False when its reader went away (e.g. `| head`: it has all it
    wanted), standard output then pointing at /dev/null."""
    try:
        write()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return False
    return True


def _predict_streamed(args: argparse.Namespace, out: Path | None) -> Any:
    """Local prediction written as it goes: to ``out`` atomically (a temp file beside it, renamed once
    every row is in; an error leaves nothing), or to standard output (None if its reader went away)."""
    from core.services.predict import predict
    from core.services.runs.files import atomic_write

    def run(fh: IO[str]) -> Any:
        return predict(
            Path(args.model), Path(args.input), args.workers, args.batch_rows, args.checkpoint, args.by_position, fh
        )

    kept: list[Any] = []
    if out is None:
        return kept[0] if _to_stdout(lambda: kept.append(run(sys.stdout))) else None

    def write(raw: IO[bytes]) -> None:
        text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        try:
            kept.append(run(text))
            text.flush()
        finally:
            text.detach()  # the file stays atomic_write's to close (or remove)

    try:
        atomic_write(out, write)
    except OSError as exc:
        raise UserError(f"predict: cannot write {out}: {exc.strerror or exc}") from None
    return kept[0]
