"""``traindesk pause|resume|stop RUN_DIR``: write the run's control file, wait for the answer."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.cli import EXIT_FAILED, EXIT_OK


def configure_cli(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run's directory")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the run to acknowledge")


def cmd_control(args: argparse.Namespace) -> int:
    """pause / resume / stop: write the run's control file, wait for the state record that answers it."""
    from core.services.runs.control import send, wait_acknowledged
    from core.services.runs.files import MetricsTail

    run_dir = Path(args.run_dir)
    tail = MetricsTail(run_dir / "metrics.jsonl", start_at_end=True)
    request = send(run_dir, args.command)
    record = wait_acknowledged(run_dir, request, timeout=args.timeout, tail=tail)
    if record is None:
        sys.stderr.write(f"{args.command}: {run_dir} did not acknowledge within {args.timeout:g} s\n")
        return EXIT_FAILED
    print(f"{record['state']}")
    return EXIT_OK
