"""The ``traindesk`` command line.

Exit codes: 0 success; 1 the run failed; 2 bad input; 130 interrupted.
Errors are one line on stderr; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ArgumentError(f"{self.prog}: {message}")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="traindesk", description="Train PyTorch models with several processes.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = sub.add_parser("train", help="train a model from a TOML config")
    train.add_argument("config", nargs="?", help="config TOML (default: built-in defaults)")
    train.add_argument("--strategy", choices=["single", "hogwild", "ddp", "sweep"])
    train.add_argument("--workers", type=int)
    train.add_argument("--epochs", type=int)
    train.add_argument("--runs-dir", default="runs")
    train.add_argument("--name")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config key, e.g. --set optim.lr=0.1 (repeatable)")
    train.add_argument("--resume", metavar="RUN_DIR",
                       help="continue a stopped or failed run (its directory or a checkpoint file)")
    train.add_argument("--quiet", action="store_true", help="no progress line")
    train.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    runs = sub.add_parser("runs", help="list runs with status and final accuracy")
    runs.add_argument("--runs-dir", default="runs")
    runs.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    gui = sub.add_parser("gui", help="open the desktop window")
    gui.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return parser


def _load_train_config(args: argparse.Namespace) -> Any:
    from core.config import Config, apply_overrides, load_config

    cfg = load_config(args.config) if args.config else Config()
    overrides: list[str] = []
    if args.strategy:
        overrides.append(f'parallel.strategy="{args.strategy}"')
        if args.strategy == "single" and args.workers is None:
            overrides.append("parallel.workers=1")
    if args.workers is not None:
        overrides.append(f"parallel.workers={args.workers}")
    if args.epochs is not None:
        overrides.append(f"train.epochs={args.epochs}")
    return apply_overrides(cfg, overrides + list(args.set))


class Progress:
    """One progress line on stderr: epoch, loss, accuracy, samples/s."""

    def __init__(self, epochs: int, quiet: bool) -> None:
        self.epochs = epochs
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.lock = threading.Lock()
        self.loss: dict[int, float] = {}
        self.samples: dict[int, int] = {}
        self.epoch = 0
        self.acc: float | None = None
        self.t0: float | None = None
        self.last_print = 0.0

    def __call__(self, records: list[dict[str, Any]]) -> None:
        changed_epoch = False
        for r in records:
            kind = r["kind"]
            if kind == "step":
                self.loss[r["worker"]] = r["loss"]
                self.samples[r["worker"]] = r["samples"]
                if self.t0 is None:
                    self.t0 = r["t"]
            elif kind == "eval":
                self.acc = r["val_accuracy"]
                if r["epoch"] > self.epoch:
                    self.epoch = r["epoch"]
                    changed_epoch = True
            elif kind == "log" and r.get("level") in ("error", "warning"):
                message = r["message"].strip().splitlines()[-1]
                if not message.startswith("worker"):
                    message = f"worker {r['worker']}: {message}"
                self._print(f"[{r['level']}] {message}", final=True)
        now = time.monotonic()
        if changed_epoch or now - self.last_print > 0.5:
            self.last_print = now
            self._print(self.line(), final=changed_epoch and not self.tty)

    def line(self) -> str:
        loss = sum(self.loss.values()) / len(self.loss) if self.loss else float("nan")
        samples = sum(self.samples.values())
        rate = samples / max(1e-9, time.time() - self.t0) if self.t0 else 0.0
        acc = f"{self.acc:.4f}" if self.acc is not None else "-"
        return f"epoch {self.epoch}/{self.epochs}  loss {loss:.4f}  val_acc {acc}  {rate:,.0f} samples/s"

    def _print(self, text: str, final: bool) -> None:
        if self.quiet:
            return
        with self.lock:
            if self.tty:
                sys.stderr.write("\r\033[K" + text + ("\n" if final else ""))
            elif final:
                sys.stderr.write(text + "\n")
            sys.stderr.flush()

    def close(self) -> None:
        if self.tty and not self.quiet:
            sys.stderr.write("\n")


def cmd_train(args: argparse.Namespace) -> int:
    from core.launchers import local as launcher
    from core.session import Session

    if args.resume:
        if args.config or args.strategy or args.workers is not None or args.set or args.name:
            raise ArgumentError("traindesk train: --resume continues a run with its own config; "
                                "only --epochs may change")
        session = Session.from_run(args.resume, epochs=args.epochs, runs_dir=args.runs_dir)
        cfg = session.config
    else:
        cfg = _load_train_config(args)
        session = Session(cfg, runs_dir=args.runs_dir, name=args.name)
    launcher.warm_up()  # start the forkserver while data loads
    progress = Progress(cfg.train.epochs, args.quiet)
    session.add_listener(progress)
    interrupted = threading.Event()

    def on_sigint(signum: int, frame: Any) -> None:
        if interrupted.is_set():
            return
        interrupted.set()
        sys.stderr.write("\ninterrupted: stopping (checkpoint and summary are being written)\n")
        session.request_stop()

    previous = signal.signal(signal.SIGINT, on_sigint)
    previous_term = signal.signal(signal.SIGTERM, on_sigint)
    try:
        session.start()
        while session.wait(0.2) is None:
            pass
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
        if session.active:
            session.stop()
        progress.close()
    summary = session.summary or {}
    status = summary.get("status", session.state)
    final = summary.get("final", {})
    acc = final.get("val_accuracy")
    sys.stderr.write(
        f"{status}: {summary.get('epochs_done', 0)} epoch(s), {summary.get('samples', 0):,} samples, "
        f"{summary.get('samples_per_s', 0):,.0f} samples/s"
        + (f", val_accuracy {acc:.4f}" if acc is not None else "") + "\n"
    )
    if status == "failed":
        sys.stderr.write(f"error: {session.error}\n")
    print(session.run_dir)
    if interrupted.is_set():
        return EXIT_INTERRUPTED
    return EXIT_FAILED if status == "failed" else EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    from core.runlog import list_runs

    runs = list_runs(Path(args.runs_dir))
    if not runs:
        print(f"no runs in {args.runs_dir}")
        return EXIT_OK
    print(f"{'run':<44} {'status':<9} {'epochs':>6} {'val_acc':>8} {'samples/s':>11}")
    for path, summary in runs:
        if summary is None:
            print(f"{path.name:<44} {'running?':<9}")
            continue
        acc = (summary.get("final") or {}).get("val_accuracy")
        acc_text = f"{acc:.4f}" if isinstance(acc, (int, float)) else "-"
        print(f"{path.name:<44} {summary.get('status', '?'):<9} {summary.get('epochs_done', 0):>6} "
              f"{acc_text:>8} {summary.get('samples_per_s', 0):>11,.0f}")
    return EXIT_OK


def cmd_gui(args: argparse.Namespace) -> int:
    from app.main import main as gui_main

    return int(gui_main([]) or 0)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "train": cmd_train,
    "runs": cmd_runs,
    "gui": cmd_gui,
}


def register(name: str, configure: Callable[[Any], None], run: Callable[[argparse.Namespace], int]) -> None:
    """Hook for extra subcommands (export, predict, bench)."""
    _EXTRA.append((name, configure, run))


_EXTRA: list[tuple[str, Callable[[Any], None], Callable[[argparse.Namespace], int]]] = []


def _load_extras() -> None:
    for module in ("core.export", "core.predict", "core.evaluate", "core.bench"):
        try:
            __import__(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


def main(argv: Sequence[str] | None = None) -> int:
    from core.errors import INPUT_ERRORS

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        _load_extras()
        parser = _build_parser()
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
        for name, configure, run in _EXTRA:
            sp = subparsers.add_parser(name, help=configure.__doc__)
            sp.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
            configure(sp)
            COMMANDS[name] = run
        args = parser.parse_args(argv)
        return COMMANDS[args.command](args)
    except ArgumentError as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_INPUT
    except INPUT_ERRORS as exc:
        if debug:
            traceback.print_exc()
        sys.stderr.write(" ".join(str(exc).splitlines()) + "\n")
        return EXIT_INPUT
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    except Exception as exc:
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"error: {type(exc).__name__}: {exc} (run with --debug for the traceback)\n")
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
