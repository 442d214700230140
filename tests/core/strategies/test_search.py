"""strategy = "search": Optuna trials in the workers, pruning, the best trial as the run's model, continuing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config import Config, ConfigError, apply_overrides, parse_toml
from core.runfiles.writing import read_metrics
from core.session import Session
from core.training.checkpoint import load_checkpoint, model_from_checkpoint

SEARCH = """
[train]
epochs = 3
[parallel]
strategy = "search"
workers = 1
[search]
trials = 4
sampler = "grid"
pruner = "median"
"optim.lr" = [0.1, 0.0001, 0.00005, 0.2]
"""


def wait(session: Session) -> dict:
    if session.wait(240) is None:
        session.stop(5)
        pytest.fail("search did not end in time")
    assert session.summary is not None
    return session.summary


def test_search_prunes_keeps_the_best_trial_and_continues(runs_dir: Path) -> None:
    session = Session(parse_toml(SEARCH), runs_dir=runs_dir)
    session.start()
    s = wait(session)
    assert s["status"] == "finished", s
    trials = s["trials"]
    assert [t["number"] for t in trials] == [0, 1, 2, 3]
    assert s["trials_pruned"] >= 1 and all(t["state"] in ("complete", "pruned") for t in trials)
    best = max((t for t in trials if t["state"] == "complete"), key=lambda t: t["value"])
    assert s["best_trial"] == best["number"] and s["final"]["val_accuracy"] == best["value"]
    assert best["params"]["optim.lr"] in (0.1, 0.2)
    # the run's model is the best trial's: last.pt and best.pt hold it, with that trial's config
    run_dir = session.run_dir
    assert run_dir is not None
    last = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert last["config"]["optim"]["lr"] == best["params"]["optim.lr"]
    model_from_checkpoint(last)
    records = list(read_metrics(run_dir / "metrics.jsonl"))
    trial_states = {(r["trial"], r["state"]) for r in records if r["kind"] == "trial"}
    assert {n for n, state in trial_states if state == "pruned"} == {
        t["number"] for t in trials if t["state"] == "pruned"
    }
    assert all("trial" in r for r in records if r["kind"] == "eval")

    # continuing adds trials to the same study
    more = Session.from_run(run_dir)
    more.start()
    s2 = wait(more)
    assert s2["status"] == "finished" and len(s2["trials"]) == 8
    assert json.loads((run_dir / "search.json").read_text())["target"] == 8


def test_search_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"\[search\] needs at least one key"):
        apply_overrides(Config(), ['parallel.strategy="search"'])
    with pytest.raises(ConfigError, match=r'search\."train.batch_size"'):
        parse_toml('[search]\n"train.batch_size" = {low = 0, high = 8}')
    with pytest.raises(ConfigError, match="data.val_fraction"):
        from core.strategies import get_strategy

        get_strategy(parse_toml(SEARCH.replace("[train]", "[data]\nval_fraction = 0.0\n[train]"))).validate()


def test_trials_a_killed_run_left_running_fail_when_it_continues(tmp_path: Path) -> None:
    from optuna.trial import TrialState

    from core.strategies import get_strategy
    from core.strategies.search import open_study

    cfg = parse_toml(SEARCH)
    study, _ = open_study(tmp_path, cfg, seed=cfg.train.seed)
    done = study.ask()
    study.tell(done, 0.5)
    left = study.ask()  # its worker was killed: the journal still says it runs
    get_strategy(cfg).prepare_run(tmp_path, resuming=True)
    study, _ = open_study(tmp_path, cfg, seed=cfg.train.seed)
    states = {t.number: t.state for t in study.get_trials(deepcopy=False)}
    assert states == {done.number: TrialState.COMPLETE, left.number: TrialState.FAIL}


def test_each_strategy_names_its_worker_loop_by_the_object() -> None:
    """The worker runs the strategy's own loop: the search's trials, the Trainer for the others."""
    from core.strategies import CLASSES
    from core.strategies.trials import TrialRunner
    from core.worker.trainer import Trainer

    assert {name: cls.loop for name, cls in CLASSES.items()} == {
        "single": Trainer,
        "hogwild": Trainer,
        "ddp": Trainer,
        "sweep": Trainer,
        "search": TrialRunner,
    }
