"""Races: clones of a run's checkpoint, the worse half stopped at each rung, the winner installed as the run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

from core.config import Config, ConfigError, apply_overrides
from core.runfiles.layout import RunDir
from core.services.race.lock import running_race
from core.services.race.plan import plan_race
from core.services.race.race import Race, RaceRecord, races_of
from core.session import Session
from core.training.checkpoint import load_checkpoint, state_to_bytes
from tests.cli_run import core_env, run_core, start_core

pytestmark = pytest.mark.slow

DIGITS = [
    'data.source="builtin:digits"',
    "parallel.strategy=single",
    "parallel.workers=1",
    "model.hidden=[32]",
    "train.batch_size=64",
]


def parent_run(runs_dir: Path, *overrides: str, epochs: int = 2) -> Path:
    session = Session(apply_overrides(Config(), [*DIGITS, f"train.epochs={epochs}", *overrides]), runs_dir=runs_dir)
    session.start()
    assert session.wait(300) == "finished", session.error
    assert session.run_dir is not None
    return session.run_dir


def weights(path: Path) -> dict[str, torch.Tensor]:
    ckpt = load_checkpoint(path)
    return dict(ckpt["models"][0] if ckpt.get("models") else ckpt["model"])


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.fixture
def parent(runs_dir: Path) -> Path:
    return parent_run(runs_dir)


def test_bad_variations_are_one_line_each_and_nothing_starts(parent: Path) -> None:
    cases = {
        ("--vary", "model.hidden=[8],[16]"): "race: --vary model.hidden cannot change in a race",
        ("--vary", "optim.lr=-1,0.1"): "race: --vary optim.lr: optim.lr must be",
        ("--vary", "optim.lr=1x"): "race: --vary optim.lr varies nothing: every value is the run's own",
        ("--vary", "optim.lr=0.1,0.1"): "race: --vary optim.lr gives 0.1 twice",
        ("--vary", "train.epochs=3,4"): "race: --vary train.epochs cannot change in a race",
        ("--vary", "optim.lr=0.5x,2x", "--keep", "2"): "race: --keep must be from 1 to 1",
        (): "race: give at least one --vary",
    }
    for args, expected in cases.items():
        done = run_core("race", str(parent), *args, timeout=120, env=core_env())
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(expected), (args, lines)
    assert races_of(parent) == []
    search = parent_run(
        parent.parent.parent / "search-runs",
        "parallel.strategy=search",
        "parallel.workers=1",
        "search.trials=1",
        "search.optim.lr=[0.05, 0.1]",
        epochs=1,
    )
    with pytest.raises(ConfigError, match='"search" run, whose trials differ'):
        plan_race(search, ["optim.lr=0.5x,2x"])


def test_every_variant_starts_from_the_runs_checkpoint_bit_for_bit(parent: Path) -> None:
    plan = plan_race(parent, ["optim.lr=0.5x,2x", "train.batch_size=32,64"])
    race = Race(plan)
    race.folder.mkdir(parents=True)
    ckpt = load_checkpoint(RunDir(parent).last)
    for entry in race.record.variants:
        session = race._session(entry, plan.start_epoch + 1)
        start = session._ctx.start
        [state] = start.model_states(1)
        assert all(torch.equal(state[k], ckpt["model"][k]) for k in ckpt["model"])
        optimizer, rng = start.states(0, 1)
        assert optimizer == state_to_bytes(ckpt["optimizers"][0]) and rng == state_to_bytes(ckpt["rng"][0])
        assert start.position(0).counters() == start.position(0).of(ckpt["progress"][0]).counters()
        assert {k: session.config.value(k) for k in entry.changes} == entry.changes
        assert session.config.train.early_stop_patience == 0 and session.config.parallel.threads_per_worker == 1


def test_a_race_halves_at_each_rung_and_the_same_race_picks_the_same_winner(parent: Path, tmp_path: Path) -> None:
    twin = tmp_path / "twin" / parent.name
    shutil.copytree(parent, twin)
    said: list[str] = []
    vary = ["optim.lr=0.1x,1x,4x,20x"]
    race = Race(plan_race(parent, vary, rungs=[1, 2]), said.append)
    record = race.run()
    assert record.state == "done" and record.winner is not None
    out = {v.index: v.out for v in record.variants}
    rung1 = sorted(record.variants, key=lambda v: -v.figures[0])
    assert {v.index for v in rung1[2:]} == {i for i, why in out.items() if why.startswith("rung 1:")}
    assert len([why for why in out.values() if why.startswith("rung 2:")]) == 1
    [winner] = [v for v in record.variants if not v.out]
    assert winner.index == record.winner and len(winner.figures) == 2
    loser2 = next(v for v in record.variants if v.out.startswith("rung 2:"))
    assert winner.figures[1] >= loser2.figures[1]
    assert loser2.out == f"rung 2: {loser2.figures[1]:.4f} < {winner.figures[1]:.4f}"
    # the winner is the run now: its weights, settings, records and the race's marker
    branch = RunDir(race.folder / winner.run)
    assert same_weights(RunDir(parent).last, branch.last)
    text = RunDir(parent).config.read_text()
    for key, value in winner.changes.items():
        assert f"{key.split('.')[1]} = {value}" in text
    messages = [r["message"] for r in RunDir(parent).read_records() if r["kind"] == "log"]
    assert f"race: 4 variants from step {race.plan.branch_step:,}, won by {winner.label}" in messages
    summary = RunDir(parent).read_summary() or {}
    assert summary["races"][0]["folder"] == f"races/{race.folder.name}" and summary["epochs_done"] == 4
    kept = summary["races"][0]
    assert kept["winner"] == record.winner and [v["figures"] for v in kept["variants"]] == [
        v.figures for v in record.variants
    ]
    for v in record.variants:
        if v.out.startswith("rung"):
            assert not RunDir(race.folder / v.run).last.exists(), "a loser's checkpoints are dropped"
    assert json.loads((race.folder / "race.json").read_text())["winner"] == record.winner
    # the same race from the same state: the same winner, the same weights
    again = Race(plan_race(twin, vary, rungs=[1, 2])).run()
    assert again.winner == record.winner
    assert [v.figures for v in again.variants] == [v.figures for v in record.variants]
    assert same_weights(RunDir(twin).last, RunDir(parent).last)


def test_a_failing_variant_is_out_with_its_reason_and_the_race_goes_on(runs_dir: Path) -> None:
    run = parent_run(runs_dir, 'train.on_divergence="fail"', epochs=1)
    record = Race(plan_race(run, ["optim.lr=1x,90"], rungs=[1])).run()
    [failed] = [v for v in record.variants if v.changes]
    assert failed.out.startswith("failed: ") and "loss became" in failed.out
    assert record.winner == next(v.index for v in record.variants if not v.changes)


def _family(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def race_in_a_process(parent: Path, rungs: str, **popen: Any) -> subprocess.Popen[Any]:
    """``traindesk race`` of two rates in a session of its own, once both variants take steps."""
    proc = start_core(
        "race",
        str(parent),
        "--vary",
        "optim.lr=0.5x,2x",
        "--rungs",
        rungs,
        env=core_env(),
        start_new_session=True,
        **popen,
    )
    deadline = time.monotonic() + 180
    stepping = False
    while time.monotonic() < deadline and not stepping and proc.poll() is None:
        folders = races_of(parent)
        metrics = list(folders[0].glob("v*/*/metrics.jsonl")) if folders else []
        stepping = len(metrics) == 2 and all('"kind":"step"' in m.read_text() for m in metrics)
        time.sleep(0.05)
    if not stepping:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        pytest.fail("both variants did not train at once")
    return proc


def test_ctrl_c_stops_every_variant_leaves_the_run_as_it_was_and_resume_finishes(parent: Path) -> None:
    before = RunDir(parent).last.read_bytes()
    proc = race_in_a_process(parent, "200", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        family = _family(proc.pid)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "interrupted: stopping every variant" in err and "--resume" in err
    deadline = time.monotonic() + 10
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in family) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p.pid for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert RunDir(parent).last.read_bytes() == before, "the run is untouched until a winner is chosen"
    [folder] = races_of(parent)
    record = RaceRecord.load(folder)
    assert record.state == "stopped" and all(v.run and not v.out for v in record.variants)
    for v in record.variants:
        assert (RunDir(folder / v.run).read_summary() or {}).get("status") == "stopped"
    # the race goes on from where each variant stopped, to its rung (shortened here so the test ends soon)
    furthest = max(_epochs_done(folder / v.run) for v in record.variants)
    record.rungs = [furthest + 1 - record.start_epoch]
    record.save(folder)
    done = run_core("race", str(parent), "--resume", timeout=300, env=core_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(parent)
    assert RaceRecord.load(folder).state == "done"
    assert RunDir(parent).last.read_bytes() != before


def _epochs_done(run: Path) -> int:
    return int((RunDir(run).read_summary() or {}).get("epochs_done", 0))


def test_a_hogwild_run_races_with_its_workers_and_stays_hogwild(runs_dir: Path) -> None:
    run = parent_run(runs_dir, "parallel.strategy=hogwild", "parallel.workers=2", epochs=1)
    race = Race(plan_race(run, ["optim.lr=0.5x,2x"], rungs=[1]))
    assert race.slots >= 1 and race.plan.workers == 2
    record = race.run()
    winner = record.variants[record.winner or 0]
    ckpt = load_checkpoint(RunDir(run).last)
    assert len(ckpt["progress"]) == 2 and all(p["epoch"] == 3 for p in ckpt["progress"])
    text = RunDir(run).config.read_text()
    assert 'strategy = "hogwild"' in text and "workers = 2" in text and "threads_per_worker = 0" in text
    assert f"lr = {winner.changes['optim.lr']}" in text


def test_a_variant_whose_worker_is_killed_is_out_and_no_process_outlives_the_race(parent: Path) -> None:
    import os
    import threading

    sessions: dict[int, Session] = {}
    race = Race(
        plan_race(parent, ["optim.lr=0.5x,2x"], rungs=[2000]),
        on_variant=lambda entry, session: sessions.__setitem__(entry.index, session),
        slots=2,
    )
    outcome: dict[str, object] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("record", race.run()))
    thread.start()
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (
            len(sessions) == 2 and all(s.state == "running" and s.worker_pids() for s in sessions.values())
        ):
            time.sleep(0.1)
        victim = sessions[1].worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not race.record.variants[1].out:
            time.sleep(0.1)
        assert race.record.variants[1].out.startswith("failed: worker 0"), race.record.variants[1].out
        assert "SIGKILL" in race.record.variants[1].out
        survivors = sessions[0].worker_pids()
        assert sessions[0].state == "running", "the other variant goes on"
    finally:
        race.stop()
        thread.join(180)
    assert not thread.is_alive()
    assert outcome["record"].state == "stopped"  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in [victim, *survivors]):
        time.sleep(0.1)
    gone = [p for p in [victim, *survivors] if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert gone == []


def test_a_sweep_races_from_its_best_worker_and_its_winner_is_a_fork(runs_dir: Path) -> None:
    run = parent_run(
        runs_dir, "parallel.strategy=sweep", "parallel.workers=2", "parallel.sweep_lr=[0.005,0.1]", epochs=1
    )
    before = RunDir(run).last.read_bytes()
    ckpt = load_checkpoint(RunDir(run).last)
    best = int(ckpt["best_worker"])
    plan = plan_race(run, ["optim.lr=0.5x,1x"], rungs=[1])
    assert plan.from_worker == best and plan.config.parallel.strategy == "single"
    assert plan.config.optim.lr == ckpt["worker_lrs"][best]
    race = Race(plan)
    race.folder.mkdir(parents=True)
    session = race._session(race.record.variants[0], plan.start_epoch + 1)
    [state] = session._ctx.start.model_states(1)
    assert all(torch.equal(state[k], ckpt["models"][best][k]) for k in state)
    assert session._ctx.start.states(0, 1)[0] == state_to_bytes(ckpt["optimizers"][best])
    record = Race(plan).run()
    assert record.as_fork and RunDir(run).last.read_bytes() == before, "the sweep stays as it was"
    forks = [p for p in runs_dir.iterdir() if p.name.endswith("-race")]
    assert len(forks) == 1 and 'strategy = "single"' in RunDir(forks[0]).config.read_text()
    assert (RunDir(forks[0]).read_summary() or {})["parent"]["run"] == str(run)


def test_a_race_killed_mid_rung_resumes_from_its_variants_checkpoints(parent: Path) -> None:
    proc = race_in_a_process(parent, "3", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    running = running_race(parent)  # its lock: a --resume now would be refused
    os.killpg(proc.pid, signal.SIGKILL)  # the race and every variant's processes, mid-rung
    proc.wait(30)
    [folder] = races_of(parent)
    assert running is not None and (running.pid, running.stamp) == (proc.pid, folder.name)
    assert running_race(parent) is None, "the kernel let the dead race's lock go: it is resumable at once"
    assert RaceRecord.load(folder).state == "running"
    done = run_core("race", str(parent), "--resume", timeout=300, env=core_env())
    assert done.returncode == 0, done.stderr
    record = RaceRecord.load(folder)
    assert record.state == "done" and record.winner is not None
    assert all(len(v.figures) == 1 for v in record.variants)
    assert (RunDir(parent).read_summary() or {})["epochs_done"] == record.start_epoch + 3


def test_ties_keep_the_run_as_is_and_no_line_says_a_figure_is_below_itself(tmp_path: Path) -> None:
    from core.services.race.plan import RacePlan, Variant
    from core.services.race.race import ranked

    variants = [
        Variant(0, {"optim.lr": 0.01}, "lr 0.01"),
        Variant(1, {}, "as is"),
        Variant(2, {"optim.lr": 0.3}, "lr 0.3"),
    ]
    variants.append(Variant(3, {"optim.lr": 0.9}, "lr 0.9"))
    plan = RacePlan(tmp_path, Config(), 392, 4375, variants, [1, 2], metric="val_accuracy", branch_step=1958)
    said: list[str] = []
    race = Race(plan, said.append)
    figures = [0.971, 0.971 * (1 + 1e-12), 0.971, 0.97096]  # as is: equal but for a float's last bits
    for entry, figure in zip(race.record.variants, figures):
        entry.figures = [figure]
    assert [v.label for v in ranked(race.record.variants, True)] == ["as is", "lr 0.01", "lr 0.3", "lr 0.9"]
    assert ranked(race.record.variants[:1] + race.record.variants[3:], True)[0].label == "lr 0.01"  # better wins
    race._halve(0)  # half go on: the run as is and the first variant it ties with
    assert [v.label for v in race.record.alive()] == ["lr 0.01", "as is"]
    outs = {v.label: v.out for v in race.record.variants if v.out}
    assert outs["lr 0.3"] == "rung 1: 0.9710, tied with lr 0.01"
    assert outs["lr 0.9"] == "rung 1: 0.97096 < 0.97100"  # as many digits as tell them apart
    compared = [line.split("rung 1: ")[1].rstrip(")").split(" < ") for line in said if " < " in line]
    assert compared and all(a != b for a, b in compared)


def test_a_tie_installs_the_run_as_it_was_with_its_epoch_target_and_one_step_count(runs_dir: Path) -> None:
    """A ddp run of 2 workers, stopped at epoch 1 of 4, raced by variants that train alike (a checkpoint's
    period changes no figure): every figure ties, the run as it was wins, keeps its 4 epochs and continues to
    them; the marker counts one worker's steps, as the plots' step axis does."""
    cfg = apply_overrides(Config(), [*DIGITS, "parallel.strategy=ddp", "parallel.workers=2", "train.epochs=4"])
    session = Session(cfg, runs_dir=runs_dir)
    evaluated = threading.Event()

    def on_records(records: list[dict[str, Any]]) -> None:
        if any(r["kind"] == "eval" for r in records):
            evaluated.set()

    session.add_listener(on_records)
    session.start()
    assert evaluated.wait(300), session.error
    session.request_stop()  # on this thread: a listener runs on the collector's, which the stop waits for
    assert session.wait(300) == "stopped", session.error
    run = session.run_dir
    assert run is not None
    said: list[str] = []
    plan = plan_race(run, ["train.checkpoint_every=2x,1x"], rungs=[1])
    ckpt = load_checkpoint(RunDir(run).last)
    assert plan.start_epoch < 3 and plan.branch_step == ckpt["progress"][0]["step"] < plan.start_step
    record = Race(plan, said.append).run()
    first, as_is = record.variants
    assert not as_is.changes and first.figures == as_is.figures  # a tie
    assert record.winner == as_is.index and first.out.startswith("rung 1: ") and "tied with as is" in first.out
    marker = f"race: 2 variants from step {plan.branch_step:,}, won by as is"
    assert any(line.startswith(marker) for line in said)
    summary = RunDir(run).read_summary() or {}
    assert summary["races"][-1]["marker"] == marker
    assert summary["status"] == "stopped" and summary["progress"]["of"] == 4 and summary["shape"]["epochs"] == 4
    assert "epochs = 4" in RunDir(run).config.read_text()
    # Continue trains up to the run's own target
    again = Session.from_run(run)
    again.start()
    assert again.wait(300) == "finished", again.error
    assert (again.summary or {})["epochs_done"] == 4
