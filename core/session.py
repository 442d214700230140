"""A training run: spawns the workers, collects their records, owns the run directory.

The session is plain Python (no Qt). A collector thread drains the workers'
queue, appends ``metrics.jsonl``, watches the worker processes, passes every
batch of records to listeners, and at the end writes the checkpoint and
``summary.json``.
"""

from __future__ import annotations

import os
import queue as queue_mod
import signal
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from core import launcher
from core.checkpoint import (
    check_checkpoint, load_checkpoint, load_weights, save_checkpoint, state_from_bytes, state_to_bytes,
)
from core.config import Config, ConfigError, to_dict, to_toml
from core.data import DatasetInfo, PreparedData, load_data
from core.errors import ModelError, RunError
from core.evaluate import attach_evaluation
from core.models import build_model, count_parameters
from core.runlog import (
    ACTIVE_STATES, END_STATES, MetricsLog, RunsLock, atomic_write_json, atomic_write_text, check_free_space,
    make_run_dir,
)
from core.workers import PAUSE, RUN, STOP, Channels, WorkerSpec, default_threads, worker_main

Listener = Callable[[list[dict[str, Any]]], None]
CHECKPOINT_EVERY_S = 30.0
TERMINATE_GRACE_S = 2.0


class RecordBuffer:
    """A thread-safe buffer of records for a consumer thread (e.g. a GUI reader)."""

    def __init__(self, maxlen: int = 1_000_000) -> None:
        self._items: deque[dict[str, Any]] = deque(maxlen=maxlen)
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


def _check_device(cfg: Config) -> None:
    dev = cfg.parallel.device
    if dev.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"config: parallel.device is {dev!r} but this machine has no CUDA device; use \"cpu\"")
        if ":" in dev and int(dev.split(":")[1]) >= torch.cuda.device_count():
            raise ConfigError(
                f"config: parallel.device {dev!r} does not exist; this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
        if cfg.parallel.strategy == "hogwild":
            raise ConfigError("config: parallel.strategy \"hogwild\" runs on the CPU; use ddp, sweep or single with CUDA")
    if dev == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError("config: parallel.device is \"mps\" but this machine has no Apple GPU; use \"cpu\"")


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Session:
    """One training run. See docs/ENGINE_API.md for the contract."""

    def __init__(self, config: Config, runs_dir: str | Path = "runs", name: str | None = None,
                 pause_on_divergence: bool = False) -> None:
        self.config = config
        self.pause_on_divergence = pause_on_divergence
        self.runs_dir = Path(runs_dir)
        self.name = name or f"{config.parallel.strategy}-{config.model.kind.split(':')[0]}"
        self.run_dir: Path | None = None
        self.info: DatasetInfo | None = None
        self.summary: dict[str, Any] | None = None
        self.error: str | None = None
        self.num_workers = 1 if config.parallel.strategy == "single" else config.parallel.workers
        self.num_parameters = 0
        self._state = "idle"
        self._listeners: list[Listener] = []
        self._lock = threading.RLock()
        self._emit_lock = threading.Lock()
        self._ended = threading.Event()
        self._procs: list[Any] = []
        self._models: list[nn.Module] = []
        self._data: PreparedData | None = None
        self._collector: threading.Thread | None = None
        self._stop_deadline: float | None = None
        self._dist_file: str | None = None
        # run bookkeeping (collector thread)
        self._done: dict[int, dict[str, Any]] = {}
        self._last_step: dict[int, dict[str, Any]] = {}
        self._epoch_losses: dict[int, tuple[int, float, int]] = {}  # worker -> (epoch, sum, n)
        self._last_eval: dict[int, dict[str, Any]] = {}
        self._first_step_t: float | None = None
        self._last_step_t: float | None = None
        self._pauses: list[list[float]] = []  # [start, end] wall times
        self._t_start = 0.0
        self._last_checkpoint = 0.0
        self._error_at = 0.0
        self._last_seen: dict[int, float] = {}   # worker -> monotonic time of its last record
        self.stalled: set[int] = set()
        self._resume: dict[str, Any] | None = None  # the checkpoint a resumed run continues
        self._resume_dir: Path | None = None
        self._resume_where = "checkpoint"
        self._runs_lock: RunsLock | None = None

    @classmethod
    def from_run(cls, path: str | Path, epochs: int | None = None, runs_dir: str | Path | None = None,
                 **kwargs: Any) -> "Session":
        """A session that continues a stopped or failed run from its checkpoint.

        ``path`` is a run directory (the run continues there) or a checkpoint
        file (a new run directory is made under ``runs_dir``).
        """
        path = Path(path)
        ckpt = load_checkpoint(path)
        where = f"checkpoint: {path}"
        cfg = check_checkpoint(ckpt, where)[0]
        if epochs is not None:
            cfg = cfg.replace("train", epochs=epochs)
        progress = ckpt.get("progress") or []
        workers = 1 if cfg.parallel.strategy == "single" else cfg.parallel.workers
        if not isinstance(progress, list) or not all(
            isinstance(p, dict) and all(isinstance(p.get(k), int) for k in ("epoch", "batch", "step", "samples"))
            for p in progress
        ):
            raise RunError(f"{where}: its progress table is unusable")
        if len(progress) != workers:
            raise RunError(f"checkpoint: {path}: holds no resumable progress for {workers} worker(s)")
        if min(p["epoch"] for p in progress) > cfg.train.epochs:
            raise RunError(
                f"resume: {path} already finished all {cfg.train.epochs} epochs; pass --epochs N to train further"
            )
        if path.is_dir():
            run_dir: Path | None = path
        elif path.parent.name == "checkpoints" and (path.parent.parent / "config.toml").exists():
            run_dir = path.parent.parent
        else:
            run_dir = None
        base = run_dir.parent if run_dir is not None else Path(runs_dir or "runs")
        session = cls(cfg, runs_dir=base, name=(run_dir.name if run_dir else "resumed"), **kwargs)
        session._resume, session._resume_dir, session._resume_where = ckpt, run_dir, where
        return session

    # -- public API -----------------------------------------------------------------
    @property
    def state(self) -> str:
        return self._state

    @property
    def active(self) -> bool:
        return self._state in ACTIVE_STATES

    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def worker_pids(self) -> list[int]:
        return [p.pid for p in self._procs if p.is_alive()]

    def start(self) -> None:
        """Load data, build the model, create the run directory and spawn the workers."""
        with self._lock:
            if self._state != "idle":
                raise RuntimeError(f"session already {self._state}")
            self._t_start = time.time()
            cfg = self.config
            _check_device(cfg)
            ctx = launcher.get_context()
            launcher.warm_up()  # no-op when already running
            data = load_data(cfg.data, seed=cfg.train.seed)
            info = data.info
            models = self._build_models(info)
            self.num_parameters = count_parameters(models[0])
            self._runs_lock = RunsLock.acquire(self.runs_dir, self.name)
            try:
                check_free_space(self.runs_dir, self.num_parameters, self.num_workers)
                if self._resume is not None and self._resume_dir is not None:
                    self.run_dir = self._resume_dir
                else:
                    self.run_dir = make_run_dir(self.runs_dir, self.name)
                atomic_write_text(self.run_dir / "config.toml", to_toml(cfg))
                self._log = MetricsLog(self.run_dir / "metrics.jsonl")
            except BaseException:
                self._runs_lock.release()
                raise
            self._data, self._models, self.info = data, models, info
            detail = f"{self.num_workers} worker(s), {self.num_parameters:,} parameters"
            if self._resume is not None:
                p0 = self._resume["progress"][0]
                detail += f"; resuming at epoch {p0['epoch']}, batch {p0['batch']}"
            self._set_state("starting", detail)
            self._queue = ctx.Queue()
            self._command = ctx.RawValue("i", RUN)
            self._run_event = ctx.Event()
            self._run_event.set()
            channels = Channels(self._queue, self._command, self._run_event)
            dist_init = ""
            if cfg.parallel.strategy == "ddp":
                fd, self._dist_file = tempfile.mkstemp(prefix="traindesk-ddp-")
                os.close(fd)
                os.unlink(self._dist_file)  # FileStore creates it; a stale one would confuse it
                dist_init = f"file://{self._dist_file}"
            threads = default_threads(self.num_workers, cfg.parallel.threads_per_worker)
            shared = [m.state_dict() for m in models]  # shared-memory tensors, rebound in each worker
            for rank in range(self.num_workers):
                spec = WorkerSpec(
                    rank=rank, world_size=self.num_workers, strategy=cfg.parallel.strategy, config=cfg,
                    seed=cfg.train.seed + rank, lr=self._worker_lr(rank), threads=threads,
                    parent_pid=os.getpid(), dist_init=dist_init, device=cfg.parallel.device,
                    pause_on_divergence=self.pause_on_divergence, **self._resume_fields(rank),
                )
                proc = ctx.Process(target=worker_main, args=(spec, data, shared, channels),
                                   name=f"traindesk-worker-{rank}", daemon=False)
                self._procs.append(proc)
            try:
                for proc in self._procs:
                    proc.start()
            except Exception as exc:
                self._command.value = STOP
                for proc in self._procs:
                    if proc.pid is not None:
                        proc.kill()
                        proc.join(5)
                self._fail_now(f"could not start worker processes: {type(exc).__name__}: {exc}")
                raise
            self._collector = threading.Thread(target=self._collect, name="traindesk-collector", daemon=True)
            self._collector.start()

    def _build_models(self, info: DatasetInfo) -> list[nn.Module]:
        """The model(s) in shared memory: fresh, or the checkpoint's weights when resuming."""
        cfg = self.config
        n_models = self.num_workers if cfg.parallel.strategy == "sweep" else 1
        states: list[Any] = [None] * n_models
        if self._resume is not None:
            states = self._resume.get("models") or [self._resume["model"]] * n_models
            if not isinstance(states, list) or len(states) != n_models:
                raise RunError(f"{self._resume_where}: holds {len(states)} model(s), the run has {n_models}")
        models = []
        for i in range(n_models):
            torch.manual_seed(cfg.train.seed + i)
            try:
                m = build_model(cfg.model, info.input_shape, info.num_classes, info.image_shape)
            except ModelError as exc:
                if self._resume is None:
                    raise
                raise RunError(f"{self._resume_where}: its model cannot be rebuilt: {exc}") from None
            if states[i] is not None:
                load_weights(m, states[i], self._resume_where)
            m.share_memory()
            models.append(m)
        return models

    def _resume_fields(self, rank: int) -> dict[str, Any]:
        if self._resume is None:
            return {}
        p = self._resume["progress"][rank]
        opt = (self._resume.get("optimizers") or [None] * self.num_workers)[rank]
        rng = (self._resume.get("rng") or [None] * self.num_workers)[rank]
        return {
            "start_epoch": int(p["epoch"]), "start_batch": int(p["batch"]), "start_step": int(p["step"]),
            "start_samples": int(p["samples"]),
            "optimizer_state": state_to_bytes(opt) if opt is not None else None,
            "rng_state": state_to_bytes(rng) if rng is not None else None,
        }

    def _worker_lr(self, rank: int) -> float:
        p = self.config.parallel
        if p.strategy == "sweep" and p.sweep_lr:
            return p.sweep_lr[rank]
        return self.config.optim.lr

    def pause(self) -> None:
        with self._lock:
            if self._state not in ("running", "starting"):
                return
            self._command.value = PAUSE
            self._run_event.clear()
            self._pauses.append([time.time(), 0.0])
            self._set_state("paused")

    def resume(self) -> None:
        with self._lock:
            if self._state != "paused":
                return
            if self._pauses and not self._pauses[-1][1]:
                self._pauses[-1][1] = time.time()
            now = time.monotonic()
            for rank in self._last_seen:  # paused time is not a stall
                self._last_seen[rank] = now
            self._command.value = RUN
            self._run_event.set()
            self._set_state("running", "resumed")

    def _on_diverged(self, rec: dict[str, Any]) -> None:
        """A worker paused the run on a non-finite loss (pause_on_divergence)."""
        with self._lock:
            if self._state in ("running", "starting"):
                self._pauses.append([time.time(), 0.0])
                self._set_state("paused", f"diverged: {rec['message']}")

    def stop(self, timeout: float = 10.0) -> str | None:
        """Stop at the next batch, write checkpoint and summary, join; bounded by ``timeout``."""
        self.request_stop(timeout)
        self._ended.wait(timeout + 2 * TERMINATE_GRACE_S + 5.0)
        return self.summary["status"] if self.summary else self._state

    def request_stop(self, timeout: float = 10.0) -> None:
        """Ask the workers to stop and return at once (the GUI calls this)."""
        with self._lock:
            if self._state == "idle":
                self._set_state("stopped", "stopped before start")
                self._ended.set()
                return
            if not self.active:
                return
            if self._pauses and not self._pauses[-1][1]:
                self._pauses[-1][1] = time.time()
            self._command.value = STOP
            self._run_event.set()  # wakes paused workers, which then see STOP
            if self._stop_deadline is None:
                self._stop_deadline = time.monotonic() + timeout
            if self._state != "stopping":
                self._set_state("stopping")

    def wait(self, timeout: float | None = None) -> str | None:
        if not self._ended.wait(timeout):
            return None
        collector = self._collector
        if collector is not None and collector is not threading.current_thread():
            collector.join(5.0)  # nothing of the run may still be running when the caller exits
        return self._state

    def final_model(self) -> nn.Module:
        """A copy of the trained model (the best one for a sweep)."""
        if not self._models or self.info is None:
            raise RuntimeError("no model: the session has not started")
        best = self._best_worker()
        src = self._models[best if len(self._models) > 1 else 0]
        model = build_model(self.config.model, self.info.input_shape, self.info.num_classes, self.info.image_shape)
        model.load_state_dict({k: v.detach().clone() for k, v in src.state_dict().items()})
        model.eval()
        return model

    # -- internals --------------------------------------------------------------------
    def _set_state(self, state: str, detail: str = "") -> None:
        self._state = state
        record = {"kind": "state", "t": time.time(), "worker": None, "state": state, "detail": detail}
        self._emit([record])

    def _emit(self, records: list[dict[str, Any]]) -> None:
        with self._emit_lock:  # the GUI thread (pause/resume) and the collector both emit
            log = getattr(self, "_log", None)
            if log is not None:
                log.write(records)
            for fn in list(self._listeners):
                try:
                    fn(records)
                except Exception:  # a broken listener must not kill the run
                    pass

    def _fail_now(self, message: str) -> None:
        self.error = message
        self._write_summary("failed")
        self._set_state("failed", message)
        self._close()

    def _collect(self) -> None:
        try:
            self._collect_loop()
            self._finish()
        except Exception as exc:  # never leave the caller waiting forever
            self.error = self.error or f"session: {type(exc).__name__}: {exc}"
            self._terminate_all()
            try:
                self._write_summary("failed")
            except Exception:
                pass
            self._set_state("failed", self.error)
            self._close()

    def _collect_loop(self) -> None:
        n = len(self._procs)
        while len(self._done) < n:
            try:
                batch = self._queue.get(timeout=0.05)
            except queue_mod.Empty:
                batch = None
            if batch:
                self._handle(batch)
            self._check_processes()
            self._check_stalls()
            self._maybe_escalate()
            self._maybe_checkpoint()

    def _check_stalls(self) -> None:
        """Report a worker that sends nothing while the run is not paused (a deadlock, a hung loader)."""
        limit = self.config.parallel.stall_timeout
        if not limit or self._state != "running":
            return
        now = time.monotonic()
        for rank in range(self.num_workers):
            if rank in self._done or rank in self.stalled:
                continue
            seen = self._last_seen.setdefault(rank, now)
            if now - seen > limit:
                self.stalled.add(rank)
                self._emit([{"kind": "log", "t": time.time(), "worker": rank, "level": "warning",
                             "message": f"worker {rank} stalled: no progress for {now - seen:.0f} s "
                                        f"(parallel.stall_timeout = {limit:g}); Stop ends it"}])

    def _handle(self, batch: list[dict[str, Any]]) -> None:
        public: list[dict[str, Any]] = []
        now = time.monotonic()
        for rec in batch:
            kind = rec["kind"]
            worker = rec.get("worker")
            if worker is not None:
                self._last_seen[worker] = now
                if worker in self.stalled:
                    self.stalled.discard(worker)
                    public.append({"kind": "log", "t": time.time(), "worker": worker, "level": "info",
                                   "message": f"worker {worker} is progressing again"})
            if kind in ("_done", "_diverged"):
                # these may change the session's state: what the worker said before comes first
                if public:
                    self._emit(public)
                    public = []
                if kind == "_done":
                    self._on_worker_done(rec)
                else:
                    self._on_diverged(rec)
                continue
            if kind == "step":
                w = rec["worker"]
                self._last_step[w] = rec
                if self._first_step_t is None:
                    self._first_step_t = rec["t"]
                self._last_step_t = rec["t"]
                ep, total, count = self._epoch_losses.get(w, (0, 0.0, 0))
                if rec["epoch"] != ep:
                    ep, total, count = rec["epoch"], 0.0, 0
                self._epoch_losses[w] = (ep, total + rec["loss"], count + 1)
            elif kind == "eval":
                self._last_eval[rec["worker"]] = rec
            elif kind == "state" and rec["state"] == "running":
                if self._first_step_t is None:
                    self._first_step_t = rec["t"]  # sent just before a worker's first step
            public.append(rec)
        if self._state == "starting" and any(r["kind"] == "state" and r["state"] == "running" for r in public):
            with self._lock:
                if self._state == "starting":
                    public.append({"kind": "state", "t": time.time(), "worker": None, "state": "running",
                                   "detail": ""})
                    self._state = "running"
        if public:
            self._emit(public)

    def _on_worker_done(self, rec: dict[str, Any]) -> None:
        self._done[rec["worker"]] = rec
        if rec["status"] == "failed":
            if self.error is None:
                self.error = rec["error"]
                self._error_at = time.monotonic()
            self.request_stop()

    def _check_processes(self) -> None:
        for rank, proc in enumerate(self._procs):
            if rank in self._done or proc.is_alive():
                continue
            self._drain_for(rank)
            if rank in self._done:
                continue
            if self._stop_deadline is not None and self.error is None:
                # ended by the stop escalation (terminate/kill): the run was stopped, not failed
                message = f"worker {rank} did not stop in time and was ended ({_exit_reason(proc.exitcode)})"
                self._emit([{"kind": "log", "t": time.time(), "worker": rank, "level": "warning", "message": message}])
                self._done[rank] = {"kind": "_done", "worker": rank, "status": "stopped", "error": None,
                                    "optimizer": None, "epochs_done": 0, "steps": 0, "samples": 0}
                continue
            message = f"worker {rank} (pid {proc.pid}) died: {_exit_reason(proc.exitcode)}"
            self._emit([{"kind": "log", "t": time.time(), "worker": rank, "level": "error", "message": message},
                        {"kind": "state", "t": time.time(), "worker": rank, "state": "failed", "detail": message}])
            self._done[rank] = {"kind": "_done", "worker": rank, "status": "failed", "error": message,
                                "optimizer": None, "epochs_done": 0, "steps": 0, "samples": 0}
            # in ddp a dead rank makes its peers' collectives fail a moment later: the death is the cause
            secondary = self.config.parallel.strategy == "ddp" and time.monotonic() - self._error_at < 2.0
            if self.error is None or secondary:
                self.error = message
            self.request_stop()

    def _drain_for(self, rank: int, wait: float = 0.5) -> None:
        """A worker exited: read what it sent before its end (its pipe may still hold it)."""
        deadline = time.monotonic() + wait
        while rank not in self._done and time.monotonic() < deadline:
            try:
                batch = self._queue.get(timeout=0.05)
            except queue_mod.Empty:
                continue
            self._handle(batch)

    def _maybe_escalate(self) -> None:
        if self._stop_deadline is None:
            return
        now = time.monotonic()
        if now < self._stop_deadline:
            return
        alive = [p for p in self._procs if p.is_alive()]
        if not alive:
            return
        if now < self._stop_deadline + TERMINATE_GRACE_S:
            for p in alive:
                p.terminate()
        else:
            for p in alive:
                p.kill()

    def _terminate_all(self) -> None:
        for p in self._procs:
            if p.is_alive():
                p.terminate()
        for p in self._procs:
            p.join(TERMINATE_GRACE_S)
            if p.is_alive():
                p.kill()
                p.join(TERMINATE_GRACE_S)

    def _best_worker(self) -> int:
        if self.config.parallel.strategy != "sweep" or not self._last_eval:
            return 0
        return max(self._last_eval, key=lambda w: (self._last_eval[w]["val_accuracy"], -self._last_eval[w]["val_loss"]))

    def _maybe_checkpoint(self) -> None:
        now = time.monotonic()
        if self._last_eval and now - self._last_checkpoint >= CHECKPOINT_EVERY_S and self._state == "running":
            self._last_checkpoint = now
            self._write_checkpoint(optimizers=None)

    def _progress(self) -> list[dict[str, int]]:
        """Per worker: epoch in progress, batches of it done, steps and samples so far."""
        cfg = self.config
        start = self._resume["progress"] if self._resume else None
        n = self.info.n_train if self.info else 0
        shard = -(-n // self.num_workers) if cfg.parallel.strategy in ("hogwild", "ddp") else n
        per_epoch = max(1, -(-shard // cfg.train.batch_size))
        out = []
        for rank in range(self.num_workers):
            done = self._done.get(rank)
            rec = self._last_step.get(rank)
            if done is not None and done.get("optimizer") is not None:
                out.append({"epoch": done["epoch"], "batch": done["batch"], "step": done["steps"],
                            "samples": done["samples"]})
            elif rec is not None:  # derived from the last step record: the position is deterministic
                epoch = int(rec["epoch"])
                batch = min(per_epoch, max(0, rec["step"] - (epoch - 1) * per_epoch))
                if batch >= per_epoch:
                    epoch, batch = epoch + 1, 0
                out.append({"epoch": epoch, "batch": batch, "step": rec["step"], "samples": rec["samples"]})
            elif start is not None:
                out.append(dict(start[rank]))
            else:
                out.append({"epoch": 1, "batch": 0, "step": 0, "samples": 0})
        return out

    def _write_checkpoint(self, optimizers: list[Any] | None, rngs: list[Any] | None = None) -> None:
        assert self.run_dir is not None and self.info is not None
        best = self._best_worker()
        src = self._models[best if len(self._models) > 1 else 0]
        info = self.info
        if not all(torch.isfinite(v).all() for v in src.state_dict().values() if v.is_floating_point()):
            self._emit([{"kind": "log", "t": time.time(), "worker": None, "level": "error",
                         "message": "weights are not finite: the last checkpoint was kept as it was"}])
            return
        progress = self._progress()
        payload = {
            "config": to_dict(self.config),
            "info": info.as_dict(),
            "model": {k: v.detach().clone() for k, v in src.state_dict().items()},
            "models": [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in self._models]
            if len(self._models) > 1 else None,
            "optimizers": optimizers,
            "rng": rngs,
            "progress": progress,
            "epoch": min(p["epoch"] for p in progress) - 1,  # epochs completed by every worker
            "steps": sum(p["step"] for p in progress),
            "best_worker": best,
            "worker_lrs": [self._worker_lr(r) for r in range(self.num_workers)],
        }
        save_checkpoint(self.run_dir / "checkpoints" / "last.pt", payload)

    def _finish(self) -> None:
        for p in self._procs:
            p.join(TERMINATE_GRACE_S)
        self._terminate_all()
        statuses = [d["status"] for d in self._done.values()]
        if "failed" in statuses or self.error:
            status = "failed"
        elif "stopped" in statuses or self._stop_deadline is not None:
            status = "stopped"
        else:
            status = "finished"
        optimizers, rngs = [], []
        previous = self._resume or {}
        for rank in range(self.num_workers):
            done = self._done.get(rank, {})
            blob, rng = done.get("optimizer"), done.get("rng")
            # a worker that died sent nothing: keep what the resumed checkpoint had for it
            optimizers.append(state_from_bytes(blob) if blob else (previous.get("optimizers") or [None] * (rank + 1))[rank])
            rngs.append(state_from_bytes(rng) if rng else (previous.get("rng") or [None] * (rank + 1))[rank])
        try:
            self._write_checkpoint(optimizers, rngs)
        except OSError as exc:
            status = "failed"
            self.error = self.error or f"checkpoint: cannot write {self.run_dir}/checkpoints/last.pt: {exc.strerror}"
        self._write_summary(status)
        # per-class metrics and the confusion matrix on the validation split (eval.json)
        self.summary = attach_evaluation(self.run_dir, self.final_model, self._data, self.summary)
        self._set_state(status, self.error or "")
        self._close()

    def _train_seconds(self) -> float:
        if self._first_step_t is None or self._last_step_t is None:
            return 0.0
        lo, hi = self._first_step_t, self._last_step_t
        paused = 0.0
        for start, end in self._pauses:
            end = end or time.time()
            paused += max(0.0, min(end, hi) - max(start, lo))
        return max(0.0, hi - lo - paused)

    def _write_summary(self, status: str) -> None:
        if self.run_dir is None:
            return
        best = self._best_worker()
        progress = self._progress() if self.info is not None else []
        samples = sum(p["samples"] for p in progress)
        steps = sum(p["step"] for p in progress)
        start = self._resume["progress"] if self._resume else []
        samples_this_leg = samples - sum(p["samples"] for p in start)
        train_s = self._train_seconds()
        losses = self._epoch_losses
        if self.config.parallel.strategy == "sweep" and best in losses:
            chosen = [losses[best]]
        else:
            chosen = list(losses.values())
        train_loss = sum(t / max(1, c) for _, t, c in chosen) / len(chosen) if chosen else None
        ev = self._last_eval.get(best) or (next(iter(self._last_eval.values())) if self._last_eval else None)
        epochs_done = min((p["epoch"] - 1 for p in progress), default=0)
        summary = {
            "status": status,
            "strategy": self.config.parallel.strategy,
            "workers": self.num_workers,
            "epochs_done": epochs_done,
            "steps": steps,
            "samples": samples,
            "wall_s": round(time.time() - self._t_start, 4),
            "train_s": round(train_s, 4),
            "samples_per_s": round(samples_this_leg / train_s, 2) if train_s > 0 else 0.0,
            "final": {
                "train_loss": train_loss,
                "val_loss": ev["val_loss"] if ev else None,
                "val_accuracy": ev["val_accuracy"] if ev else None,
            },
            "error": self.error,
            "parameters": self.num_parameters,
            "dataset": self.info.name if self.info else None,
        }
        if self.config.parallel.strategy == "sweep":
            summary["best_worker"] = best
            summary["best_lr"] = self._worker_lr(best)
            summary["sweep"] = [
                {"worker": w, "lr": self._worker_lr(w), "val_accuracy": e["val_accuracy"], "val_loss": e["val_loss"]}
                for w, e in sorted(self._last_eval.items())
            ]
        self.summary = summary
        atomic_write_json(self.run_dir / "summary.json", summary)

    def _close(self) -> None:
        if self._runs_lock is not None:
            self._runs_lock.release()
        log = getattr(self, "_log", None)
        if log is not None:
            log.close()
        if self._dist_file:
            try:
                os.unlink(self._dist_file)
            except OSError:
                pass
        q = getattr(self, "_queue", None)
        if q is not None:
            q.close()
            q.cancel_join_thread()
        self._ended.set()
