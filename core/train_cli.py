"""``traindesk train``: run a config to the end, one progress line on stderr, the run directory on stdout."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Any

from core.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, ArgumentError


def configure(train: argparse.ArgumentParser) -> None:
    from core.config import STRATEGIES

    train.add_argument("config", nargs="?", help="config TOML (default: built-in defaults)")
    train.add_argument("--strategy", choices=list(STRATEGIES))
    train.add_argument("--workers", type=int)
    train.add_argument("--epochs", type=int)
    train.add_argument("--runs-dir", default="runs")
    train.add_argument("--name")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config key, e.g. --set optim.lr=0.1 (repeatable)")
    train.add_argument("--resume", metavar="RUN_DIR",
                       help="continue a stopped or failed run (its directory or a checkpoint file)")
    train.add_argument("--quiet", action="store_true", help="no progress line")


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
