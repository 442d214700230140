"""search: Optuna trials in the worker processes; the best trial's weights become the run's model.

The study lives in the run directory (``study.journal``, Optuna's journal
file storage, safe for several processes), so continuing the run adds
trials to the same study. Each worker runs trials one after another
(:class:`core.worker.trials.TrialRunner`): it claims the next trial under a file
lock (the budget holds exactly), trains it with the ordinary Trainer,
reports the validation metric every epoch and stops when the pruner says
so. The worker that completes the study's best trial writes its weights
to ``checkpoints/best.pt``; at the end the session adopts them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from core.errors import ConfigError
from core.runfiles.layout import RunDir
from core.strategies.base import Strategy
from core.strategies.collectives import Collectives, SingleProcess

if TYPE_CHECKING:
    import optuna
    import torch

    from core.config import Config

STUDY_NAME = "traindesk"


class Search(Strategy):
    name = "search"
    description = "Hyperparameter search: Optuna trials run in parallel in the workers, weak ones pruned early."
    keeps_best = False  # the search keeps the best trial's weights itself
    pauses_on_divergence = False  # a diverging trial fails alone
    runner = "core.worker.trials:TrialRunner"

    @classmethod
    def check_config(cls, config: Config) -> None:
        if not config.search.space:
            raise ConfigError(
                "config: [search] needs at least one key to vary, e.g. "
                '"optim.lr" = {low = 0.0001, high = 0.3, log = true}'
            )

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


# ----------------------------------------------------------------------------- the study


@contextlib.contextmanager
def study_lock(run_dir: Path) -> Iterator[None]:
    """One process at a time claims a trial or decides the best (an flock on study.lock)."""
    with open(RunDir(run_dir).study_lock, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def open_study(run_dir: Path, cfg: Config, seed: int, task: str = "classification") -> tuple[optuna.Study, Any]:
    """The run's study (created on first use) with the configured sampler and pruner."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    _quiet_optuna()
    storage = JournalStorage(JournalFileBackend(str(RunDir(run_dir).study_journal)))
    from core.metric_names import higher_is_better, search_metric

    direction: Literal["maximize", "minimize"] = (
        "maximize" if higher_is_better(search_metric(cfg, task)) else "minimize"
    )
    study = optuna.create_study(
        study_name=STUDY_NAME,
        storage=storage,
        direction=direction,
        sampler=make_sampler(cfg, seed),
        pruner=make_pruner(cfg),
        load_if_exists=True,
    )
    return study, storage


def make_sampler(cfg: Config, seed: int) -> optuna.samplers.BaseSampler:
    import optuna

    s = cfg.search
    if s.sampler == "grid":
        grid = {key: [_choice_value(c) for c in values] for key, values in s.space}
        return _grid_sampler(grid, seed=seed)
    if s.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # constant_liar: trials running in parallel count as bad guesses, so the workers spread out
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(2, min(10, s.trials // 3)), constant_liar=True)


def _grid_class() -> type:
    import optuna

    class Grid(optuna.samplers.GridSampler):
        """The grid without its end-of-grid study.stop(): it only works inside optimize(); the budget ends a search."""

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            return None

    return Grid


def _grid_sampler(grid: dict[str, list[Any]], seed: int) -> Any:
    return _grid_class()(grid, seed=seed)


def make_pruner(cfg: Config) -> optuna.pruners.BasePruner:
    import optuna

    s = cfg.search
    if s.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=max(1, min(5, s.trials // 4)), n_warmup_steps=1)
    if s.pruner == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
    return optuna.pruners.NopPruner()


def _choice_value(choice: Any) -> Any:
    """Optuna's categorical values are scalars: lists (model.hidden) travel as JSON text."""
    if isinstance(choice, (list, tuple)):
        return json.dumps(list(choice))
    return choice


def suggest(trial: optuna.Trial, cfg: Config) -> dict[str, Any]:
    """The trial's value of every key of the search space, as config values."""
    params: dict[str, Any] = {}
    for key, spec in cfg.search.space:
        if hasattr(spec, "low"):  # a SearchRange; else a tuple of choices
            if isinstance(spec.low, int) and isinstance(spec.high, int):
                params[key] = trial.suggest_int(key, spec.low, spec.high, log=spec.log)
            else:
                params[key] = trial.suggest_float(key, spec.low, spec.high, log=spec.log)
        else:
            value = trial.suggest_categorical(key, [_choice_value(c) for c in spec])
            params[key] = json.loads(value) if isinstance(value, str) and value.startswith("[") else value
    return params


def trial_config(base: Config, params: dict[str, Any]) -> Config:
    """The base config with a trial's value of every key of the space (validated)."""
    return base.with_changes(params)


def trial_summary(t: optuna.trial.FrozenTrial) -> dict[str, Any]:
    params = {k: json.loads(v) if isinstance(v, str) and v.startswith("[") else v for k, v in t.params.items()}
    return {
        "number": t.number,
        "state": t.state.name.lower(),
        "value": t.value,
        "params": params,
        "epochs": (max(t.intermediate_values) if t.intermediate_values else 0),
        "worker": t.user_attrs.get("worker"),
        "seconds": (t.datetime_complete - t.datetime_start).total_seconds()
        if t.datetime_complete and t.datetime_start
        else None,
    }


def importance(study: optuna.Study) -> dict[str, float]:
    """Each key's share of the metric's variance over complete trials (fANOVA); {} when too few."""
    import optuna
    from optuna.trial import TrialState

    if len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) < 3:
        return {}
    try:
        found = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError):  # every trial with the same value, or a single-valued key
        return {}
    return {k: round(float(v), 4) for k, v in found.items()}
