"""A search's Optuna study: kept in the run directory, locked, sampled, pruned and summed up.

The study lives in the run directory (``study.journal``, Optuna's journal
file storage, safe for several processes); the session side of the search
(:class:`~core.strategies.search.Search`) opens it and sums it up, the
workers' loop (:class:`~core.strategies.trials.TrialRunner`) claims trials
from it under its lock and tells it how they went.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from core.runfiles.layout import RunDir

if TYPE_CHECKING:
    import optuna

    from core.config import Config

STUDY_NAME = "traindesk"


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
