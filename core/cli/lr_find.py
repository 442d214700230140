"""``traindesk lr-find CONFIG``: the command line over core.services.lr_finder."""

from __future__ import annotations

import argparse
import sys

from core.services.lr_finder import END_LR, START_LR, STEPS


def configure_cli(p: argparse.ArgumentParser) -> None:
    """suggest a learning rate for a config: fastai's range test with its valley suggestion"""
    p.add_argument("config", nargs="?", help="config TOML (default: built-in defaults)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--start", type=float, default=START_LR, help=f"first lr (default {START_LR:g})")
    p.add_argument("--end", type=float, default=END_LR, help=f"last lr (default {END_LR:g})")
    p.add_argument("--steps", type=int, default=STEPS, help=f"mini-batches (default {STEPS})")
    p.add_argument("--csv", help="write the curve (lr, smoothed loss) to this CSV file")


def cmd_lr_find(args: argparse.Namespace) -> int:
    from core.config import Config, apply_overrides, load_config
    from core.services.lr_finder import find_lr

    cfg = load_config(args.config) if args.config else Config()
    cfg = apply_overrides(cfg, list(args.set))
    result = find_lr(cfg, start=args.start, end=args.end, steps=args.steps)
    if args.csv:
        with open(args.csv, "w", encoding="utf-8") as fh:
            fh.write("lr,loss\n")
            fh.writelines(f"{lr:.6g},{loss:.6g}\n" for lr, loss in zip(result.lrs, result.losses))
    end = "stopped when the loss diverged" if result.stopped_early else "reached the end"
    sys.stderr.write(
        f"lr-find: {len(result.lrs)} steps from {result.lrs[0]:.3g} to {result.lrs[-1]:.3g} "
        f"({end}); valley at step {result.index}: lr {result.suggestion:.3g}, "
        f"loss {result.losses[result.index]:.4f}\n"
    )
    print(f"{result.suggestion:.6g}")
    return 0
