"""The end of a run: its status, the final checkpoint, ``summary.json``, the evaluation, releasing it.

Every way a run ends comes through here: the collector's ``finish`` once the
workers have ended, a failure or a stop before any worker was spawned, and the
collector's own failure. The summary reads the run's records through
:class:`~core.session.reading.stats.RunStats` (its count of how far the run got
among them: ``epochs_done`` and ``progress``) and each worker's last
:class:`~core.worker.position.Position`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from core.metric_names import selection_metric
from core.runfiles.layout import RunDir
from core.runfiles.shape import RunShape
from core.session.machinery.collector import early_stop_words
from core.session.machinery.processes import TERMINATE_GRACE_S
from core.session.reading.stats import run_count
from core.training.checkpoint import check_checkpoint, load_checkpoint, load_weights, model_from_checkpoint
from core.training.models import build_model_for
from core.training.validation import attach_evaluation, load_evaluation
from core.worker.channels import STOP
from core.worker.position import Position

if TYPE_CHECKING:
    from core.session.machinery.checkpoints import CheckpointCoordinator
    from core.session.machinery.context import RunContext
    from core.session.session import Session


class RunEnd:
    def __init__(self, session: Session, ctx: RunContext, checkpoints: CheckpointCoordinator) -> None:
        self.session = session
        self.ctx = ctx
        self.checkpoints = checkpoints

    def finish(self) -> None:
        """Every worker has ended: join them, write the last checkpoint, the summary and the evaluation."""
        s, ctx = self.session, self.ctx
        facts = ctx.facts
        with ctx.run.lock:
            ctx.run.move("finishing")
        ctx.procs.join(TERMINATE_GRACE_S)
        s.launcher.workers_ended()
        status = self._status()
        parts = [s.stats.done.get(r, {}) for r in range(s.num_workers)]
        self._adopt_result()
        complete = all(p.get("optimizer") is not None for p in parts)
        if status != "failed" and complete:
            try:
                self.checkpoints.write(parts)
            except OSError as exc:
                status = "failed"
                facts.error = facts.error or f"checkpoint: cannot write {self._run().last}: {exc.strerror}"
        else:
            ctx.log("info", "the last consistent checkpoint was kept: Continue run resumes from it")
        self._say_early_stop()
        self.write_summary(status)
        # the model the run hands on (best.pt once kept, else the final weights) on the validation split:
        # eval.json, and summary.json's evaluation and result, the run's figure everywhere
        facts.summary = attach_evaluation(s.run_dir, self._handed_on, ctx.data, facts.summary, self._select_by())
        evaluated = facts.summary is not None and "result" in facts.summary
        ctx.recorder.finish(s.config, facts.summary, load_evaluation(self._run().path) if evaluated else None)
        ctx.run.move(status, facts.error or "")
        self.close()

    def _run(self) -> RunDir:
        assert self.session.run_dir is not None, "a run that ends has its directory"
        return RunDir(self.session.run_dir)

    def _handed_on(self) -> tuple[Any, str, Any]:
        """The model Evaluate, Export, Predict and Serve take by default, which checkpoint it is, its epoch."""
        run = self._run()
        if run.default_checkpoint() == "best":
            ckpt = load_checkpoint(run.best)
            return model_from_checkpoint(ckpt, f"checkpoint: {run.best}"), "best", ckpt.get("epoch")
        return self.session.final_model(), "last", min((p.epoch - 1 for p in self.progress()), default=0)

    def _say_early_stop(self) -> None:
        """The early stop's line, now that the workers have stopped: at the epochs the run completed (the
        count the summary, the end line, the progress bar and the Runs table show), and the evaluation's epoch
        that decided it when the workers had gone past it (their records lag them) or not all reached it."""
        facts = self.ctx.facts
        decided = facts.early_stop
        if decided is None or facts.best is None:
            return
        done = self._epochs_done()
        at = f"stopped early at epoch {done} of {self.session.config.train.epochs}"
        if int(decided["epoch"]) != done:
            at += f" (its evaluation of epoch {decided['epoch']} decided)"
        facts.stop_reason = f"{at}: {early_stop_words(facts.best, int(decided['patience']))}"
        self.ctx.log("info", facts.stop_reason)

    def _reached(self) -> dict[int, int]:
        """The epochs each worker completed by its last position (one that has said nothing since it began)."""
        return {rank: p.epoch - 1 for rank, p in enumerate(self.progress())}

    def _epochs_done(self) -> int:
        """The epochs every worker completed: the summary's, the end line's, the progress bar's, the Runs table's."""
        return self.session.stats.epochs_done(range(self.session.num_workers), start=self._reached())

    def _select_by(self) -> str:
        s, best = self.session, self.ctx.facts.best
        if best:
            return str(best["monitor"])
        info = s.info
        return selection_metric(s.config, info.task if info else "classification", info.imbalanced if info else False)

    def _status(self) -> str:
        statuses = [d["status"] for d in self.session.stats.done.values()]
        if "failed" in statuses or self.ctx.facts.error:
            return "failed"
        if self.ctx.facts.stop_reason is not None:
            return "finished"  # stopped early on purpose
        if "stopped" in statuses or self.ctx.desired == STOP:
            return "stopped"
        return "finished"

    def fail_before_spawn(self, exc: BaseException) -> None:
        error = self.ctx.facts.error = " ".join(str(exc).splitlines()) or type(exc).__name__
        with self.ctx.run.lock:
            self.write_summary("failed")
            self.ctx.run.move("failed", error)
        self.close()

    def stopped_before_spawn(self) -> None:
        run = self.ctx.run
        with run.lock:
            run.move("stopping")
            self.write_summary("stopped")
            run.move("stopped", "stopped before the workers started")
        self.close()

    def _adopt_result(self) -> None:
        """A strategy whose result is not the shared model (search: the best trial) hands it over here."""
        s = self.session
        if s.run_dir is None or s.info is None:
            return
        path = s.strategy.result_checkpoint(s.run_dir)
        if path is None:
            return
        ckpt = load_checkpoint(path)
        config = check_checkpoint(ckpt, f"checkpoint: {path}")[0]
        info = s.info
        model = build_model_for(config.model, info)
        load_weights(model, ckpt["model"], f"checkpoint: {path}")
        self.ctx.facts.config, self.ctx.models = config, [model]

    def progress(self) -> list[Position]:
        """Per worker, for the summary: its final position, else its last step record, else its start."""
        s = self.session
        out = []
        per_epoch = s.strategy.batches_per_epoch(s.info.n_train) if s.info else 1
        for rank in range(s.num_workers):
            done = s.stats.done.get(rank, {})
            rec = s.stats.last_step.get(rank)
            if Position.holds(done):
                out.append(Position(**{k: int(done[k]) for k in Position.COUNTERS}))
            elif rec is not None:
                epoch = int(rec["epoch"])
                batch = min(per_epoch, max(0, rec["step"] - (epoch - 1) * per_epoch))
                if batch >= per_epoch:
                    epoch, batch = epoch + 1, 0
                out.append(Position(epoch=epoch, batch=batch, step=rec["step"], samples=rec["samples"]))
            else:
                out.append(Position(**self.ctx.start.position(rank).counters()))
        return out

    def write_summary(self, status: str) -> None:
        if self.session.run_dir is None:
            return
        summary = self.ctx.facts.summary = self._summary(status)
        self.ctx.recorder.summary(summary)

    def _summary(self, status: str) -> dict[str, Any]:
        s, facts = self.session, self.ctx.facts
        stats, info, strategy, best = s.stats, s.info, s.strategy, facts.best
        result = best["worker"] if best and strategy.num_models > 1 else strategy.result_worker(stats.last_eval)
        progress = self.progress()
        samples = sum(p.samples for p in progress)
        start = sum(self.ctx.start.position(r).samples for r in range(s.num_workers))
        train_s = stats.train_seconds()
        own_models = strategy.num_models > 1
        ev = stats.last_eval.get(result) or (next(iter(stats.last_eval.values())) if stats.last_eval else None)
        shape = RunShape.of(strategy, info.n_train if info else None)
        count = run_count(stats, shape, start=self._reached())
        return {
            "status": status,
            "strategy": s.config.parallel.strategy,
            "workers": s.num_workers,
            "epochs_done": self._epochs_done(),
            "progress": count.as_dict(),
            "shape": shape.as_dict(),
            "steps": sum(p.step for p in progress),
            "samples": samples,
            "wall_s": round(time.time() - self.ctx.t_start, 4),
            "train_s": round(train_s, 4),
            "samples_per_s": round((samples - start) / train_s, 2) if train_s > 0 else 0.0,
            "final": {
                "train_loss": stats.train_loss([result] if own_models and result in stats.epoch_loss else None),
                "val_loss": ev["val_loss"] if ev else None,
                "val_accuracy": ev.get("val_accuracy") if ev else None,
                **(
                    {k: v for k, v in ev.items() if k.startswith("val_") and k not in ("val_loss", "val_accuracy")}
                    if ev
                    else {}
                ),
            },
            **({"task": info.task} if info else {}),
            **({"dropped_rows": info.dropped_rows} if info and info.dropped_rows else {}),
            "error": facts.error,
            "parameters": s.num_parameters,
            "dataset": info.name if info else None,
            "launcher": s.launcher.name,
            **({"stop_reason": facts.stop_reason} if facts.stop_reason else {}),
            **({"best": best} if best else {}),
            **s.launcher.summary_extra(stats.nodes()),
            **({"parent": s.parent} if s.parent else {}),
            **self._races(),
            **strategy.summary_extra(stats.last_eval, s.run_dir, result if best else None),
        }

    def _races(self) -> dict[str, Any]:
        """The races the run went through (a continued run's earlier summary has them: race.json's folders)."""
        continues = self.ctx.start.continues
        races = (continues.read_summary() or {}).get("races") if continues is not None else None
        return {"races": races} if races else {}

    def close(self) -> None:
        """Release the run directory, its lock and the channels; only then is the run over for waiters."""
        ctx = self.ctx
        ctx.recorder.close()
        self.session.launcher.cleanup()
        ch = ctx.channels
        if ch is not None:
            ch.queue.close()
            ch.queue.cancel_join_thread()
        ctx.run.ended.set()
