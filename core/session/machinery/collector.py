"""The session's collector thread: the workers' records in, the run's reactions out.

It drains the workers' queue, passes every public record on (``metrics.jsonl``,
listeners) and acts on what only the session reads: a worker's end, its
checkpoint part, the weights of a new best evaluation, a divergence that
pauses the run. It tracks the run's best evaluation (early stopping), asks
:mod:`core.session.machinery.health` after the processes, the checkpoint coordinator for
its schedule, and polls the control file. When every worker has ended it
finishes the run (:mod:`core.session.machinery.ending`); if the collector itself breaks,
the run ends ``failed`` rather than leaving its callers waiting.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from core.config import to_dict
from core.metric_names import selection_metric
from core.runfiles.control_file import ControlWatcher
from core.runfiles.records import BEST, DONE, EVAL, INTERNAL, SNAPSHOT, STATE, log_record
from core.training.checkpoint import state_from_bytes
from core.training.schedule import improved
from core.worker.channels import PAUSE

if TYPE_CHECKING:
    from core.session.machinery.checkpoints import CheckpointCoordinator
    from core.session.machinery.context import RunContext
    from core.session.machinery.ending import RunEnd
    from core.session.machinery.health import ProcessHealth
    from core.session.session import Session

CONTROL_POLL_S = 0.2  # how often the control file is looked at
# An early stop asks every worker to stop at its next batch, as a user's stop does, but nothing is urgent: a
# worker that is still starting (its process forked on a loaded machine after the others ran a tiny table's
# epochs) has this long to reach its first batch and stop cleanly before it is ended. A hung worker is the
# health check's to find.
EARLY_STOP_GRACE_S = 120.0


class Collector:
    def __init__(
        self,
        session: Session,
        ctx: RunContext,
        health: ProcessHealth,
        checkpoints: CheckpointCoordinator,
        end: RunEnd,
        control: ControlWatcher | None,
    ) -> None:
        self.session = session
        self.ctx = ctx
        self.health = health
        self.checkpoints = checkpoints
        self.end = end
        self._control = control
        self._control_polled = 0.0

    def run(self) -> None:
        """The thread's body: collect until every worker has ended, then finish the run."""
        ctx, end = self.ctx, self.end
        facts = ctx.facts
        try:
            self._collect()
            end.finish()
        except Exception as exc:  # never leave the caller waiting forever
            facts.error = facts.error or f"session: {type(exc).__name__}: {exc}"
            ctx.procs.join(0.1)
            try:
                end.write_summary("failed")
            except Exception:
                pass
            ctx.run.move("failed", facts.error)
            end.close()

    def _collect(self) -> None:
        s, ctx, health = self.session, self.ctx, self.health
        assert ctx.channels is not None
        n = len(ctx.procs)
        queue = ctx.channels.queue
        while len(s.stats.done) < n:
            batch = health.receive(queue, 0.05)
            if batch:
                self.handle(batch)
            health.check_processes(self.handle, self.worker_done)
            health.check_stalls()
            if ctx.stop_deadline is not None:
                ctx.procs.escalate(ctx.stop_deadline)
            self.checkpoints.schedule()
            self._poll_control()

    def handle(self, batch: list[dict[str, Any]]) -> None:
        emit, run = self.ctx.emit, self.ctx.run
        public: list[dict[str, Any]] = []
        now = time.monotonic()
        for rec in batch:
            worker = rec.get("worker")
            if worker is not None and self.health.heard(worker, now):
                public.append(log_record(worker, "info", f"worker {worker} is progressing again"))
            if rec["kind"] == EVAL:  # may end the run early; a _best record may follow it
                public.append(rec)
                emit(public)
                public = []
                self._on_eval(rec)
                continue
            if rec["kind"] not in INTERNAL:
                public.append(rec)
                continue
            # these may change the session's state: what the worker said before comes first
            if public:
                emit(public)
                public = []
            if rec["kind"] == DONE:
                self.worker_done(rec)
            elif rec["kind"] == SNAPSHOT:
                self.checkpoints.on_part(rec)
            elif rec["kind"] == BEST:
                self._on_best(rec)
            else:
                self._on_diverged(rec)
        if public:
            emit(public)
        if run.value == "starting" and any(r["kind"] == STATE and r["state"] == "running" for r in batch):
            run.move("running")

    def worker_done(self, rec: dict[str, Any]) -> None:
        s, facts = self.session, self.ctx.facts
        s.stats.add([rec])
        self.checkpoints.on_part(rec)
        if rec["status"] == "failed":
            if facts.error is None:
                facts.error = rec["error"]
                self.health.failed()
            s.request_stop()

    def _on_eval(self, rec: dict[str, Any]) -> None:
        """Track the run's best evaluation; stop early after the config's patience in epochs without one.

        The session decides from the evaluations every worker reports and stops the run as a user's stop
        does: every worker at its next batch (ddp's ranks at the same one, agreed), the run "finished".
        The records lag the workers (a loaded machine, a tiny table's epochs of milliseconds): once the
        run has stopped early its best stays the one the stop names, whatever arrives after."""
        s, facts = self.session, self.ctx.facts
        if not s.strategy.keeps_best or facts.stop_reason is not None:
            return  # evaluations the workers made before the early stop reached them do not move its best
        train = s.config.train
        monitor = selection_metric(
            s.config, s.info.task if s.info else "classification", s.info.imbalanced if s.info else False
        )
        value = rec[monitor]
        best = facts.best
        if improved(value, best["value"] if best else None, monitor, train.early_stop_min_delta):
            facts.best = {"monitor": monitor, "value": value, "worker": rec["worker"], "epoch": rec["epoch"]}
            return
        patience = s.config.early_stop_patience(table=s.info is not None and s.info.schema is not None)
        if not patience or best is None:
            return
        if rec["epoch"] - best["epoch"] >= patience:
            # the workers are ahead of their records, or behind one another: the epoch the run stops at is
            # known once they have stopped, and the end (RunEnd.stopped_early) says it as every count does
            facts.early_stop = {"monitor": monitor, "patience": patience, "epoch": rec["epoch"]}
            facts.stop_reason = f"stopping early: {early_stop_words(best, patience)}"
            s.request_stop(timeout=EARLY_STOP_GRACE_S)

    def _on_best(self, rec: dict[str, Any]) -> None:
        """A worker's weights of an evaluation: checkpoints/best.pt when it is the run's best."""
        s = self.session
        best = self.ctx.facts.best
        if best is None or (best["worker"], best["epoch"]) != (rec["worker"], rec["epoch"]) or s.info is None:
            return
        self.ctx.recorder.best(
            {
                "config": to_dict(s.config),
                "info": s.info.as_dict(),
                "model": state_from_bytes(rec["weights"]),
                "models": None,
                "epoch": rec["epoch"],
                "steps": rec["step"],
                "best_worker": rec["worker"],
                "monitor": best["monitor"],
                "value": best["value"],
            }
        )

    def _on_diverged(self, rec: dict[str, Any]) -> None:
        """A worker paused the run on a non-finite loss (``train.on_divergence = "pause"``)."""
        ctx = self.ctx
        with ctx.run.lock:
            if ctx.run.value in ("running", "starting") and ctx.run.move("paused", f"diverged: {rec['message']}"):
                ctx.desired = PAUSE
                ctx.apply_word()

    def _poll_control(self) -> None:
        """Act on a request in the run's control file (``traindesk pause|resume|stop``, an attached window)."""
        now = time.monotonic()
        if self._control is None or now - self._control_polled < CONTROL_POLL_S:
            return
        self._control_polled = now
        request = self._control.poll()
        if request is None:
            return
        s = self.session
        command = request["command"]
        self.ctx.log("info", f"{command} asked from outside (pid {request.get('pid')})")
        if command == "pause":
            s.pause()
        elif command == "resume":
            s.resume()
        else:
            s.request_stop()


def early_stop_words(best: dict[str, Any], patience: int) -> str:
    """Why early stopping ended a run: "val_accuracy has not improved for 5 epochs (best 0.97 at epoch 5)"."""
    return (
        f"{best['monitor']} has not improved for {patience} epoch{'s' if patience != 1 else ''} "
        f"(best {best['value']:.4g} at epoch {best['epoch']})"
    )
