"""A training run: the state machine, the workers' records, consistent checkpoints.

The session is plain Python (no Qt). :meth:`Session.start` loads the data,
builds the model(s) in shared memory, opens the run directory and has the
launcher start the workers. A collector thread then drains the workers'
queue, appends ``metrics.jsonl``, watches the processes, asks for
checkpoints, passes every batch of records to listeners and, at the end,
writes the final checkpoint, ``summary.json`` and ``eval.json``.
"""

from __future__ import annotations

import os
import queue as queue_mod
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from core.checkpoint import check_checkpoint, load_checkpoint, load_weights, state_from_bytes, state_to_bytes
from core.config import FORKABLE_SECTIONS, Config, ConfigError, to_dict, to_toml
from core.control import ControlWatcher
from core.data import DatasetInfo, PreparedData, load_data
from core.errors import ModelError, RunError
from core.evaluation import attach_evaluation
from core.launchers.local import LocalLauncher
from core.models import build_model, count_parameters
from core.readers import ReadStopped, stop_reading_when
from core.runlog import atomic_write_text, fork_name
from core.schedule import improved
from core.session.processes import TERMINATE_GRACE_S, WorkerProcesses
from core.session.receive import QueueBroken, receive
from core.session.recording import POSITION_KEYS, RunRecorder, checkpoint_payload, weights_finite
from core.session.state import ENDED, RunState
from core.session.stats import RunStats
from core.strategies import get_strategy
from core.workers import CHECKPOINT, LIVE_KEYS, PAUSE, RUN, STOP, WorkerSpec, apply_changes, default_threads

Listener = Callable[[list[dict[str, Any]]], None]
CONTROL_POLL_S = 0.2  # how often the control file is looked at
CHECKPOINT_TIMEOUT_S = 60.0  # a worker that does not answer a checkpoint request this long: give up on it
INTERNAL = ("_done", "_diverged", "_snapshot", "_best")  # worker -> session only, never written or forwarded


def _get(config: Config, key: str) -> Any:
    section, _, name = key.partition(".")
    return getattr(getattr(config, section), name)




def _resumable(path: Path) -> tuple[dict[str, Any], str]:
    return load_checkpoint(path), f"checkpoint: {path}"


def _check_progress(ckpt: dict[str, Any], cfg: Config, path: Path, where: str) -> None:
    progress = ckpt.get("progress") or []
    workers = get_strategy(cfg).num_workers
    if not isinstance(progress, list) or not all(
        isinstance(p, dict) and all(isinstance(p.get(k), int) for k in POSITION_KEYS) for p in progress
    ):
        raise RunError(f"{where}: its progress table is unusable")
    if len(progress) != workers:
        raise RunError(f"checkpoint: {path}: holds no resumable progress for {workers} worker(s)")
    if min(p["epoch"] for p in progress) > cfg.train.epochs:
        raise RunError(
            f"resume: {path} already finished all {cfg.train.epochs} epochs; pass --epochs N to train further"
        )


def _run_dir_of(path: Path) -> Path | None:
    """The run directory a checkpoint path belongs to (None for a loose checkpoint file)."""
    if path.is_dir():
        return path
    if path.parent.name == "checkpoints" and (path.parent.parent / "config.toml").exists():
        return path.parent.parent
    return None


class RecordBuffer:
    """A thread-safe buffer of records for a consumer thread (e.g. a GUI reader)."""

    def __init__(self, maxlen: int = 1_000_000) -> None:
        from collections import deque

        self._items: Any = deque(maxlen=maxlen)
        self._cond = threading.Condition()
        self._closed = False

    def put(self, records: list[dict[str, Any]]) -> None:
        with self._cond:
            self._items.extend(records)
            self._cond.notify_all()

    def drain(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """All buffered records; waits up to ``timeout`` when empty; [] once closed."""
        with self._cond:
            if not self._items and not self._closed:
                self._cond.wait(timeout)
            out = list(self._items)
            self._items.clear()
            return out

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed


@dataclass
class _CheckpointRequest:
    """A checkpoint being taken: which workers still have to send their part."""

    id: int
    waiting: set[int]
    parts: dict[int, dict[str, Any]] = field(default_factory=dict)
    since: float = field(default_factory=time.monotonic)


class Session:
    """One training run. See docs/ENGINE_API.md for the contract."""

    def __init__(self, config: Config, runs_dir: str | Path = "runs", name: str | None = None,
                 pause_on_divergence: bool = False, launcher: Any = None) -> None:
        self.config = config
        self.strategy = get_strategy(config)
        self.launcher = launcher or LocalLauncher()
        self.pause_on_divergence = pause_on_divergence
        self.runs_dir = Path(runs_dir)
        self.name = name or f"{config.parallel.strategy}-{config.model.kind.split(':')[0]}"
        self.info: DatasetInfo | None = None
        self.summary: dict[str, Any] | None = None
        self.error: str | None = None
        self.num_workers = self.strategy.num_workers
        self.num_parameters = 0
        self.stats = RunStats()
        self.stalled: set[int] = set()
        self._listeners: list[Listener] = []
        self._emit_lock = threading.Lock()
        self._run = RunState(lambda rec: self._emit([rec]))
        self._recorder = RunRecorder()
        self._procs = WorkerProcesses([])
        self._channels: Any = None
        self._models: list[nn.Module] = []
        self._data: PreparedData | None = None
        self._collector: threading.Thread | None = None
        self._desired = RUN                 # what the user asked: RUN, PAUSE or STOP
        self._stop_deadline: float | None = None
        self._request: _CheckpointRequest | None = None
        self._request_ids = 0
        self._last_checkpoint = time.monotonic()
        self._t_start = 0.0
        self._error_at = 0.0
        self._queue_broken = False  # a dying worker left a batch half-sent: nothing more can be read
        self._last_seen: dict[int, float] = {}  # worker -> monotonic time of its last record
        self._resume: dict[str, Any] | None = None  # the checkpoint a resumed run continues
        self._resume_dir: Path | None = None
        self._resume_where = "checkpoint"
        self.parent: dict[str, Any] | None = None  # a fork: the run and step it branched from
        self.best: dict[str, Any] | None = None    # the run's best evaluation: value, worker, epoch
        self.stop_reason: str | None = None        # why a run ended early yet finished (early stopping)
        self._control: ControlWatcher | None = None
        self._control_polled = 0.0

    @classmethod
    def from_run(cls, path: str | Path, epochs: int | None = None, runs_dir: str | Path | None = None,
                 **kwargs: Any) -> "Session":
        """A session that continues a stopped or failed run from its last consistent checkpoint.

        ``path`` is a run directory (the run continues there) or a checkpoint
        file (a new run directory is made under ``runs_dir``).
        """
        path = Path(path)
        ckpt, where = _resumable(path)
        cfg = check_checkpoint(ckpt, where)[0]
        if epochs is not None:
            cfg = cfg.replace("train", epochs=epochs)
        _check_progress(ckpt, cfg, path, where)
        run_dir = _run_dir_of(path)
        base = run_dir.parent if run_dir is not None else Path(runs_dir or "runs")
        session = cls(cfg, runs_dir=base, name=(run_dir.name if run_dir else "resumed"), **kwargs)
        session._resume, session._resume_dir, session._resume_where = ckpt, run_dir, where
        return session

    @classmethod
    def fork(cls, path: str | Path, changes: dict[str, Any] | None = None, runs_dir: str | Path | None = None,
             name: str | None = None, **kwargs: Any) -> "Session":
        """A new run that starts from a run's last checkpoint (or a checkpoint file) with edited settings.

        The new run directory records its parent run and the step it branched at.
        """
        path = Path(path)
        ckpt, where = _resumable(path)
        parent_cfg = check_checkpoint(ckpt, where)[0]
        changes = dict(changes or {})
        refused = sorted(k for k in changes if k.split(".")[0] not in FORKABLE_SECTIONS)
        if refused:
            raise ConfigError(f"config: {refused[0]} cannot change in a fork (the model and workers stay); "
                              f"these can: {', '.join(s + '.*' for s in FORKABLE_SECTIONS)}")
        cfg = apply_changes(parent_cfg, changes)
        if cfg.optim.name != parent_cfg.optim.name:  # another optimizer starts with fresh states
            ckpt = {**ckpt, "optimizers": None}
        _check_progress(ckpt, cfg, path, where)
        run_dir = _run_dir_of(path)
        base = Path(runs_dir) if runs_dir is not None else (run_dir.parent if run_dir is not None else Path("runs"))
        session = cls(cfg, runs_dir=base, name=name or fork_name(run_dir.name if run_dir else "run"),
                      **kwargs)
        session._resume, session._resume_where = ckpt, where
        session.parent = {"run": str(run_dir or path), "name": (run_dir or path).name,
                          "epoch": int(ckpt["epoch"]), "step": int(ckpt["steps"]),
                          "changes": {k: _get(cfg, k) for k in changes}}
        return session

    # -- public API -----------------------------------------------------------------
    @property
    def state(self) -> str:
        return self._run.value

    @property
    def active(self) -> bool:
        return self._run.active

    @property
    def run_dir(self) -> Path | None:
        return self._recorder.run_dir

    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def worker_pids(self) -> list[int]:
        return self._procs.pids()

    def begin(self) -> bool:
        """Announce the run as starting (cheap); :meth:`start` does the work. False if not idle."""
        if self._run.value == "idle":
            self._t_start = time.time()
        return self._run.move("starting", "loading data")

    def start(self) -> None:
        """Load data, build the model, create the run directory and spawn the workers.

        Raises a subclass of INPUT_ERRORS (one line) on bad config, data or model: the
        run then ends ``failed``. A stop asked before the workers exist ends the run
        ``stopped`` without spawning any.
        """
        with self._run.lock:
            state = self._run.value
            if state == "idle":
                self.begin()
            elif state == "stopped":
                return None  # stopped before it started
            elif state == "stopping" and self._channels is None:
                return self._stopped_before_spawn()
            elif state not in ("starting", "paused") or self._channels is not None:
                raise RuntimeError(f"session already {state}")
        try:
            self._prepare()
        except ReadStopped:
            return self._stopped_before_spawn()  # stopped while the data loaded: nothing was made
        except BaseException as exc:
            self._fail_before_spawn(exc)
            raise
        with self._run.lock:
            if self._desired == STOP:
                return self._stopped_before_spawn()
            # from here a stop reaches the workers through the control word, even while they start
            self._channels = self.launcher.channels(RUN)
            self._apply_word()
        try:
            self._spawn()
        except BaseException as exc:
            self._fail_before_spawn(exc)
            raise
        self._control = ControlWatcher(self.run_dir) if self.run_dir is not None else None
        self._collector = threading.Thread(target=self._collect, name="traindesk-collector", daemon=True)
        self._collector.start()

    def _prepare(self) -> None:
        cfg = self.config
        self.strategy.validate()
        self.launcher.warm_up()
        with stop_reading_when(lambda: self._desired == STOP):  # a stop now ends the read between its blocks
            data = load_data(cfg.data, seed=cfg.train.seed, task=cfg.train.task)
        models = self._build_models(data.info)
        self.strategy = self.strategy.with_task(data.info.task)
        self.num_parameters = count_parameters(models[0])
        self._data, self._models, self.info = data, models, data.info
        if self._desired == STOP:
            return
        self._recorder.open(self.runs_dir, self.name, cfg, self.num_parameters, self.num_workers,
                            existing=self._resume_dir if self._resume is not None else None)
        self.launcher.attach(self.run_dir)
        notes = self._data_notes(data.info)
        if notes:  # "topic": the command line shows these at the start, whatever their level
            self._emit([{"kind": "log", "t": time.time(), "worker": None, "level": level, "message": message,
                         "topic": "data"} for level, message in notes])
        if self._resume_dir is None:  # a run that fails before its first checkpoint restarts from here
            self._write_checkpoint([self._start_position(r) for r in range(self.num_workers)])
        else:
            self.best = self._recorder.best_so_far()
        self.strategy.prepare_run(self._recorder.run_dir, resuming=self._resume is not None)

    def _spawn(self) -> None:
        cfg = self.config
        detail = f"{self.num_workers} worker(s), {self.num_parameters:,} parameters"
        if self._resume is not None:
            p0 = self._resume["progress"][0]
            detail += f"; resuming at epoch {p0['epoch']}, batch {p0['batch']}"
        if self.parent is not None:
            detail += f"; forked from {self.parent['name']} at step {self.parent['step']}"
        self._emit([{"kind": "log", "t": time.time(), "worker": None, "level": "info", "message": detail}])
        dist_init = self.launcher.rendezvous(self.strategy.uses_process_group)
        threads = default_threads(self.num_workers, cfg.parallel.threads_per_worker)
        shared = [m.state_dict() for m in self._models]  # shared-memory tensors, rebound in each worker
        specs = [WorkerSpec(rank=rank, world_size=self.num_workers, config=cfg, threads=threads,
                            parent_pid=os.getpid(), local_rank=rank, dist_init=dist_init,
                            pause_on_divergence=self.pause_on_divergence, run_dir=str(self.run_dir),
                            **self.start_fields(rank))
                 for rank in range(self.num_workers)]
        self._procs = WorkerProcesses(self.launcher.start(specs, self._data, shared, self._channels))

    @staticmethod
    def _data_notes(info: DatasetInfo) -> list[tuple[str, str]]:
        """What the log says about the data: the task chosen, columns left out, rows dropped, class counts."""
        notes = list(info.notes)
        if info.class_summary and info.schema is not None:
            notes.append(("info", info.class_summary))
        if info.imbalance_warning:
            notes.append(("warning", info.imbalance_warning))
        return notes

    def _build_models(self, info: DatasetInfo) -> list[nn.Module]:
        """The model(s) in shared memory: fresh, or the checkpoint's weights when resuming."""
        cfg = self.config
        n_models = self.strategy.num_models
        states: list[Any] = [None] * n_models
        if self._resume is not None:
            states = self._resume.get("models") or [self._resume["model"]] * n_models
            if not isinstance(states, list) or len(states) != n_models:
                raise RunError(f"{self._resume_where}: holds {len(states)} model(s), the run has {n_models}")
        models = []
        for i in range(n_models):
            torch.manual_seed(cfg.train.seed + i)
            try:
                m = build_model(cfg.model, info.input_shape, info.num_classes, info.image_shape, info.categories)
            except ModelError as exc:
                if self._resume is None:
                    raise
                raise RunError(f"{self._resume_where}: its model cannot be rebuilt: {exc}") from None
            if states[i] is not None:
                load_weights(m, states[i], self._resume_where)
            m.share_memory()
            models.append(m)
        return models

    def _start_position(self, rank: int) -> dict[str, Any]:
        """Where a worker starts: the beginning, or the resumed checkpoint's position and states."""
        if self._resume is None:
            return {"epoch": 1, "batch": 0, "step": 0, "samples": 0, "offset": 0, "lr_scale": 1.0,
                    "optimizer": None, "rng": None}
        opt = (self._resume.get("optimizers") or [None] * self.num_workers)[rank]
        rng = (self._resume.get("rng") or [None] * self.num_workers)[rank]
        where = self._resume["progress"][rank]
        return {**{k: int(where[k]) for k in POSITION_KEYS}, "offset": int(where.get("offset", -1)),
                "lr_scale": float(where.get("lr_scale", 1.0)),
                "optimizer": state_to_bytes(opt) if opt is not None else None,
                "rng": state_to_bytes(rng) if rng is not None else None}

    def start_fields(self, rank: int) -> dict[str, Any]:
        """A worker's WorkerSpec fields for where it starts (position, optimizer and RNG states)."""
        p = self._start_position(rank)
        return {"start_epoch": p["epoch"], "start_batch": p["batch"], "start_step": p["step"],
                "start_samples": p["samples"], "start_offset": p["offset"], "start_lr_scale": p["lr_scale"],
                "optimizer_state": p["optimizer"], "rng_state": p["rng"]}

    def start_positions(self) -> list[dict[str, Any]]:
        """Where each worker starts: epoch, batch, step, samples (the beginning, or a resumed checkpoint's)."""
        return [{k: v for k, v in self._start_position(r).items() if k in POSITION_KEYS}
                for r in range(self.num_workers)]

    def pause(self) -> None:
        with self._run.lock:
            if self._run.value in ("running", "starting") and self._run.move("paused"):
                self._desired = PAUSE
                self._apply_word()

    def resume(self, changes: dict[str, Any] | None = None) -> None:
        """Resume a paused run; ``changes`` (keys of LIVE_KEYS) apply at the next batch of every worker.

        Bad changes raise ConfigError (one line naming the key) and the run stays paused.
        """
        with self._run.lock:
            if self._run.value != "paused":
                return
            if changes:
                self._change_settings(changes)
            now = time.monotonic()
            for rank in self._last_seen:  # paused time is not a stall
                self._last_seen[rank] = now
            self._desired = RUN
            self._apply_word()
            self._run.move("running", "resumed")

    def _change_settings(self, changes: dict[str, Any]) -> None:
        unknown = sorted(set(changes) - set(LIVE_KEYS))
        if unknown:
            raise ConfigError(f"config: {unknown[0]} cannot change during a run; these can: {', '.join(LIVE_KEYS)}")
        new = apply_changes(self.config, changes)
        done = min((p["epoch"] - 1 for p in self._progress()), default=0)
        if new.train.epochs < max(1, done):
            raise ConfigError(f"config: train.epochs must be at least the {done} epoch(s) already done, "
                              f"got {new.train.epochs}")
        diff = {k: {"from": _get(self.config, k), "to": _get(new, k)} for k in changes if _get(self.config, k) != _get(new, k)}
        if not diff:
            return
        self.config = new
        self.strategy = self.strategy.with_config(new)
        if self._channels is not None:
            self._channels.settings.write({k: v["to"] for k, v in diff.items()})
        if self.run_dir is not None:
            atomic_write_text(self.run_dir / "config.toml", to_toml(new))
        steps = {str(w): r["step"] for w, r in sorted(self.stats.last_step.items())}
        self._emit([{"kind": "config", "t": time.time(), "worker": None, "changes": diff, "steps": steps}])

    def checkpoint(self) -> bool:
        """Ask for a consistent checkpoint now (running or paused); False if one cannot be asked."""
        with self._run.lock:
            return self._request_checkpoint()

    def stop(self, timeout: float = 10.0) -> str | None:
        """Stop at the next batch, write checkpoint and summary, join; bounded by ``timeout``."""
        self.request_stop(timeout)
        self._run.ended.wait(timeout + 2 * TERMINATE_GRACE_S + 5.0)
        return self.summary["status"] if self.summary else self._run.value

    def request_stop(self, timeout: float = 10.0) -> None:
        """Ask the workers to stop and return at once. ``timeout`` 0: end them now (terminate, then kill)."""
        with self._run.lock:
            state = self._run.value
            if state == "idle":
                self._run.move("stopped", "stopped before start")
                self._run.ended.set()
                return
            if state in ENDED or state == "finishing":
                return
            self._desired = STOP
            deadline = time.monotonic() + timeout
            if self._stop_deadline is None or deadline < self._stop_deadline:
                self._stop_deadline = deadline
            self._apply_word()
            self._run.move("stopping")

    def wait(self, timeout: float | None = None) -> str | None:
        if not self._run.ended.wait(timeout):
            return None
        collector = self._collector
        if collector is not None and collector is not threading.current_thread():
            collector.join(5.0)  # nothing of the run may still be running when the caller exits
        return self._run.value

    def final_model(self) -> nn.Module:
        """A copy of the trained model (the best one for a sweep)."""
        if not self._models or self.info is None:
            raise RuntimeError("no model: the session has not started")
        src = self._models[self._result_model()]
        model = build_model(self.config.model, self.info.input_shape, self.info.num_classes, self.info.image_shape,
                            self.info.categories)
        model.load_state_dict({k: v.detach().clone() for k, v in src.state_dict().items()})
        model.eval()
        return model

    # -- control word -----------------------------------------------------------------
    def _apply_word(self) -> None:
        """Set the workers' control word from what was asked (lock held): stop wins, then a checkpoint."""
        ch = self._channels
        if ch is None:
            return
        if self._desired == STOP:
            word = STOP
        elif self._request is not None:
            word = CHECKPOINT
        else:
            word = self._desired
        ch.command.value = word
        if word in (RUN, STOP):
            ch.run_event.set()  # wakes waiting workers, which then read the word
        else:
            ch.run_event.clear()

    # -- records ----------------------------------------------------------------------
    def _emit(self, records: list[dict[str, Any]]) -> None:
        with self._emit_lock:  # the caller's thread (pause/resume) and the collector both emit
            self.stats.add(records)
            self._recorder.write(records)
            for fn in list(self._listeners):
                try:
                    fn(records)
                except Exception:  # a broken listener must not kill the run
                    pass

    def _log(self, level: str, message: str, worker: int | None = None) -> None:
        self._emit([{"kind": "log", "t": time.time(), "worker": worker, "level": level, "message": message}])

    def _fail_before_spawn(self, exc: BaseException) -> None:
        self.error = " ".join(str(exc).splitlines()) or type(exc).__name__
        with self._run.lock:
            self._write_summary("failed")
            self._run.move("failed", self.error)
        self._close()

    def _stopped_before_spawn(self) -> None:
        with self._run.lock:
            self._run.move("stopping")
            self._write_summary("stopped")
            self._run.move("stopped", "stopped before the workers started")
        self._close()

    # -- the collector thread -----------------------------------------------------------
    def _collect(self) -> None:
        try:
            self._collect_loop()
            self._finish()
        except Exception as exc:  # never leave the caller waiting forever
            self.error = self.error or f"session: {type(exc).__name__}: {exc}"
            self._procs.join(0.1)
            try:
                self._write_summary("failed")
            except Exception:
                pass
            self._run.move("failed", self.error)
            self._close()

    def _collect_loop(self) -> None:
        n = len(self._procs)
        queue = self._channels.queue
        while len(self.stats.done) < n:
            batch = self._receive(queue, 0.05)
            if batch:
                self._handle(batch)
            self._check_processes()
            self._check_stalls()
            if self._stop_deadline is not None:
                self._procs.escalate(self._stop_deadline)
            self._schedule_checkpoint()
            self._poll_control()

    def _handle(self, batch: list[dict[str, Any]]) -> None:
        public: list[dict[str, Any]] = []
        now = time.monotonic()
        for rec in batch:
            worker = rec.get("worker")
            if worker is not None:
                self._last_seen[worker] = now
                if worker in self.stalled:
                    self.stalled.discard(worker)
                    public.append({"kind": "log", "t": time.time(), "worker": worker, "level": "info",
                                   "message": f"worker {worker} is progressing again"})
            if rec["kind"] == "eval":  # may end the run early; a _best record may follow it
                public.append(rec)
                self._emit(public)
                public = []
                self._on_eval(rec)
                continue
            if rec["kind"] not in INTERNAL:
                public.append(rec)
                continue
            # these may change the session's state: what the worker said before comes first
            if public:
                self._emit(public)
                public = []
            if rec["kind"] == "_done":
                self._on_worker_done(rec)
            elif rec["kind"] == "_snapshot":
                self._on_snapshot(rec)
            elif rec["kind"] == "_best":
                self._on_best(rec)
            else:
                self._on_diverged(rec)
        if public:
            self._emit(public)
        if self._run.value == "starting" and any(r["kind"] == "state" and r["state"] == "running" for r in batch):
            self._run.move("running")

    def _on_worker_done(self, rec: dict[str, Any]) -> None:
        self.stats.add([rec])
        if self._request is not None:
            self._request.waiting.discard(rec["worker"])
            self._request.parts[rec["worker"]] = rec
            self._maybe_complete_checkpoint()
        if rec["status"] == "failed":
            if self.error is None:
                self.error = rec["error"]
                self._error_at = time.monotonic()
            self.request_stop()

    def _on_eval(self, rec: dict[str, Any]) -> None:
        """Track the run's best evaluation; stop early after ``train.early_stop_patience`` epochs without one."""
        if not self.strategy.keeps_best:
            return
        train = self.config.train
        from core.metric_names import selection_metric

        monitor = selection_metric(self.config, self.info.task if self.info else "classification")
        value = rec[monitor]
        if improved(value, self.best["value"] if self.best else None, monitor, train.early_stop_min_delta):
            self.best = {"monitor": monitor, "value": value, "worker": rec["worker"], "epoch": rec["epoch"]}
            return
        patience = train.early_stop_patience
        if not patience or self.best is None or self.stop_reason is not None:
            return
        if rec["epoch"] - self.best["epoch"] >= patience:
            self.stop_reason = (f"early stop: {monitor} did not improve for {patience} epoch(s) "
                                f"(best {self.best['value']:.4g} at epoch {self.best['epoch']})")
            self._log("info", self.stop_reason)
            self.request_stop()

    def _on_best(self, rec: dict[str, Any]) -> None:
        """A worker's weights of an evaluation: checkpoints/best.pt when it is the run's best."""
        best = self.best
        if best is None or (best["worker"], best["epoch"]) != (rec["worker"], rec["epoch"]) or self.info is None:
            return
        self._recorder.best({"config": to_dict(self.config), "info": self.info.as_dict(),
                             "model": state_from_bytes(rec["weights"]), "models": None,
                             "epoch": rec["epoch"], "steps": rec["step"], "best_worker": rec["worker"],
                             "monitor": best["monitor"], "value": best["value"]})

    def _on_diverged(self, rec: dict[str, Any]) -> None:
        """A worker paused the run on a non-finite loss (pause_on_divergence)."""
        with self._run.lock:
            if self._run.value in ("running", "starting") and self._run.move("paused", f"diverged: {rec['message']}"):
                self._desired = PAUSE
                self._apply_word()

    def _check_processes(self) -> None:
        for rank in range(len(self._procs)):
            if rank in self.stats.done or self._procs.alive(rank):
                continue
            self._drain_for(rank)
            if rank in self.stats.done:
                continue
            if self._stop_deadline is not None and self.error is None and time.monotonic() >= self._stop_deadline:
                # ended by the stop escalation (terminate/kill): the run was stopped, not failed
                self._log("warning", f"worker {rank} did not stop in time and was ended "
                                     f"({self._procs.exit_reason(rank)})", rank)
                self._on_worker_done({"kind": "_done", "worker": rank, "status": "stopped", "error": None})
                continue
            message = self._procs.describe_exit(rank)
            self._emit([{"kind": "log", "t": time.time(), "worker": rank, "level": "error", "message": message},
                        {"kind": "state", "t": time.time(), "worker": rank, "state": "failed", "detail": message}])
            # a dead rank makes its peers' collectives fail a moment later: the death is the cause
            secondary = self.strategy.uses_process_group and time.monotonic() - self._error_at < 2.0
            if self.error is None or secondary:
                self.error = message
            self._on_worker_done({"kind": "_done", "worker": rank, "status": "failed", "error": message})

    def _drain_for(self, rank: int, wait: float = 0.5) -> None:
        """A worker exited: read what it sent before its end (its pipe may still hold it)."""
        deadline = time.monotonic() + wait
        while rank not in self.stats.done and time.monotonic() < deadline and not self._queue_broken:
            batch = self._receive(self._channels.queue, 0.05)
            if batch:
                self._handle(batch)

    def _receive(self, queue: Any, timeout: float) -> list[dict[str, Any]] | None:
        """The next batch of records, None when none came; a batch a dying worker left half-sent ends the
        reading (the workers are then stopped, and ended when they cannot say so)."""
        if self._queue_broken:
            time.sleep(timeout)
            return None
        try:
            return receive(queue, timeout, self._procs.any_dead)
        except queue_mod.Empty:
            return None
        except (QueueBroken, EOFError, OSError) as exc:
            self._queue_broken = True
            self._log("error", f"records from the workers stopped: a worker ended while sending them ({exc}); "
                               "the run stops")
            self.request_stop()
            return None

    def _check_stalls(self) -> None:
        """Report a worker that sends nothing while the run is not paused (a deadlock, a hung loader)."""
        limit = self.config.parallel.stall_timeout
        if not limit or self._run.value != "running":
            return
        now = time.monotonic()
        for rank in range(self.num_workers):
            if rank in self.stats.done or rank in self.stalled:
                continue
            seen = self._last_seen.setdefault(rank, now)
            if now - seen > limit:
                self.stalled.add(rank)
                self._log("warning", f"worker {rank} stalled: no progress for {now - seen:.0f} s "
                                     f"(parallel.stall_timeout = {limit:g}); Stop ends it", rank)

    def _poll_control(self) -> None:
        """Act on a request in the run's control file (``traindesk pause|resume|stop``, an attached window)."""
        now = time.monotonic()
        if self._control is None or now - self._control_polled < CONTROL_POLL_S:
            return
        self._control_polled = now
        request = self._control.poll()
        if request is None:
            return
        command = request["command"]
        self._log("info", f"{command} asked from outside (pid {request.get('pid')})")
        if command == "pause":
            self.pause()
        elif command == "resume":
            self.resume()
        else:
            self.request_stop()

    # -- consistent checkpoints ----------------------------------------------------------
    def _schedule_checkpoint(self) -> None:
        now = time.monotonic()
        request = self._request
        if request is not None:
            if now - request.since > CHECKPOINT_TIMEOUT_S:
                with self._run.lock:
                    self._request = None
                    self._apply_word()
                self._log("warning", f"checkpoint skipped: worker(s) {sorted(request.waiting)} did not answer "
                                     f"within {CHECKPOINT_TIMEOUT_S:g} s")
            return
        every = self.config.train.checkpoint_every
        if every and now - self._last_checkpoint >= every:
            with self._run.lock:
                if self._run.value == "running":
                    self._request_checkpoint()

    def _request_checkpoint(self) -> bool:
        """Ask every live worker for its part (lock held)."""
        if self._request is not None or self._channels is None or self._run.value not in ("running", "paused"):
            return False
        waiting = {r for r in range(self.num_workers) if r not in self.stats.done}
        if not waiting:
            return False
        self._request_ids += 1
        self._request = _CheckpointRequest(self._request_ids, waiting)
        self._channels.request.value = self._request_ids
        self._apply_word()
        return True

    def _on_snapshot(self, rec: dict[str, Any]) -> None:
        request = self._request
        if request is None or rec["request"] != request.id:
            return  # an answer to a request given up on
        request.waiting.discard(rec["worker"])
        request.parts[rec["worker"]] = rec
        self._maybe_complete_checkpoint()

    def _maybe_complete_checkpoint(self) -> None:
        request = self._request
        if request is None or request.waiting:
            return
        # every worker waits at a batch boundary (or has ended): the shared weights hold still
        states = self._clone_states()
        with self._run.lock:
            self._request = None
            self._apply_word()
        self._last_checkpoint = time.monotonic()
        parts = [request.parts.get(r) or self.stats.done.get(r) or {} for r in range(self.num_workers)]
        if all(all(k in p for k in POSITION_KEYS) for p in parts):
            self._write_checkpoint(parts, states)

    def _clone_states(self) -> list[dict[str, torch.Tensor]]:
        return [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in self._models]

    def _result_model(self) -> int:
        return self.strategy.model_index(self.strategy.result_worker(self.stats.last_eval))

    def _write_checkpoint(self, parts: list[dict[str, Any]],
                          states: list[dict[str, torch.Tensor]] | None = None) -> bool:
        assert self.info is not None
        states = states if states is not None else self._clone_states()
        if not weights_finite(states):
            self._log("error", "weights are not finite: the last checkpoint was kept as it was")
            return False
        payload = checkpoint_payload(self.config, self.info.as_dict(), states, self._result_model(), parts,
                                     [self.strategy.worker_lr(r) for r in range(self.num_workers)])
        self._recorder.checkpoint(payload)
        return True

    # -- the end -----------------------------------------------------------------------
    def _finish(self) -> None:
        with self._run.lock:
            self._run.move("finishing")
        self._procs.join(TERMINATE_GRACE_S)
        statuses = [d["status"] for d in self.stats.done.values()]
        if "failed" in statuses or self.error:
            status = "failed"
        elif self.stop_reason is not None:
            status = "finished"  # stopped early on purpose
        elif "stopped" in statuses or self._desired == STOP:
            status = "stopped"
        else:
            status = "finished"
        parts = [self.stats.done.get(r, {}) for r in range(self.num_workers)]
        self._adopt_result()
        complete = all(p.get("optimizer") is not None for p in parts)
        if status != "failed" and complete:
            try:
                self._write_checkpoint(parts)
            except OSError as exc:
                status = "failed"
                self.error = self.error or f"checkpoint: cannot write {self.run_dir}/checkpoints/last.pt: {exc.strerror}"
        else:
            self._log("info", "the last consistent checkpoint was kept: Continue run resumes from it")
        self._write_summary(status)
        # per-class metrics and the confusion matrix on the validation split (eval.json)
        self.summary = attach_evaluation(self.run_dir, self.final_model, self._data, self.summary)
        self._run.move(status, self.error or "")
        self._close()

    def _adopt_result(self) -> None:
        """A strategy whose result is not the shared model (search: the best trial) hands it over here."""
        if self.run_dir is None or self.info is None:
            return
        path = self.strategy.result_checkpoint(self.run_dir)
        if path is None:
            return
        ckpt = load_checkpoint(path)
        config = check_checkpoint(ckpt, f"checkpoint: {path}")[0]
        model = build_model(config.model, self.info.input_shape, self.info.num_classes, self.info.image_shape,
                            self.info.categories)
        load_weights(model, ckpt["model"], f"checkpoint: {path}")
        self.config, self._models = config, [model]

    def _progress(self) -> list[dict[str, int]]:
        """Per worker, for the summary: its final position, else its last step record, else its start."""
        out = []
        per_epoch = self.strategy.batches_per_epoch(self.info.n_train) if self.info else 1
        for rank in range(self.num_workers):
            done = self.stats.done.get(rank, {})
            rec = self.stats.last_step.get(rank)
            if all(k in done for k in POSITION_KEYS):
                out.append({k: int(done[k]) for k in POSITION_KEYS})
            elif rec is not None:
                epoch = int(rec["epoch"])
                batch = min(per_epoch, max(0, rec["step"] - (epoch - 1) * per_epoch))
                if batch >= per_epoch:
                    epoch, batch = epoch + 1, 0
                out.append({"epoch": epoch, "batch": batch, "step": rec["step"], "samples": rec["samples"]})
            else:
                out.append({k: v for k, v in self._start_position(rank).items() if k in POSITION_KEYS})
        return out

    def _write_summary(self, status: str) -> None:
        if self.run_dir is None:
            return
        stats = self.stats
        result = self.strategy.result_worker(stats.last_eval)
        progress = self._progress()
        samples = sum(p["samples"] for p in progress)
        start = sum(self._start_position(r)["samples"] for r in range(self.num_workers))
        train_s = stats.train_seconds()
        own_models = self.strategy.num_models > 1
        ev = stats.last_eval.get(result) or (next(iter(stats.last_eval.values())) if stats.last_eval else None)
        summary = {
            "status": status,
            "strategy": self.config.parallel.strategy,
            "workers": self.num_workers,
            "epochs_done": min((p["epoch"] - 1 for p in progress), default=0),
            "steps": sum(p["step"] for p in progress),
            "samples": samples,
            "wall_s": round(time.time() - self._t_start, 4),
            "train_s": round(train_s, 4),
            "samples_per_s": round((samples - start) / train_s, 2) if train_s > 0 else 0.0,
            "final": {
                "train_loss": stats.train_loss([result] if own_models and result in stats.epoch_loss else None),
                "val_loss": ev["val_loss"] if ev else None,
                "val_accuracy": ev.get("val_accuracy") if ev else None,
                **({k: v for k, v in ev.items() if k.startswith("val_") and k not in ("val_loss", "val_accuracy")}
                   if ev else {}),
            },
            **({"task": self.info.task} if self.info else {}),
            **({"dropped_rows": self.info.dropped_rows} if self.info and self.info.dropped_rows else {}),
            "error": self.error,
            "parameters": self.num_parameters,
            "dataset": self.info.name if self.info else None,
            "launcher": self.launcher.name,
            **({"stop_reason": self.stop_reason} if self.stop_reason else {}),
            **({"best": self.best} if self.best else {}),
            **self.launcher.summary_extra(stats.nodes()),
            **({"parent": self.parent} if self.parent else {}),
            **self.strategy.summary_extra(stats.last_eval, self.run_dir),
        }
        self.summary = summary
        self._recorder.summary(summary)

    def _close(self) -> None:
        """Release the run directory, its lock and the channels; only then is the run over for waiters."""
        self._recorder.close()
        self.launcher.cleanup()
        ch = self._channels
        if ch is not None:
            ch.queue.close()
            ch.queue.cancel_join_thread()
        self._run.ended.set()
