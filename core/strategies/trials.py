"""A search worker's loop: claim a trial, train it with the ordinary Trainer, report, repeat.

The worker loop of :class:`core.strategies.search.Search` (its ``loop``). Each trial
builds its own model in this process (trials may differ in shape), reports
the validation metric to the study after every epoch and ends early when the
pruner says so. Control (pause, checkpoint, stop) is the Trainer's inside a
trial and answered here between trials.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from core.config import Config, ConfigError, to_dict
from core.data import PreparedData
from core.metric_names import search_metric
from core.runfiles.layout import RunDir
from core.runfiles.records import snapshot_record, trial_record
from core.strategies.base import Strategy
from core.strategies.collectives import Collectives, SingleProcess
from core.strategies.study import open_study, study_lock, suggest, trial_config
from core.training.checkpoint import save_checkpoint, state_to_bytes
from core.training.models import build_model_for
from core.training.precision import FullPrecision, Precision
from core.training.shared_state import Shared
from core.worker.channels import CHECKPOINT, PAUSE, RUN, STOP, Channels, RecordSender
from core.worker.position import Position
from core.worker.spec import WorkerSpec
from core.worker.trainer import Diverged, Trainer


class _Pruned(Exception):
    pass


class _Trial(Strategy):
    """One trial trained by one worker: its own model, the whole training split."""

    name = "trial"
    keeps_best = False
    pauses_on_divergence = False
    recovers_from_divergence = False  # a trial whose sampled rate diverges fails: the study learns it

    def __init__(self, config: Config, number: int) -> None:
        super().__init__(config)
        self.number = number

    def permutation_seed(self, rank: int) -> int:
        return self.config.train.seed + self.number

    def collectives(self, device: torch.device) -> Collectives:
        return SingleProcess()


class TrialRunner:
    """Runs trials until the run's budget is spent; a :class:`~core.worker.loop.WorkerLoop`, as the Trainer is."""

    def __init__(
        self,
        spec: WorkerSpec,
        data: PreparedData,
        shared: list[Shared],
        ch: Channels,
        out: RecordSender,
        strategy: Strategy,
    ) -> None:
        self.spec, self.data, self.ch, self.out = spec, data, ch, out
        self.config = spec.config
        self.run_dir = Path(spec.run_dir)
        plan = json.loads(RunDir(self.run_dir).search_plan.read_text())
        self.target = int(plan["target"])
        # each worker samples with its own seed, and each continuation with new ones
        seed = self.config.train.seed + 7919 * spec.rank + 104729 * int(plan["generation"])
        self.study, _ = open_study(self.run_dir, self.config, seed=seed, task=data.info.task)
        self.step, self.samples = spec.start.step, spec.start.samples
        self.epochs_done = 0
        self.model: Any = None
        self.net: Any = None
        # the last trial's optimizer: its state goes into the worker's final record
        self.optimizer: torch.optim.Optimizer = torch.optim.SGD([torch.zeros(1)], lr=self.config.optim.lr)
        self.precision: Precision = FullPrecision()  # each trial's step starts fresh: no state carries over

    def position(self) -> Position:
        """A search continues with new trials: every position is a fresh start."""
        return Position(step=self.step, samples=self.samples, offset=0)

    def exchange_records(self) -> None:
        """Trials run in local worker processes: there are no peers' records to gather."""

    # -- control between trials -----------------------------------------------------------
    def _between_trials(self) -> bool:
        """Answer the control word; False when the run stops."""
        paused = False
        while True:
            word = int(self.ch.command.value)
            if word == RUN:
                if paused:
                    self.out.state("running", "resumed")
                return True
            if word == STOP:
                return False
            if word == CHECKPOINT:
                self.out.add(
                    snapshot_record(
                        self.spec.rank,
                        int(self.ch.request.value),
                        self.position().as_dict(),
                        state_to_bytes(self.optimizer.state_dict()),
                        state_to_bytes(torch.get_rng_state()),
                        state_to_bytes(self.precision.state_dict()),
                    )
                )
                self.out.flush()
                while int(self.ch.command.value) == CHECKPOINT:
                    self.ch.run_event.wait(0.1)
            elif word == PAUSE:
                if not paused:
                    paused = True
                    self.out.state("paused", "between trials")
                while int(self.ch.command.value) == PAUSE:
                    self.ch.run_event.wait(0.1)

    def _claim(self) -> Any:
        with study_lock(self.run_dir):
            if len(self.study.get_trials(deepcopy=False)) >= self.target:
                return None
            trial = self.study.ask()
            trial.set_user_attr("worker", self.spec.rank)
            return trial

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> str:
        self.out.state("running")
        while True:
            if not self._between_trials():
                return "stopped"
            trial = self._claim()
            if trial is None:
                return "finished"
            if self._run_trial(trial) == "stopped":
                return "stopped"

    def _trial_record(self, trial: Any, state: str, **extra: Any) -> None:
        self.out.add(trial_record(self.spec.rank, trial.number, state, **extra))
        self.out.flush()

    def _run_trial(self, trial: Any) -> str:
        from optuna.trial import TrialState

        try:
            params = suggest(trial, self.config)
            cfg = trial_config(self.config, params)
        except ConfigError as exc:
            self.study.tell(trial, state=TrialState.FAIL)
            self._trial_record(trial, "failed", error=str(exc))
            return "failed"
        self._trial_record(trial, "running", params=params)
        info = self.data.info
        torch.manual_seed(cfg.train.seed + trial.number)
        model = build_model_for(cfg.model, info)
        spec = dataclasses.replace(
            self.spec, config=cfg, start=self.position(), optimizer_state=None, rng_state=None, precision_state=None
        )
        trainer = Trainer(spec, self.data, [model.state_dict()], self.ch, self.out, _Trial(cfg, trial.number))
        trainer.record_extra = {"trial": trial.number}
        metric = search_metric(cfg, self.data.info.task)
        last: dict[str, Any] = {}

        def on_eval(record: dict[str, Any]) -> None:
            last.update(record)
            trial.report(record[metric], record["epoch"])
            if trial.should_prune():
                raise _Pruned

        trainer.on_eval = on_eval
        self.model = self.net = trainer.model
        try:
            status = trainer.run()
        except _Pruned:
            status = "pruned"
        except Diverged as exc:
            status = "diverged"
            self.out.log("warning", f"trial {trial.number}: {exc}")
        finally:
            self.step, self.samples, self.optimizer = trainer.step, trainer.samples, trainer.optimizer
            self.epochs_done = max(self.epochs_done, trainer.epochs_done)
        if status == "finished" and last:
            for key in [k for k in last if k.startswith("val_")]:
                trial.set_user_attr(key, last[key])
            self._complete(trial, cfg, trainer, last)
        elif status == "pruned":
            self.study.tell(trial, state=TrialState.PRUNED)
            self._trial_record(trial, "pruned", epoch=last.get("epoch"), value=last.get(metric))
        else:
            self.study.tell(trial, state=TrialState.FAIL)
            self._trial_record(trial, "failed" if status != "stopped" else "stopped", epoch=last.get("epoch"))
        return status

    def _complete(self, trial: Any, cfg: Config, trainer: Trainer, last: dict[str, Any]) -> None:
        """Tell the study; when this is now its best trial, its weights become checkpoints/best.pt."""
        metric = search_metric(cfg, self.data.info.task)
        value = last[metric]
        with study_lock(self.run_dir):
            self.study.tell(trial, value)
            if self.study.best_trial.number == trial.number:
                weights = {k: v.detach().to("cpu").clone() for k, v in trainer.model.state_dict().items()}
                save_checkpoint(
                    RunDir(self.run_dir).best,
                    {
                        "config": to_dict(cfg),
                        "info": self.data.info.as_dict(),
                        "model": weights,
                        "models": None,
                        "epoch": last["epoch"],
                        "steps": trainer.step,
                        "best_worker": self.spec.rank,
                        "trial": trial.number,
                        "monitor": metric,
                        "value": value,
                    },
                )
        self._trial_record(
            trial,
            "complete",
            epoch=last["epoch"],
            value=value,
            val_loss=last["val_loss"],
            val_accuracy=last.get("val_accuracy"),
        )
