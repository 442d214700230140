"""search: Optuna trials in the worker processes; the best trial's weights become the run's model.

The study lives in the run directory (:mod:`core.strategies.study`:
``study.journal``, Optuna's journal file storage, safe for several
processes), so continuing the run adds trials to the same study. Each worker
runs trials one after another in the search's worker loop
(:class:`core.strategies.trials.TrialRunner`): it claims the next trial under
a file lock (the budget holds exactly), trains it with the ordinary Trainer,
reports the validation metric every epoch and stops when the pruner says
so. The worker that completes the study's best trial writes its weights
to ``checkpoints/best.pt``; at the end the session adopts them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from core.errors import ConfigError
from core.runfiles.layout import RunDir
from core.strategies.base import Strategy
from core.strategies.collectives import Collectives, SingleProcess
from core.strategies.study import importance, open_study, study_lock, trial_summary
from core.strategies.trials import TrialRunner

if TYPE_CHECKING:
    import torch

    from core.worker.loop import WorkerLoopClass


class Search(Strategy):
    name = "search"
    keeps_best = False  # the search keeps the best trial's weights itself
    pauses_on_divergence = False  # a diverging trial fails alone
    loop: ClassVar[WorkerLoopClass] = TrialRunner

    def validate(self) -> None:
        super().validate()
        if self.config.data.val_fraction <= 0:
            raise ConfigError(
                'config: data.val_fraction must be above 0 for strategy "search" '
                "(trials are compared on the validation split)"
            )

    def worker_label(self, rank: int) -> str:
        return f"worker {rank} (trials)"

    def trial_budget(self) -> int | None:
        return int(self.config.search.trials)

    def collectives(self, device: torch.device) -> Collectives:
        return SingleProcess()  # each worker trains trials of its own

    # -- session side ------------------------------------------------------------------
    def prepare_run(self, run_dir: Path, resuming: bool) -> None:
        """Open (or create) the study; trials a killed run left running fail; set this run's budget."""
        from optuna.trial import TrialState

        with study_lock(run_dir):
            study, storage = open_study(run_dir, self.config, seed=self.config.train.seed, task=self.task)
            study_id = storage.get_study_id_from_name(study.study_name)
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
                trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
                storage.set_trial_state_values(trial_id, TrialState.FAIL)
            plan_path = RunDir(run_dir).search_plan
            generation = json.loads(plan_path.read_text())["generation"] + 1 if plan_path.exists() else 0
            target = len(study.get_trials(deepcopy=False)) + self.config.search.trials
            plan_path.write_text(json.dumps({"target": target, "generation": generation}))

    def result_checkpoint(self, run_dir: Path) -> Path | None:
        path = RunDir(run_dir).best
        return path if path.is_file() else None

    def summary_extra(
        self, last_eval: dict[int, dict[str, Any]], run_dir: Path | None, result: int | None = None
    ) -> dict[str, Any]:
        if run_dir is None or not RunDir(run_dir).study_journal.exists():
            return {}
        study, _ = open_study(run_dir, self.config, seed=0, task=self.task)
        trials = [trial_summary(t) for t in study.get_trials(deepcopy=False)]
        done = [t for t in trials if t["state"] == "complete"]
        from core.metric_names import search_metric

        out: dict[str, Any] = {
            "trials": trials,
            "metric": search_metric(self.config, self.task),
            "trials_complete": len(done),
            "trials_pruned": sum(t["state"] == "pruned" for t in trials),
        }
        if done:
            best = study.best_trial
            out["best_trial"] = best.number
            out["best_params"] = trial_summary(best)["params"]
            out["final"] = {"train_loss": None, **{k: v for k, v in best.user_attrs.items() if k.startswith("val_")}}
            out["final"].setdefault("val_loss", None)
            out["final"].setdefault("val_accuracy", None)
            out["importance"] = importance(study)
        return out
