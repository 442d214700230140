"""``traindesk train``: run a config to the end, one progress line on stderr, the run directory on stdout."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from core.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, ArgumentError
from core.cli.streams import lost_reason, on_output_lost
from core.errors import PeersLost
from core.services.runs.files import LOG
from core.services.runs.start import command_run, prestart, stop_forkserver, under_torchrun


def configure_cli(train: argparse.ArgumentParser) -> None:
    from core.config import STRATEGIES

    train.add_argument("config", nargs="?", help="config TOML (default: built-in defaults)")
    train.add_argument("--strategy", choices=list(STRATEGIES))
    train.add_argument("--workers", type=int)
    train.add_argument("--epochs", type=int)
    train.add_argument("--runs-dir", default="runs")
    train.add_argument("--name")
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set optim.lr=0.1 (repeatable)",
    )
    train.add_argument(
        "--resume", metavar="RUN_DIR", help="continue a stopped or failed run (its directory or a checkpoint file)"
    )
    train.add_argument("--mlflow", metavar="URI", help="mirror the run to this MLflow tracking URI (tracking.mlflow)")
    train.add_argument("--quiet", action="store_true", help="no progress line")


def _load_train_config(args: argparse.Namespace) -> Any:
    from core.config import Config, apply_overrides, load_config

    cfg = load_config(args.config) if args.config else Config()
    overrides: list[str] = []
    if args.strategy:
        overrides.append(f'parallel.strategy="{args.strategy}"')  # a fixed worker count follows unless given
    if args.workers is not None:
        overrides.append(f"parallel.workers={args.workers}")
    if args.epochs is not None:
        overrides.append(f"train.epochs={args.epochs}")
    if args.mlflow is not None:
        overrides.append(f"tracking.mlflow={json.dumps(args.mlflow)}")  # a TOML string
    return apply_overrides(cfg, overrides + list(args.set))


class Progress:
    """Training progress on stderr: a tqdm bar over epochs on a terminal, one line per epoch otherwise.

    A session listener: it runs on the session's collector thread. What it shows comes from its own
    :class:`~core.services.runs.reading.RunStats`; it only writes the log records worth a line itself.
    """

    def __init__(self, epochs: int, quiet: bool, start_epoch: int = 0) -> None:
        from core.services.runs.reading import RunStats

        self.epochs = epochs
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.lock = threading.Lock()
        self.stats = RunStats()
        self.epoch = start_epoch
        self.last_print = 0.0
        self.bar: Any = None
        if self.tty and not quiet:
            from core.services.machine import progress

            self.bar = progress(epochs, "train", unit="epoch", initial=start_epoch, dynamic_ncols=True, leave=True)

    def __call__(self, records: list[dict[str, Any]]) -> None:
        self.stats.add(records)
        for r in records:
            if r["kind"] == LOG:
                self._log(r)
        new_epochs = max(0, self.stats.eval_epoch - self.epoch)
        self.epoch += new_epochs
        now = time.monotonic()
        if self.bar is not None:
            if new_epochs or now - self.last_print > 0.5:
                self.last_print = now
                with self.lock:
                    self.bar.set_postfix_str(self.postfix(), refresh=False)
                    self.bar.update(new_epochs)
        elif new_epochs and not self.quiet:
            self.write(self.line())

    def _log(self, r: dict[str, Any]) -> None:
        if self.bar is not None and isinstance(
            r.get("progress"), dict
        ):  # a count (features): on the bar, not a line each
            if not self.quiet:
                with self.lock:
                    self.bar.set_postfix_str(r["message"], refresh=True)
            return
        if r.get("topic") == "data":  # what the data is: task, columns, classes
            level = r.get("level")
            self.write((f"[{level}] " if level in ("error", "warning") else "") + f"data: {r['message']}")
        elif r.get("level") in ("error", "warning"):
            message = r["message"].strip().splitlines()[-1]
            if not message.startswith("worker"):
                message = f"worker {r['worker']}: {message}"
            self.write(f"[{r['level']}] {message}")

    def postfix(self) -> str:
        losses = self.stats.latest_losses()
        loss = sum(losses.values()) / len(losses) if losses else float("nan")
        t0 = self.stats.first_step_t
        rate = self.stats.samples() / max(1e-9, time.time() - t0) if t0 else 0.0
        last = self.stats.latest_eval or {}
        rmse = last.get("val_rmse")
        if rmse is not None:
            return f"loss {loss:.4f}  val_rmse {rmse:.4g}  {rate:,.0f} samples/s"
        acc = last.get("val_accuracy")
        acc_text = f"{acc:.4f}" if acc is not None else "-"
        return f"loss {loss:.4f}  val_acc {acc_text}  {rate:,.0f} samples/s"

    def line(self) -> str:
        return f"epoch {self.epoch}/{self.epochs}  {self.postfix()}"

    def write(self, text: str) -> None:
        if self.quiet:
            return
        with self.lock:
            if self.bar is not None:
                self.bar.write(text, file=sys.stderr)
            else:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def stop_signals() -> tuple[int, ...]:
    """The signals that stop a run: Ctrl-C, SIGTERM and SIGHUP (its terminal closed), unless SIGHUP was set
    to be ignored before the command started (``nohup``)."""
    sigs = [signal.SIGINT, signal.SIGTERM]
    hup = getattr(signal, "SIGHUP", None)
    if hup is not None and signal.getsignal(hup) is not signal.SIG_IGN:
        sigs.append(hup)
    return tuple(sigs)


class Interrupts:
    """SIGINT, SIGTERM and SIGHUP only count here; the main loop acts on the count (no locks in a handler).

    While ``immediate`` (from the command's first line until its run is set up to start) nothing exists
    that needs saving: the handler ends the command at once, its forkserver with it.
    """

    def __init__(self) -> None:
        self.count = 0
        self.immediate = True
        self._previous: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.immediate:  # nothing may be imported here: the signal may land in the middle of an import
            try:
                os.write(2, b"\ninterrupted\n")
            except OSError:  # nobody reads stderr any more
                pass
            local = sys.modules.get("core.launchers.local")  # the forkserver's, if started; no import here
            try:
                if local is not None and hasattr(local, "stop_forkserver"):
                    local.stop_forkserver()
            finally:
                os._exit(EXIT_INTERRUPTED)

    def __enter__(self) -> Interrupts:
        for sig in stop_signals():
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


START_GRACE_S = 0.8  # after Ctrl-C during data loading, wait this long for the read to stop before leaving


def cmd_train(args: argparse.Namespace) -> int:

    if args.resume and (
        args.config or args.strategy or args.workers is not None or args.set or args.name or args.mlflow
    ):
        raise ArgumentError(
            "traindesk train: --resume continues a run with its own config; only --epochs may change "
            "(MLFLOW_TRACKING_URI mirrors it)"
        )
    # From here on Ctrl-C only counts: one while torch imports or the data loads is acted on once
    # the run exists (it then starts nothing), never raised inside a library that might swallow it.
    with Interrupts() as interrupts:
        if under_torchrun() and args.resume:
            raise ArgumentError(
                "traindesk train: under torchrun a run resumes by itself after a restart "
                "(--max-restarts); --resume is for local runs"
            )
        cfg = None if args.resume else _load_train_config(args)
        if not under_torchrun():
            prestart()  # imports torch, then forks the workers' server, which preloads the rest meanwhile
        try:
            session = command_run(cfg, args.runs_dir, args.name, resume=args.resume, epochs=args.epochs)
        except PeersLost as exc:
            sys.stderr.write(f"error: {exc}\n")
            return EXIT_FAILED
        if session is None:
            return EXIT_OK  # a rank of torchrun other than 0: it trained, rank 0 reports
        if interrupts.count:  # Ctrl-C while the command started up: nothing has been started
            sys.stderr.write("interrupted\n")
            stop_forkserver()
            return EXIT_INTERRUPTED
        # from here a Ctrl-C asks the run to stop: the data read ends at its next block, or the workers
        # at their next batch (checkpoint and summary written)
        interrupts.immediate = False
        cfg = session.config
        if cfg.data.source.partition(":")[0] in ("csv", "parquet"):
            from core.services.machine import skip_pandas

            skip_pandas()  # this process hands pyarrow no pandas object: its look for pandas imported ~50 MB
        resumed_at = min(p.epoch for p in session.start_positions()) - 1
        progress = Progress(cfg.train.epochs, args.quiet, start_epoch=resumed_at)
        session.add_listener(progress)
        try:
            abandoned = _drive(session, interrupts)
        finally:
            progress.close()
    summary = session.summary or {}
    status = summary.get("status", session.state)
    final = summary.get("final", {})
    from core.services.runs.reading import RunCount, result_line

    figure = result_line(summary)  # the model the run hands on, as evaluate, export, predict and serve take it
    if figure:
        shown = [figure]
    else:
        acc = final.get("val_accuracy")
        shown = [f"val_accuracy {acc:.4f}"] if acc is not None else []
        shown += [
            f"{k} {final[k]:.4f}"
            for k in ("val_balanced_accuracy", "val_macro_f1", "val_rmse", "val_mae", "val_r2")
            if final.get(k) is not None
        ]
    dropped = summary.get("dropped_rows")
    sys.stderr.write(
        f"{status}: {RunCount.of_summary(summary).text()}, {summary.get('samples', 0):,} samples, "
        f"{summary.get('samples_per_s', 0):,.0f} samples/s"
        + "".join(f", {s}" for s in shown)
        + (f"; {dropped} row(s) without a target left out" if dropped else "")
        + "\n"
    )
    if status == "failed":
        sys.stderr.write(f"error: {session.error}\n")
    if summary.get("stop_reason"):  # finished before its epochs: early stopping
        sys.stderr.write(f"{summary['stop_reason']}\n")
    if session.run_dir is not None:
        print(session.run_dir)
    if abandoned or (interrupts.count and session.run_dir is None):
        # The data load is still running on its thread (it spawns nothing after a stop), or it stopped
        # before the run existed: nothing to save, and interpreter teardown (freeing what was read, with
        # torch loaded) took a second here: leave now, and end the forkserver, which may still be
        # importing torch and would outlive this process by seconds.
        stop_forkserver()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)
    if interrupts.count:
        return EXIT_INTERRUPTED
    if status == "stopped":  # by the window or `traindesk stop`
        # under torchrun a non-zero exit is a failure that --max-restarts would restart
        return EXIT_OK if session.launcher.name == "torchrun" else EXIT_INTERRUPTED
    return EXIT_FAILED if status == "failed" else EXIT_OK


def _drive(session: Any, interrupts: Interrupts) -> bool:
    """Start the session on a thread and wait for its end, acting on Ctrl-C in this (the main) thread.

    First interrupt: stop at the next batch (checkpoint and summary are written). Second:
    end the workers now (terminate, then kill); the summary is still written. True when
    an interrupted start was left behind (still loading data).
    """
    session.launcher.warm_up()  # start the forkserver (if any) while data loads
    session.launcher.end_server_with_workers()  # this command's one run: its evaluation needs no server
    failure: list[BaseException] = []
    lost: list[tuple[str, str]] = []  # stdout/stderr whose reader went away, and why: logged from this thread
    stop_listening = on_output_lost(lambda name, exc: lost.append((name, lost_reason(exc))))
    try:
        return _wait_for_end(session, interrupts, failure, lost)
    finally:
        stop_listening()


def _wait_for_end(
    session: Any, interrupts: Interrupts, failure: list[BaseException], lost: list[tuple[str, str]]
) -> bool:

    def start() -> None:
        try:
            session.start()
        except BaseException as exc:
            failure.append(exc)

    starter = threading.Thread(target=start, name="traindesk-start", daemon=True)
    session.begin()
    starter.start()
    handled = 0
    noted = 0
    interrupted_at: float | None = None
    while True:
        if len(lost) > noted and session.run_dir is not None:
            for name, why in lost[noted:]:
                session.note(
                    "warning",
                    f"{name} is gone ({why}): nothing more is printed there; the run goes on, "
                    "and this log has all it would have said",
                )
            noted = len(lost)
        if interrupts.count > handled:
            handled = interrupts.count
            interrupted_at = interrupted_at or time.monotonic()
            if handled == 1:
                sys.stderr.write(
                    "\ninterrupted: stopping (checkpoint and summary are being written); "
                    "Ctrl-C again to end the workers now\n"
                )
                session.request_stop()
            else:
                sys.stderr.write("\ninterrupted again: ending the workers now\n")
                session.request_stop(timeout=0)
        if starter.is_alive():
            starter.join(0.1)
            if starter.is_alive() and interrupted_at is not None and time.monotonic() - interrupted_at > START_GRACE_S:
                return True  # still loading data: it spawns nothing after a stop
            continue
        if failure:
            raise failure[0]
        if session.wait(0.1) is not None:
            return False
