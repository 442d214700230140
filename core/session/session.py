"""A training run: its lifecycle and the control API that the window and the command line use.

The session is plain Python (no Qt). :meth:`Session.start` loads the data,
builds the model(s) in shared memory, opens the run directory and has the
launcher start the workers; a collector thread (:mod:`core.session.machinery.collector`)
then drains the workers' records and reacts to them until the run ends
(:mod:`core.session.machinery.ending`). The pieces of a run:

- :mod:`core.session.start_point`: where it starts (the beginning, a resumed or a forked checkpoint);
- :mod:`core.session.machinery.checkpoints`: the consistent-checkpoint protocol;
- :mod:`core.session.machinery.health`: dead, stalled and unreadable workers;
- :mod:`core.session.live`: what a paused run may change.

They share the run through one :class:`~core.session.machinery.context.RunContext`
and are handed the pieces they call when the session builds them. What they
learn that the session shows (``error``, ``best``, ``stop_reason``, ``summary``,
a search's adopted ``config``) they write into the context's
:class:`~core.session.machinery.facts.RunFacts`, which the session's attributes
of those names read.

``Session`` satisfies :class:`core.session.handle.RunHandle`, as does the
:class:`~core.session.attached.AttachedSession` that follows another
process's run.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from core.config import Config, to_toml
from core.config.timm_kind import is_timm
from core.data import DatasetInfo, load_data
from core.data.text_tuning import TextTuning, discard, settle, tuning_for
from core.errors import ModelError, RunError
from core.host.lifeline import sweep_orphan_segments
from core.host.machine import freed_memory_given_back, usable_cores
from core.launchers.base import Launcher
from core.launchers.local import LocalLauncher, get_context
from core.readers import ReadStopped, stop_reading_when
from core.runfiles.control_file import ControlWatcher
from core.runfiles.layout import RunDir
from core.runfiles.records import config_record, log_record, progress_record
from core.runfiles.shape import RunShape
from core.runfiles.writing import atomic_write_text
from core.session.live import live_change
from core.session.machinery.checkpoints import CheckpointCoordinator, result_model
from core.session.machinery.collector import Collector
from core.session.machinery.context import RunContext
from core.session.machinery.ending import RunEnd
from core.session.machinery.facts import RunFacts, Shown
from core.session.machinery.health import ProcessHealth
from core.session.machinery.processes import TERMINATE_GRACE_S, WorkerProcesses
from core.session.machinery.recording import RunRecorder
from core.session.reading.stats import RunStats
from core.session.start_point import StartPoint, fork_point, resume_point
from core.session.state import ENDED, RunState
from core.strategies import get_strategy
from core.training.backbones import BackboneNet, frozen_backbone, image_input, start_pretrained
from core.training.checkpoint import load_weights
from core.training.features import FeatureCount, feature_progress, with_features
from core.training.models import build_model_for, count_parameters
from core.training.shared_state import SharedState, share_flat
from core.worker.channels import CHECKPOINT, PAUSE, RUN, STOP
from core.worker.position import Position
from core.worker.spec import WorkerSpec
from core.worker.trainer import default_threads

Listener = Callable[[list[dict[str, Any]]], None]


class Session:
    """One training run. See docs/ENGINE_API.md for the contract."""

    attached = False  # this process runs the run (an AttachedSession follows another's)
    # kept in ``facts``, where the run's pieces write them
    config = Shown[Config]()
    summary = Shown[dict[str, Any] | None]()
    error = Shown[str | None]()
    best = Shown[dict[str, Any] | None]()  # the run's best evaluation: monitor, value, worker, epoch
    stop_reason = Shown[str | None]()  # why a run ended early yet finished (early stopping)

    def __init__(
        self,
        config: Config,
        runs_dir: str | Path = "runs",
        name: str | None = None,
        launcher: Launcher | None = None,
        start: StartPoint | None = None,
        features_dir: str | Path | None = None,
    ) -> None:
        self.facts = RunFacts(config)
        self.strategy = get_strategy(config)
        self.shape = RunShape.of(self.strategy)  # what a face draws and counts; again once the data is known
        self.launcher: Launcher = launcher or LocalLauncher()
        self.runs_dir = Path(runs_dir)
        # the runs folder whose cache of a frozen backbone's features the run reads and adds to: its own, or
        # the raced run's for a race's variant (its runs folder is inside the race's)
        self.features_dir = Path(features_dir) if features_dir is not None else self.runs_dir
        self._tuning: TextTuning | None = None  # a tuned text encoder not yet in its run directory
        self.name = name or f"{config.parallel.strategy}-{config.model.kind.split(':')[0]}"
        start = start or StartPoint()
        self.parent = start.parent  # a fork: the run and step it branched from
        self.info: DatasetInfo | None = None
        self.num_workers = self.strategy.num_workers
        self.num_parameters = 0
        self.features: FeatureCount | None = None  # a frozen backbone's features: computed or from the cache
        self.stats = RunStats()
        self._listeners: list[Listener] = []
        self._emit_lock = threading.Lock()
        # what the run's pieces share; each piece is handed the others it calls
        self._ctx = RunContext(
            run=RunState(lambda rec: self._emit([rec])),
            facts=self.facts,
            recorder=RunRecorder(),
            start=start,
            emit=self._emit,
            apply_word=self._apply_word,
        )
        self._health = ProcessHealth(self, self._ctx)
        self.stalled = self._health.stalled  # workers reported stalled (and not heard from since)
        self._checkpoints = CheckpointCoordinator(self, self._ctx)
        self._end = RunEnd(self, self._ctx, self._checkpoints)
        self._collector = self._new_collector(None)
        self._thread: threading.Thread | None = None

    @classmethod
    def from_run(
        cls, path: str | Path, epochs: int | None = None, runs_dir: str | Path | None = None, **kwargs: Any
    ) -> Session:
        """A session that continues a stopped or failed run from its last consistent checkpoint.

        ``path`` is a run directory (the run continues there) or a checkpoint
        file (a new run directory is made under ``runs_dir``).
        """
        cfg, start, base, name = resume_point(path, epochs, runs_dir)
        return cls(cfg, runs_dir=base, name=name, start=start, **kwargs)

    @classmethod
    def fork(
        cls,
        path: str | Path,
        changes: dict[str, Any] | None = None,
        runs_dir: str | Path | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> Session:
        """A new run that starts from a run's last checkpoint (or a checkpoint file) with edited settings.

        The new run directory records its parent run and the step it branched at.
        """
        cfg, start, base, name = fork_point(path, changes, runs_dir, name)
        return cls(cfg, runs_dir=base, name=name, start=start, **kwargs)

    # -- what a caller reads -------------------------------------------------------------
    @property
    def state(self) -> str:
        return self._ctx.run.value

    @property
    def active(self) -> bool:
        return self._ctx.run.active

    @property
    def run_dir(self) -> Path | None:
        return self._ctx.recorder.run_dir

    def describe(self) -> str:
        where = f"run folder {self.run_dir}" if self.run_dir is not None else "no run folder yet"
        return f"{where} ({self.num_workers} worker(s), launcher {self.launcher.name})"

    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def worker_pids(self) -> list[int]:
        return self._ctx.procs.pids()

    def start_fields(self, rank: int) -> dict[str, Any]:
        """A worker's WorkerSpec fields for where it starts (position, optimizer, RNG and precision states)."""
        return self._ctx.start.worker_fields(rank, self.num_workers)

    def start_positions(self) -> list[Position]:
        """Where each worker starts (the beginning, or a resumed checkpoint's position)."""
        return [self._ctx.start.position(r) for r in range(self.num_workers)]

    def final_model(self) -> nn.Module:
        """A copy of the trained model (the best one for a sweep)."""
        if not self._ctx.models or self.info is None:
            raise RuntimeError("no model: the session has not started")
        src = self._ctx.models[result_model(self.strategy, self.stats)]
        model = build_model_for(self.config.model, self.info)
        model.load_state_dict({k: v.detach().clone() for k, v in src.state_dict().items()})
        model.eval()
        return model

    # -- the lifecycle ---------------------------------------------------------------------
    def begin(self) -> bool:
        """Announce the run as starting (cheap); :meth:`start` does the work. False if not idle."""
        if self._ctx.run.value == "idle":
            self._ctx.t_start = time.time()
        return self._ctx.run.move("starting", "loading data")

    def start(self) -> None:
        """Load data, build the model, create the run directory and spawn the workers.

        Raises a subclass of INPUT_ERRORS (one line) on bad config, data or model: the
        run then ends ``failed``. A stop asked before the workers exist ends the run
        ``stopped`` without spawning any.
        """
        with self._ctx.run.lock:
            state = self._ctx.run.value
            if state == "idle":
                self.begin()
            elif state == "stopped":
                return None  # stopped before it started
            elif state == "stopping" and self._ctx.channels is None:
                return self._end.stopped_before_spawn()
            elif state not in ("starting", "paused") or self._ctx.channels is not None:
                raise RuntimeError(f"session already {state}")
        try:
            self._prepare()
        except ReadStopped:
            discard(self._tuning)
            return self._end.stopped_before_spawn()  # stopped while the data loaded: nothing was made
        except BaseException as exc:
            discard(self._tuning)
            self._end.fail_before_spawn(exc)
            raise
        with self._ctx.run.lock:
            if self._ctx.desired == STOP:
                discard(self._tuning)
                return self._end.stopped_before_spawn()
            # from here a stop reaches the workers through the control word, even while they start
            self._ctx.channels = self.launcher.channels(RUN)
            self._apply_word()
        try:
            self._spawn()
        except BaseException as exc:
            self._end.fail_before_spawn(exc)
            raise
        self._collector = self._new_collector(ControlWatcher(self.run_dir) if self.run_dir is not None else None)
        self._thread = threading.Thread(target=self._collector.run, name="traindesk-collector", daemon=True)
        self._thread.start()

    def _prepare(self) -> None:
        cfg = self.config
        self.strategy.validate()
        self.launcher.warm_up()
        # a stop now ends the read between its blocks; what loading frees goes back to the system (the data is
        # held once, in its tensor)
        encoder, self._tuning = tuning_for(
            cfg.model.text_encoder,
            cfg.model.finetune,
            is_timm(cfg.model.kind),
            self.runs_dir,
            self._ctx.start.checkpoint,
            lambda line: self._emit([log_record(None, "info", line, topic="data")]),
        )
        with stop_reading_when(lambda: self._ctx.desired == STOP), freed_memory_given_back():
            data = load_data(
                cfg.data,
                seed=cfg.train.seed,
                task=cfg.train.task,
                images=image_input(cfg),
                text_encoder=encoder,
                tune=self._tuning,
            )
        models = _build_models(cfg, data.info, self.strategy.num_models, self._ctx.start)
        features = None
        if frozen_backbone(cfg.model):  # only the head trains: on the backbone's features, computed once
            with stop_reading_when(lambda: self._ctx.desired == STOP):
                data, features = with_features(
                    data,
                    cast(BackboneNet, models[0]),
                    cfg.model.kind,
                    self.features_dir,
                    usable_cores(),
                    cfg.data.loader_workers,
                    get_context(),
                    lambda done, total, s: self._emit(
                        [
                            progress_record(
                                "backbone features", done, total, "images", s, feature_progress(done, total, s)
                            )
                        ]
                    ),
                    lambda line: self._emit([log_record(None, "info", line, topic="data")]),
                )
        self.strategy = self.strategy.with_task(data.info.task, data.info.imbalanced)
        self.shape = RunShape.of(self.strategy, data.info.n_train)
        self.num_parameters = count_parameters(models[0])
        self._ctx.data, self._ctx.models, self.info = data, models, data.info
        if self._ctx.desired == STOP:
            return
        continues = self._ctx.start.continues
        run_dir = self._ctx.recorder.open(
            self.runs_dir, self.name, cfg, self.num_parameters, self.num_workers, self._ctx.start
        )
        self.launcher.attach(run_dir)
        if self._tuning is not None:  # the tuned encoder joins its run, the schema naming it there
            data = replace(data, info=replace(data.info, schema=settle(self._tuning, run_dir, data.info.schema)))
            self._ctx.data, self.info, self._tuning = data, data.info, None
        notes = _data_notes(data.info)
        if features is not None:
            notes.append(("info", features.describe()))
            self.features = features
        if notes:  # "topic": the command line shows these at the start, whatever their level
            self._emit([log_record(None, level, message, topic="data") for level, message in notes])
        if continues is None:  # a run that fails before its first checkpoint restarts from here
            self._checkpoints.write_start()
        else:
            self.best = self._ctx.recorder.best_so_far()
        self.strategy.prepare_run(run_dir, resuming=self._ctx.start.resuming)

    def _spawn(self) -> None:
        cfg = self.config
        sweep_orphan_segments()  # what an earlier run's killed processes left in /dev/shm
        detail = f"{self.num_workers} worker(s), {self.num_parameters:,} parameters" + self._ctx.start.describe()
        self._ctx.log("info", detail)
        dist_init = self.launcher.rendezvous(self.strategy.uses_process_group)
        threads = default_threads(self.num_workers, cfg.parallel.threads_per_worker)
        shared = [SharedState.of(m.state_dict()) for m in self._ctx.models]  # rebound in each worker
        specs = [
            WorkerSpec(
                rank=rank,
                world_size=self.num_workers,
                config=cfg,
                strategy=self.strategy,
                threads=threads,
                parent_pid=os.getpid(),
                local_rank=rank,
                dist_init=dist_init,
                run_dir=str(self.run_dir),
                **self.start_fields(rank),
            )
            for rank in range(self.num_workers)
        ]
        assert self._ctx.channels is not None and self._ctx.data is not None
        self._ctx.procs = WorkerProcesses(self.launcher.start(specs, self._ctx.data, shared, self._ctx.channels))

    # -- the control API ---------------------------------------------------------------------
    def pause(self) -> None:
        with self._ctx.run.lock:
            if self._ctx.run.value in ("running", "starting") and self._ctx.run.move("paused"):
                self._ctx.desired = PAUSE
                self._apply_word()

    def resume(self, changes: dict[str, Any] | None = None) -> None:
        """Resume a paused run; ``changes`` (keys of LIVE_KEYS) apply at the next batch of every worker.

        Bad changes raise ConfigError (one line naming the key) and the run stays paused.
        """
        with self._ctx.run.lock:
            if self._ctx.run.value != "paused":
                return
            if changes:
                self._change_settings(changes)
            self._health.resumed()
            self._ctx.desired = RUN
            self._apply_word()
            self._ctx.run.move("running", "resumed")

    def _change_settings(self, changes: dict[str, Any]) -> None:
        done = min((p.epoch - 1 for p in self._end.progress()), default=0)
        new, diff = live_change(self.config, changes, done)
        if not diff:
            return
        self.config = new
        self.strategy = self.strategy.with_config(new)  # live keys change no part of the run's shape
        self.shape = RunShape.of(self.strategy, self.info.n_train if self.info is not None else None)
        if self._ctx.channels is not None:
            self._ctx.channels.settings.write({k: v["to"] for k, v in diff.items()})
        if self.run_dir is not None:
            atomic_write_text(RunDir(self.run_dir).config, to_toml(new))
        steps = {str(w): r["step"] for w, r in sorted(self.stats.last_step.items())}
        self._emit([config_record(diff, steps)])

    def checkpoint(self) -> bool:
        """Ask for a consistent checkpoint now (running or paused); False if one cannot be asked."""
        with self._ctx.run.lock:
            return self._checkpoints.request()

    def stop(self, timeout: float = 10.0) -> str | None:
        """Stop at the next batch, write checkpoint and summary, join; bounded by ``timeout``."""
        self.request_stop(timeout)
        self._ctx.run.ended.wait(timeout + 2 * TERMINATE_GRACE_S + 5.0)
        return self.summary["status"] if self.summary else self._ctx.run.value

    def request_stop(self, timeout: float = 10.0) -> None:
        """Ask the workers to stop and return at once. ``timeout`` 0: end them now (terminate, then kill)."""
        with self._ctx.run.lock:
            state = self._ctx.run.value
            if state == "idle":
                self._ctx.run.move("stopped", "stopped before start")
                self._ctx.run.ended.set()
                return
            if state in ENDED or state == "finishing":
                return
            self._ctx.desired = STOP
            deadline = time.monotonic() + timeout
            if self._ctx.stop_deadline is None or deadline < self._ctx.stop_deadline:
                self._ctx.stop_deadline = deadline
            self._apply_word()
            self._ctx.run.move("stopping")

    def wait(self, timeout: float | None = None) -> str | None:
        if not self._ctx.run.ended.wait(timeout):
            return None
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)  # nothing of the run may still be running when the caller exits
        return self._ctx.run.value

    def detach(self) -> None:
        """Nothing to let go of: this process runs the run (closing its face stops it, see RunHandle)."""

    # -- shared by the run's pieces ---------------------------------------------------------
    def _apply_word(self) -> None:
        """Set the workers' control word from what was asked (lock held): stop wins, then a checkpoint."""
        ch = self._ctx.channels
        if ch is None:
            return
        if self._ctx.desired == STOP:
            word = STOP
        elif self._checkpoints.pending:
            word = CHECKPOINT
        else:
            word = self._ctx.desired
        ch.command.value = word
        if word in (RUN, STOP):
            ch.run_event.set()  # wakes waiting workers, which then read the word
        else:
            ch.run_event.clear()

    def _new_collector(self, control: ControlWatcher | None) -> Collector:
        return Collector(self, self._ctx, self._health, self._checkpoints, self._end, control)

    def _emit(self, records: list[dict[str, Any]]) -> None:
        with self._emit_lock:  # the caller's thread (pause/resume) and the collector both emit
            self.stats.add(records)
            notes = self._ctx.recorder.write(records)  # its own (a warning about its files) go on with them
            if notes:
                self.stats.add(notes)
                records = records + notes
            for fn in list(self._listeners):
                try:
                    fn(records)
                except Exception:  # a broken listener must not kill the run
                    pass

    def note(self, level: str, message: str) -> None:
        """A line for the run's log (metrics.jsonl) from whoever drives the run, e.g. the command line's
        stderr gone. Not from a listener: listeners are called while records are being emitted."""
        self._ctx.log(level, message)

    def _progress(self) -> list[dict[str, int]]:
        """Each worker's position now (epoch, batch, step, samples)."""
        return [p.counters() for p in self._end.progress()]

    def _write_checkpoint(self, parts: list[dict[str, Any]]) -> bool:
        """The run's last checkpoint from each worker's part and the shared weights as they are now."""
        return self._checkpoints.write(parts)


def _data_notes(info: DatasetInfo) -> list[tuple[str, str]]:
    """What the log says about the data: the task chosen, columns left out, rows dropped, class counts."""
    notes = list(info.notes)
    if info.class_summary and info.schema is not None:
        notes.append(("info", info.class_summary))
    if info.imbalance_warning:
        notes.append(("warning", info.imbalance_warning))
    return notes


def _build_models(cfg: Config, info: DatasetInfo, n_models: int, start: StartPoint) -> list[nn.Module]:
    """The model(s) in shared memory: fresh, or the checkpoint's weights when resuming."""
    states = start.model_states(n_models)
    models = []
    for i in range(n_models):
        torch.manual_seed(cfg.train.seed + i)
        try:
            m = build_model_for(cfg.model, info)
        except ModelError as exc:
            if not start.resuming:
                raise
            raise RunError(f"{start.where}: its model cannot be rebuilt: {exc}") from None
        if states[i] is not None:
            load_weights(m, states[i], start.where)
        share_flat(m)  # one block: a few descriptors to cross to a worker, whatever the model
        models.append(m)
    fresh = [m for m, state in zip(models, states) if state is None]
    if fresh and is_timm(cfg.model.kind):  # a new run starts from the pretrained backbone
        start_pretrained(cfg.model, fresh)
    return models
