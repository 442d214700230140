"""The race's winner installed: as the run itself (its checkpoint, settings, records after the branch and
summary, with the race's marker) or as a fork of it beside it in the runs folder."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.config import Config, to_dict
from core.runfiles.layout import RunDir
from core.runfiles.records import log_record
from core.runfiles.writing import write_summary
from core.services.race.plan import RacePlan
from core.services.race.record import RaceRecord, race_summary


def install_winner(
    record: RaceRecord, folder: Path, plan: RacePlan, keep_losers: bool, say: Callable[[str], None]
) -> Path:
    """Install ``record``'s winner; where it goes on (the run, or its fork)."""
    rec = record
    winner = rec.variants[rec.winner or 0]
    run = RunDir(folder / winner.run)
    n, step = len(rec.variants), plan.branch_step
    marker = f"race: {n} variants from step {step:,}, won by {winner.label}"
    for v in rec.alive():
        if v.index != winner.index and not keep_losers and v.run:
            shutil.rmtree(RunDir(folder / v.run).checkpoints, ignore_errors=True)
    if rec.as_fork:
        target = fork_home(run, Path(rec.run))
        restore_settings(RunDir(target), plan.config, winner.changes, plan.horizon)
        summary = RunDir(target).read_summary() or {}
        summary["races"] = [race_summary(rec, folder, marker)]
        write_summary(target, summary)
        say(f"{marker}; the winner is the fork {target}")
        return target
    install_in_place(RunDir(rec.run), run, plan, winner.changes, race_summary(rec, folder, marker))
    say(f"{marker}; {Path(rec.run).name} goes on as {winner.label}")
    return Path(rec.run)


def append_lines(path: Path, lines: list[str]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.writelines(lines)


def own_config(parent: Config, changes: dict[str, Any], reached: int, horizon: int) -> Config:
    """The run's settings with the winner's changes, the epochs at least those reached, the race's schedule
    horizon, its own threads and early stop (a variant's are the race's)."""
    cfg = parent.with_changes(dict(changes))
    epochs = max(parent.train.epochs, reached)
    return cfg.with_changes({"train.epochs": epochs, "train.schedule_epochs": horizon if horizon != epochs else 0})


def restore_settings(run: RunDir, parent: Config, changes: dict[str, Any], horizon: int) -> Config:
    """Rewrite ``run``'s checkpoints and config.toml with the run's own settings (and the winner's changes)."""
    from core.training.checkpoint import load_checkpoint, save_checkpoint

    ckpt = load_checkpoint(run.last)
    reached = min(int(p["epoch"]) for p in ckpt["progress"]) - 1
    cfg = own_config(parent, changes, reached, horizon)
    for path in (run.last, run.best):
        if path.is_file():
            data = load_checkpoint(path)
            data["config"] = to_dict(cfg)
            save_checkpoint(path, {k: v for k, v in data.items() if k not in ("format", "version")})
    from core.runfiles.writing import atomic_write_text

    atomic_write_text(run.config, cfg.to_toml())
    summary = run.read_summary() or {}
    summary["status"] = "finished" if reached >= cfg.train.epochs else "stopped"
    # the variant counted to its rung's end; the run counts to its own target, which Continue trains up to
    for counted, key in ((summary.get("progress"), "of"), (summary.get("shape"), "epochs")):
        if isinstance(counted, dict) and counted.get("unit", "epochs") == "epochs":
            counted[key] = cfg.train.epochs
    write_summary(run.path, summary)
    return cfg


def fork_home(run: RunDir, parent: Path) -> Path:
    """Move the winner's run folder into the runs folder, beside the run it forked: ``<stamp>-<the run's
    label>-race``."""
    from core.runfiles.writing import run_label

    name = f"{run.name[:15]}-{run_label(parent.name) or 'run'}-race"
    target = parent.parent / name
    n = 1
    while target.exists():
        target = parent.parent / f"{name}-{n}"
        n += 1
    shutil.move(str(run.path), str(target))
    return target


def install_in_place(
    parent: RunDir, winner: RunDir, plan: RacePlan, changes: dict[str, Any], race: dict[str, Any]
) -> None:
    """The winner becomes the run: its checkpoint (best.pt when better), settings, records after the branch and
    summary, with the race's marker; the race folder keeps the rest."""
    restore_settings(winner, plan.config, changes, plan.horizon)
    shutil.copyfile(winner.last, parent.last.with_suffix(".race"))
    parent.last.with_suffix(".race").replace(parent.last)
    if winner.best.is_file() and better_best(winner.best, parent.best):
        shutil.copyfile(winner.best, parent.best.with_suffix(".race"))
        parent.best.with_suffix(".race").replace(parent.best)
    from core.runfiles.writing import atomic_write_text

    atomic_write_text(parent.config, winner.config.read_text(encoding="utf-8"))
    records = [r for r in winner.read_records() if r.get("kind") != "state" or r.get("worker") is not None]
    import json

    lines = [
        json.dumps(r, separators=(",", ":")) + "\n"
        for r in [log_record(None, "info", race["marker"], topic="race"), *records]
    ]
    append_lines(parent.metrics, lines)
    summary = winner.read_summary() or {}
    before = parent.read_summary() or {}
    summary.pop("parent", None)
    summary["races"] = [*before.get("races", []), race]
    write_summary(parent.path, summary)


def better_best(candidate: Path, current: Path) -> bool:
    if not current.is_file():
        return True
    from core.metric_names import MAXIMIZED
    from core.training.checkpoint import load_checkpoint

    a, b = load_checkpoint(candidate), load_checkpoint(current)
    if a.get("monitor") != b.get("monitor") or "value" not in a or "value" not in b:
        return True
    return bool(a["value"] > b["value"] if a["monitor"] in MAXIMIZED else a["value"] < b["value"])
