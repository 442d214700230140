"""A race run: each variant a fork of the run's checkpoint, trained rung by rung in its own processes, the worse
half stopped at each rung, the winner installed as the run itself (or kept as a fork); ``race.json`` records it.

Each variant is a run of its own under ``RUN/races/<stamp>/v<i>/`` (its own runs folder, so several train at
once): a fork of the run's last consistent checkpoint for the first rung, continued from its own for the next
ones, with ``train.epochs`` at the rung's end, ``train.schedule_epochs`` at the race's horizon (the lr schedule
of the whole run, not of the rung), no early stop, and one compute thread per process. As many variants train
at once as the cores hold (cores // the run's workers), the rest queue. A variant that fails (a worker died,
its loss diverged past its recoveries) is eliminated with its reason; a stop stops every variant at its next
batch (each writes its checkpoint) and leaves the run untouched: ``resume`` picks the race up at its rung.
A frozen backbone's features come from the cache of the raced run's runs folder: computed once, by the first
variant, while the others wait for them.
"""

from __future__ import annotations

import copy
import functools
import math
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from core.host.machine import usable_cores
from core.runfiles.layout import RunDir, list_runs
from core.runfiles.writing import read_summary
from core.services.race.install import RunTraining, install_winner
from core.services.race.lock import RaceLock, RaceRunning, running_race
from core.services.race.plan import RacePlan, Variant, branch_step, sweep_worker_config, worker_checkpoint
from core.services.race.record import RACE_FILE, Entry, RaceRecord

if TYPE_CHECKING:  # the session and checkpoints import torch, which the window's start does without
    from core.session import Session

STOP_S = 60.0  # a variant asked to stop has this long to write its checkpoint

Say = Callable[[str], None]
OnVariant = Callable[["Entry", "Session"], None]  # a variant's session, before it starts (to listen to it)


TIE_REL = 1e-9  # figures this close (relative) are equal: a float's last bits say nothing of a variant


def tied(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=TIE_REL, abs_tol=1e-12)


def ranked(entries: list[Entry], maximize: bool) -> list[Entry]:
    """Best first by their figure at the last rung they reached; a missing figure last. Equal figures
    (:func:`tied`) keep the run as it was ("as is") ahead, then the order the variants were given: a change
    must do better than the run to replace it."""
    sign = -1.0 if maximize else 1.0

    def figure(v: Entry) -> float | None:
        f = v.figures[-1] if v.figures else None
        return None if f is None or f != f else sign * f

    def order(a: Entry, b: Entry) -> int:
        fa, fb = figure(a), figure(b)
        if (fa is None) != (fb is None):
            return 1 if fa is None else -1
        if fa is not None and fb is not None and not tied(fa, fb):
            return -1 if fa < fb else 1
        return -1 if (bool(a.changes), a.index) < (bool(b.changes), b.index) else 1

    return sorted(entries, key=functools.cmp_to_key(order))


def races_of(run: Path) -> list[Path]:
    """The run's race folders, oldest first."""
    root = Path(run) / "races"
    return sorted(p for p in root.iterdir() if (p / RACE_FILE).is_file()) if root.is_dir() else []


class Race:
    """One race of ``plan``; :meth:`run` blocks until it ends (done or stopped), :meth:`stop` from any thread."""

    def __init__(
        self,
        plan: RacePlan,
        say: Say = lambda _: None,
        slots: int | None = None,
        keep_losers: bool = False,
        on_variant: OnVariant | None = None,
    ) -> None:
        self.plan = plan
        self.say = say
        self.on_variant = on_variant
        self._running = threading.Event()  # cleared while the race is paused: no variant starts
        self._running.set()
        self.slots = slots or max(1, usable_cores() // max(1, plan.workers))
        self.keep_losers = keep_losers
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the sessions training, and the race's pause as they start
        self._sessions: dict[int, Session] = {}
        self._record_lock = threading.RLock()  # the record: changed by the race's threads, read by the window's
        self._start_lock = threading.Lock()  # a sweep's start.pt, written once
        self._claim: RaceLock | None = None  # the run's race lock, from claim() until run() returns
        self.folder = Path(plan.run) / "races" / time.strftime("%Y%m%d-%H%M%S")
        self.winner_dir: Path | None = None  # where the winner went on: the run itself, or its fork
        self.record = RaceRecord(
            run=str(plan.run),
            start_epoch=plan.start_epoch,
            start_step=plan.start_step,
            metric=plan.metric,
            rungs=list(plan.rungs),
            keep=plan.keep,
            variants=[Entry(v.index, v.label, dict(v.changes)) for v in plan.variants],
            from_worker=plan.from_worker,
        )

    @classmethod
    def resumed(
        cls,
        plan: RacePlan,
        folder: Path,
        say: Say = lambda _: None,
        keep_losers: bool = False,
        on_variant: OnVariant | None = None,
    ) -> Race:
        race = cls(plan, say, keep_losers=keep_losers, on_variant=on_variant)
        race.folder = folder
        race.record = RaceRecord.load(folder)
        race.record.state = "running"
        return race

    # ---- the record ----------------------------------------------------------------------------------
    def changing(self) -> threading.RLock:
        """Held while the record changes: :meth:`snapshot` waits for a change to end."""
        return self._record_lock

    def snapshot(self) -> RaceRecord:
        """A copy of the record between two of its changes, for another thread (the window's) to read."""
        with self._record_lock:
            return copy.deepcopy(self.record)

    def _save(self) -> None:
        with self._record_lock:
            self.record.save(self.folder)

    # ---- steering ------------------------------------------------------------------------------------
    def pause(self) -> None:
        """Pause every variant training now; none starts until :meth:`resume`. A variant whose session starts
        meanwhile pauses once it has (:meth:`_train` looks under the same lock)."""
        with self._lock:
            self._running.clear()
            for s in self._sessions.values():
                s.pause()

    def resume(self) -> None:
        with self._lock:
            self._running.set()
            for s in self._sessions.values():
                if s.state == "paused":
                    s.resume()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def sessions(self) -> list[Session]:
        """The variants' sessions training now."""
        with self._lock:
            return list(self._sessions.values())

    def request_stop(self) -> None:
        """Ask every variant to stop at its next batch, all at once, and return; none starts after."""
        self._stop.set()
        self._running.set()  # a paused race stops too
        for s in self.sessions():
            s.request_stop(STOP_S)

    def stop(self) -> None:
        """Stop every variant at its next batch (each writes its checkpoint) and wait for them; the run stays as
        it was."""
        self.request_stop()
        for s in self.sessions():
            s.stop(STOP_S)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # ---- the race ------------------------------------------------------------------------------------
    def claim(self) -> None:
        """Hold the run's race lock (core.services.race.lock) before anything starts; RaceRunning (one line) if a
        race of the run runs now, in another process or in this one. :meth:`run` claims it if not yet done."""
        if self._claim is None:
            self._claim = RaceLock.acquire(self.plan.run, self.folder)

    def run(self, as_fork: bool = False) -> RaceRecord:
        """Race to the end (done) or to a stop (stopped), holding the run's race lock all along."""
        self.claim()
        try:
            return self._run(as_fork)
        finally:
            if self._claim is not None:
                self._claim.release()
                self._claim = None

    def _run(self, as_fork: bool) -> RaceRecord:
        rec = self.record
        rec.as_fork = as_fork or self.plan.from_worker is not None  # a sweep's winner is a single run: a fork
        for note in self.plan.notes:
            self.say(note)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._save()
        while rec.rung < len(rec.rungs):
            self._race_rung(rec.rung)
            if self.stopped:
                with self._record_lock:
                    rec.state = "stopped"
                    rec.save(self.folder)
                self.say(
                    f"race stopped at rung {rec.rung + 1}; Resume race in the window or "
                    f"traindesk race {rec.run} --resume goes on"
                )
                return rec
            with self._record_lock:
                self._halve(rec.rung)
                rec.rung += 1
                rec.save(self.folder)
            if not rec.alive():
                break
        alive = rec.alive()
        if not alive:
            with self._record_lock:
                rec.state = "done"
                rec.save(self.folder)
            raise RuntimeError("race: every variant failed: " + "; ".join(f"{v.label}: {v.out}" for v in rec.variants))
        if rec.winner is None:  # kept before the install begins: a resumed race installs the one it chose
            with self._record_lock:
                rec.winner = self._best(alive)[0].index
                rec.save(self.folder)
        try:
            self.winner_dir = install_winner(rec, self.folder, self.plan, self.keep_losers, self.say, self._save)
        except RunTraining:
            with self._record_lock:
                rec.state = "stopped"  # Resume race installs the winner once the run has stopped
                rec.save(self.folder)
            raise
        with self._record_lock:
            rec.state = "done"
            rec.save(self.folder)
        return rec

    def _target(self, rung: int) -> int:
        return self.plan.start_epoch + self.record.rungs[rung]

    def _race_rung(self, rung: int) -> None:
        target = self._target(rung)
        todo = [v for v in self.record.alive() if len(v.figures) <= rung]
        self.say(f"rung {rung + 1} of {len(self.record.rungs)}: {len(todo)} variant(s) to epoch {target}")
        with ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="traindesk-race") as pool:
            for done in pool.map(lambda v: self._train(v, target), todo):
                del done

    def _train(self, entry: Entry, target: int) -> None:
        """Train one variant to epoch ``target`` (unless the race was stopped); its figure, or why it is out."""
        while not self._running.wait(0.2):  # paused: it starts once the race resumes (or stops)
            pass
        if self.stopped:
            return
        session = self._session(entry, target)
        if self.on_variant is not None:
            self.on_variant(entry, session)
        with self._lock:
            self._sessions[entry.index] = session
            if self.stopped:  # stop() ran between the check above and now: it did not see this one
                self._sessions.pop(entry.index)
                return
        reason = ""
        try:
            session.start()
            with self._lock:
                if self.paused:  # Pause came while the session was built or started: it did not reach it
                    session.pause()
            status = session.wait()
        except Exception as exc:  # a bad start (data, memory): this variant is out, the race goes on
            status, reason = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            with self._lock:
                self._sessions.pop(entry.index, None)
        figure = self._figure(Path(session.run_dir or "")) if status == "finished" else None
        with self._record_lock:
            if session.run_dir is not None and not entry.run:
                entry.run = str(Path(session.run_dir).relative_to(self.folder))
            if status == "finished":
                entry.figures.append(figure)
            elif status == "failed":
                entry.out = f"failed: {session.error or reason or 'its run failed'}"
            elif status == "stopped" and not self.stopped:  # `traindesk stop` on its folder: its rung unfinished
                entry.out = f"rung {self.record.rung + 1}: stopped outside the race"
            self.record.save(self.folder)
        if entry.out:
            self.say(f"{entry.label}: out ({entry.out})")

    def _session(self, entry: Entry, target: int) -> Session:
        from core.session import Session
        from core.session.start_point import fork_point

        plan = self.plan
        race_keys = {
            "train.epochs": target,
            "train.schedule_epochs": plan.horizon,
            "train.early_stop_patience": 0,
        }
        if entry.run:  # a later rung (or a resumed one): the variant goes on from its own checkpoint
            return Session.from_run(self.folder / entry.run, epochs=target, features_dir=self._features_dir)
        cfg, start, _, _ = fork_point(
            self._start_checkpoint(), {**entry.changes, **race_keys}, self.folder / f"v{entry.index}", f"v{entry.index}"
        )
        if start.parent is not None:  # a sweep's worker is forked from a file of the race's: name the run
            start = replace(start, parent={**start.parent, "run": str(plan.run), "name": Path(plan.run).name})
        cfg = cfg.with_changes({"parallel.threads_per_worker": 1})  # the variants share the cores
        return Session(
            cfg,
            runs_dir=self.folder / f"v{entry.index}",
            name=f"v{entry.index}",
            start=start,
            features_dir=self._features_dir,
        )

    @property
    def _features_dir(self) -> Path:
        """The runs folder of the raced run: its cache of a frozen backbone's features serves every variant
        (they train on the same images with the same backbone), computed once for them all."""
        return Path(self.plan.run).parent

    def _start_checkpoint(self) -> Path:
        """What the variants fork: the run's last checkpoint, or a sweep's best worker's part of it."""
        plan = self.plan
        if plan.from_worker is None:
            return RunDir(plan.run).last
        from core.training.checkpoint import load_checkpoint, save_checkpoint

        path = self.folder / "start.pt"
        with self._start_lock:
            if not path.is_file():
                ckpt = load_checkpoint(RunDir(plan.run).last)
                save_checkpoint(path, worker_checkpoint(ckpt, plan.config, plan.from_worker))
        return path

    def _figure(self, run: Path) -> float | None:
        summary = read_summary(run) or {}
        value = (summary.get("final") or {}).get(self.plan.metric)
        return float(value) if isinstance(value, (int, float)) else None

    def _best(self, entries: list[Entry]) -> list[Entry]:
        return ranked(entries, self.plan.maximize)

    def _halve(self, rung: int) -> None:
        alive = self._best(self.record.alive())
        keep = self.plan.survivors(len(alive), rung)
        if keep >= len(alive):
            return
        last_kept = alive[keep - 1].figures[-1] if alive[keep - 1].figures else None
        for v in alive[keep:]:
            mine = v.figures[-1] if v.figures else None
            v.out = f"rung {rung + 1}: {_beaten(mine, last_kept, self.plan.maximize, alive[keep - 1].label)}"
            self.say(f"{v.label}: out ({v.out})")
            if not self.keep_losers and v.run:
                shutil.rmtree(RunDir(self.folder / v.run).checkpoints, ignore_errors=True)
        kept = ", ".join(f"{v.label} {_num(v.figures[-1] if v.figures else None)}" for v in alive[:keep])
        self.say(f"rung {rung + 1}: going on: {kept}")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _beaten(mine: float | None, kept: float | None, maximize: bool, kept_label: str) -> str:
    """Why a variant is out against the last one kept: "0.9702 < 0.9710"; figures that print alike with as
    many digits as tell them apart ("0.97104 < 0.97106"); equal ones: "0.9710, tied with as is"."""
    if mine is None or kept is None or mine != mine:
        return f"{_num(mine)} {'<' if maximize else '>'} {_num(kept)}"
    if tied(mine, kept):
        return f"{_num(mine)}, tied with {kept_label}"  # ranked() says who a tie keeps
    sign = "<" if maximize else ">"
    for digits in range(4, 13):
        a, b = f"{mine:.{digits}f}", f"{kept:.{digits}f}"
        if a != b:
            return f"{a} {sign} {b}"
    return f"{mine!r} {sign} {kept!r}"


def plan_of(folder: Path) -> RacePlan:
    """The plan of the race recorded in ``folder`` (to resume it): the run's checkpoint is as the race found it."""
    from core.training.checkpoint import check_checkpoint, load_checkpoint

    rec = RaceRecord.load(folder)
    ckpt = load_checkpoint(RunDir(rec.run).last)

    cfg = check_checkpoint(ckpt, f"checkpoint: {RunDir(rec.run).last}")[0]
    if rec.from_worker is not None:
        cfg = sweep_worker_config(cfg, ckpt, rec.from_worker)
    return RacePlan(
        run=Path(rec.run),
        config=cfg,
        start_epoch=rec.start_epoch,
        start_step=rec.start_step,
        variants=[Variant(v.index, dict(v.changes), v.label) for v in rec.variants],
        rungs=list(rec.rungs),
        keep=rec.keep,
        metric=rec.metric,
        workers=cfg.parallel.workers,
        from_worker=rec.from_worker,
        branch_step=branch_step(ckpt, rec.from_worker),
    )


def latest_unfinished(run: Path) -> Path | None:
    """The run's newest race folder whose race did not end (stopped, its process died, or running now: see
    :func:`resumable`)."""
    for folder in reversed(races_of(run)):
        if RaceRecord.load(folder).state != "done":
            return folder
    return None


def resumable(run: Path) -> Path | None:
    """The run's newest race folder whose race did not end and that no process races now; RaceRunning (one
    line) while a race of the run runs (this one or another: two races on one run would both install a
    winner)."""
    running = running_race(run)
    if running is not None:
        raise RaceRunning(running)
    return latest_unfinished(run)


def variant_runs(folder: Path) -> list[RunDir]:
    """The variants' run folders of a race folder."""
    return [r for sub in sorted(folder.glob("v*")) for r in list_runs(sub)]
