"""The race's winner installed: as the run itself (its checkpoint, settings, records after the branch and
summary, with the race's marker) or as a fork of it beside it in the runs folder."""

from __future__ import annotations

import errno
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.config import Config, to_dict
from core.errors import RunError
from core.runfiles.control_file import active_run_pid
from core.runfiles.layout import RunDir
from core.runfiles.records import log_record
from core.runfiles.writing import atomic_write_text, write_summary
from core.services.race.plan import RacePlan
from core.services.race.record import RaceRecord, race_summary


class RunTraining(RunError):
    """The raced run trains again (another process continued it while it raced): its checkpoint stays."""


def install_winner(
    record: RaceRecord,
    folder: Path,
    plan: RacePlan,
    keep_losers: bool,
    say: Callable[[str], None],
    save: Callable[[], None],
) -> Path:
    """Install ``record``'s winner; where it goes on (the run, or its fork). Each step is written down in
    ``record.install`` (``save`` keeps it in race.json) or is one that may run twice, so a race resumed after a
    crash part-way through finishes the install once."""
    rec, journal = record, record.install
    winner = rec.variants[rec.winner or 0]
    run = RunDir(folder / winner.run)
    if not journal:
        journal["marker"] = f"race: {len(rec.variants)} variants from step {plan.branch_step:,}, won by {winner.label}"
        if rec.as_fork:
            journal["fork"] = str(fork_home(run, Path(rec.run)))
        save()
    marker = journal["marker"]
    for v in rec.alive():
        if v.index != winner.index and not keep_losers and v.run:
            shutil.rmtree(RunDir(folder / v.run).checkpoints, ignore_errors=True)
    if rec.as_fork:
        target = Path(journal["fork"])
        move_once(run.path, target)
        restore_settings(RunDir(target), plan.config, winner.changes, plan.horizon)
        summary = RunDir(target).read_summary() or {}
        summary["races"] = [race_summary(rec, folder, marker)]
        write_summary(target, summary)
        say(f"{marker}; the winner is the fork {target}")
        return target
    parent = RunDir(rec.run)
    restore_settings(run, plan.config, winner.changes, plan.horizon)
    pid = active_run_pid(parent.path)  # the race checked it was idle when it began; it may have started since
    if pid is not None:
        raise RunTraining(
            f"race: {parent.name} is training again (process {pid}), so it keeps its checkpoint and the winner, "
            f"{winner.label}, waits in races/{folder.name}; stop it, then Resume race or "
            f"traindesk race {parent.path} --resume installs the winner"
        )
    install_in_place(parent, run, race_summary(rec, folder, marker), journal, save)
    say(f"{marker}; {parent.name} goes on as {winner.label}")
    return parent.path


def append_lines(path: Path, lines: list[str]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.writelines(lines)


def append_once(path: Path, at: int, lines: list[str], marker: str) -> None:
    """Append ``lines`` (the race's marker first) to the records in ``path``, which were ``at`` bytes long when
    the install began: what an earlier try left after them (its marker, a line cut short) goes first."""
    with path.open("r+b") as fh:
        fh.seek(at)
        tail = fh.readline()
        if tail and (not tail.endswith(b"\n") or _message(tail) == marker):
            fh.truncate(at)
    append_lines(path, lines)


def _message(line: bytes) -> str:
    try:
        record = json.loads(line)
    except ValueError:
        return ""
    return str(record.get("message", "")) if isinstance(record, dict) and record.get("topic") == "race" else ""


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
    """Where the winner's run folder goes in the runs folder, beside the run it forked: ``<stamp>-<the run's
    label>-race``."""
    from core.runfiles.writing import run_label

    name = f"{run.name[:15]}-{run_label(parent.name) or 'run'}-race"
    target = parent.parent / name
    n = 1
    while target.exists():
        target = parent.parent / f"{name}-{n}"
        n += 1
    return target


def move_once(source: Path, target: Path) -> None:
    """Move the winner's run folder to ``target``; nothing if an earlier try did. Across file systems it is
    copied under another name first, so ``target`` is only ever whole."""
    if target.exists():
        shutil.rmtree(source, ignore_errors=True)  # a copy's source, cut short as it was removed
        return
    try:
        source.rename(target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        part = target.with_name(target.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        shutil.copytree(source, part)
        part.rename(target)
        shutil.rmtree(source)


def install_in_place(
    parent: RunDir, winner: RunDir, race: dict[str, Any], journal: dict[str, Any], save: Callable[[], None]
) -> None:
    """The winner becomes the run: its checkpoint (best.pt when better), settings, records after the branch and
    summary, with the race's marker; the race folder keeps the rest. Copies and rewrites may run twice; the
    records are appended once (``journal``)."""
    shutil.copyfile(winner.last, parent.last.with_suffix(".race"))
    parent.last.with_suffix(".race").replace(parent.last)
    if winner.best.is_file() and better_best(winner.best, parent.best):
        shutil.copyfile(winner.best, parent.best.with_suffix(".race"))
        parent.best.with_suffix(".race").replace(parent.best)
    atomic_write_text(parent.config, winner.config.read_text(encoding="utf-8"))
    if not journal.get("records"):
        if "records_at" not in journal:
            journal["records_at"] = parent.metrics.stat().st_size
            save()
        records = [r for r in winner.read_records() if r.get("kind") != "state" or r.get("worker") is not None]
        lines = [
            json.dumps(r, separators=(",", ":")) + "\n"
            for r in [log_record(None, "info", race["marker"], topic="race"), *records]
        ]
        append_once(parent.metrics, journal["records_at"], lines, race["marker"])
        journal["records"] = True
        save()
    summary = winner.read_summary() or {}
    before = parent.read_summary() or {}
    summary.pop("parent", None)
    summary["races"] = [*(r for r in before.get("races", []) if r.get("folder") != race["folder"]), race]
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
