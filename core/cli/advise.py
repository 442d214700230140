"""``traindesk bench``: find the fastest strategy and worker count for a config."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def configure_cli(parser: Any) -> None:
    """probe each strategy and worker count on a config and suggest the fastest"""
    from core.services.advisor import advisable

    probed = ",".join(advisable())
    parser.add_argument("--config", help="config TOML (default: built-in defaults)")
    parser.add_argument("--seconds", type=float, default=3.0, help="training seconds per probe (default 3)")
    parser.add_argument("--max-workers", type=int, help="largest worker count to try (default: cores)")
    parser.add_argument("--strategies", default=probed, help=f"comma-separated strategies to probe (default {probed})")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", dest="json_out", help="also write the full report as JSON here")


def cmd_advise(args: argparse.Namespace) -> int:
    from core.cli import ArgumentError
    from core.config import BOUNDS, Config, apply_overrides, load_config
    from core.services.advisor import advisable, advise
    from core.services.runs import start

    strategies = tuple(s.strip() for s in args.strategies.split(",") if s.strip())
    unknown = [s for s in strategies if s not in advisable()]
    if unknown or not strategies:
        raise ArgumentError(f"traindesk bench: --strategies takes {', '.join(advisable())}; got {args.strategies!r}")
    if not 0.5 <= args.seconds <= 600:
        raise ArgumentError(f"traindesk bench: --seconds must be from 0.5 to 600, got {args.seconds:g}")
    lo, hi, _ = BOUNDS["parallel.workers"]
    if args.max_workers is not None and not lo <= args.max_workers <= hi:
        raise ArgumentError(f"traindesk bench: --max-workers must be from {lo} to {hi}, got {args.max_workers}")
    cfg = load_config(args.config) if args.config else Config()
    cfg = apply_overrides(cfg, list(args.set))
    start.warm_up()

    from core.services.advisor import candidates
    from core.services.machine import note, progress, usable_cores

    with progress(len(candidates(args.max_workers or usable_cores(), strategies)), "probes", unit="probe") as bar:

        def report(line: str) -> None:
            note(bar, line)
            bar.update(1)

        result = advise(cfg, seconds=args.seconds, max_workers=args.max_workers, strategies=strategies, report=report)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    best = result["suggestion"]
    if best is None:
        sys.stderr.write("no probe trained: nothing to suggest\n")
        return 1
    print(
        f"suggestion: --strategy {best['strategy']} --workers {best['workers']} "
        f"({best['samples_per_s']:,.0f} samples/s; fastest probe {result['fastest_samples_per_s']:,.0f})"
    )
    return 0
