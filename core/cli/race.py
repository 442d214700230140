"""``traindesk race RUN --vary KEY=V1,V2,...``: clones of a run's state race; the worse half stops at each rung,
the winner goes on as the run (or as a fork). Progress on stderr; the winner's run folder last on stdout."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

from core.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, ArgumentError


def configure_cli(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN_DIR", help="the run raced, from its last checkpoint (a stopped or ended run)")
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="a setting the variants change (optim.*, train.*): values, or multiples of the run's (0.3x,1x,3x); "
        "repeatable: the variants are every combination",
    )
    p.add_argument(
        "--rungs",
        help="epochs after the start at which the worse half stops, e.g. 1,2,4 (default: "
        "1, 2, 4, ... as many as halve the variants down to --keep)",
    )
    p.add_argument("--keep", type=int, default=1, help="variants left at the end (the best goes on)")
    p.add_argument("--as-fork", action="store_true", help="the winner goes on as a fork; the run stays as it is")
    p.add_argument("--keep-losers", action="store_true", help="keep the eliminated variants' checkpoints")
    p.add_argument("--resume", action="store_true", help="go on with the run's last race that did not end")


def _rungs(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ArgumentError(f"traindesk race: --rungs must be epoch counts like 1,2,4, got {text!r}") from None


def cmd_race(args: argparse.Namespace) -> int:
    from core.cli.train import Interrupts
    from core.services.race.plan import plan_race
    from core.services.race.race import Race, plan_of, resumable

    def say(line: str) -> None:
        sys.stderr.write(line + "\n")

    with Interrupts() as interrupts:
        if args.resume:
            if args.vary or args.rungs:
                raise ArgumentError("traindesk race: --resume goes on with the race as it was; drop --vary and --rungs")
            folder = resumable(Path(args.run))  # RaceRunning (exit 2) while a race of the run runs
            if folder is None:
                raise ArgumentError(f"traindesk race: {args.run} has no race to resume")
            race = Race.resumed(plan_of(folder), folder, say, keep_losers=args.keep_losers)
            as_fork = race.record.as_fork
        else:
            race = Race(
                plan_race(args.run, args.vary, _rungs(args.rungs), args.keep), say, keep_losers=args.keep_losers
            )
            as_fork = args.as_fork
        # the run's race lock, before a word is said: a race of the run that runs now (another process's) is one
        # line, exit 2, and nothing starts; from here a Ctrl+C stops the race, which lets the lock go
        race.claim()
        interrupts.immediate = False
        if not args.resume:
            labels = ", ".join(v.label for v in race.plan.variants)
            say(
                f"race of {len(race.plan.variants)} variants from epoch {race.plan.start_epoch} "
                f"(ranked by {race.plan.metric}, {race.slots} at a time): {labels}"
            )
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["record"] = race.run(as_fork=as_fork)
            except BaseException as exc:
                outcome["error"] = exc

        worker = threading.Thread(target=run, name="traindesk-race-main")
        worker.start()
        asked = 0
        while worker.is_alive():
            worker.join(0.2)
            if interrupts.count > asked:
                asked = interrupts.count
                say("interrupted: stopping every variant")
                threading.Thread(target=race.stop, daemon=True).start()
    if "error" in outcome:
        raise outcome["error"]
    record = outcome["record"]
    if record.state == "stopped":
        return EXIT_INTERRUPTED if interrupts.count else EXIT_FAILED
    print(race.winner_dir)
    return EXIT_OK
