"""Training worker processes: one entry point, four strategies.

``worker_main(spec, data, shared, channels)`` is a module-level function
taking picklable arguments, so it runs under ``spawn`` and ``forkserver``.
``shared`` holds state dicts of shared-memory tensors, not modules: each
worker builds its model from the config (a custom model's class need not be
importable by name) and binds it to those tensors.

- single / sweep: the worker trains its own model (in shared memory on CPU).
- hogwild: every worker trains the same shared-memory model lock-free, each
  with its own optimizer and data shard (seed + rank).
- ddp: DistributedDataParallel over ``torch.distributed`` (gloo on CPU, nccl
  on CUDA); rank 0 copies the weights back to shared memory for the parent.

Control is a shared integer read once per batch (a plain memory read):
0 run, 1 pause, 2 stop; the ``run`` event wakes paused workers. Metric
records are batched and put on the queue about every 50 ms.
"""

from __future__ import annotations

import copy
import math
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.checkpoint import state_from_bytes, state_to_bytes
from core.config import Config, OptimConfig
from core.data import PreparedData, make_batches, full_tensors

RUN, PAUSE, STOP = 0, 1, 2
FLUSH_INTERVAL = 0.05   # seconds between queue puts
RECORD_INTERVAL = 0.01  # seconds between step records of one worker
DDP_CONTROL_EVERY = 8   # ddp ranks agree on pause/stop every N steps
EVAL_BATCH = 2048
TEARDOWN_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs besides data, models and channels (picklable)."""

    rank: int
    world_size: int
    strategy: str
    config: Config
    seed: int
    lr: float
    threads: int
    parent_pid: int
    dist_init: str = ""       # ddp: init_method ("file://..." or "env://")
    device: str = "cpu"
    pause_on_divergence: bool = False  # GUI: pause the run instead of failing it
    # where to continue (resume): epoch in progress (1-based), batches of it already done
    start_epoch: int = 1
    start_batch: int = 0
    start_step: int = 0
    start_samples: int = 0
    optimizer_state: bytes | None = None
    rng_state: bytes | None = None


@dataclass(frozen=True)
class Channels:
    """What connects a worker to its session: the metrics queue and the controls."""

    queue: Any        # multiprocessing Queue of lists of records
    command: Any      # multiprocessing RawValue('i'): RUN / PAUSE / STOP
    run_event: Any    # multiprocessing Event: set = running (paused workers wait on it)


class StopTraining(Exception):
    pass


class Diverged(Exception):
    pass


class RecordSender:
    """Collects records and puts them on the queue in batches."""

    def __init__(self, queue: Any, worker: int) -> None:
        self.queue = queue
        self.worker = worker
        self.buffer: list[dict[str, Any]] = []
        self.last_flush = time.monotonic()

    def add(self, record: dict[str, Any]) -> None:
        self.buffer.append(record)

    def state(self, state: str, detail: str = "") -> None:
        self.add({"kind": "state", "t": time.time(), "worker": self.worker, "state": state, "detail": detail})
        self.flush()

    def log(self, level: str, message: str) -> None:
        self.add({"kind": "log", "t": time.time(), "worker": self.worker, "level": level, "message": message})

    def maybe_flush(self, now: float) -> None:
        if now - self.last_flush >= FLUSH_INTERVAL:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        if self.buffer:
            self.queue.put(self.buffer)
            self.buffer = []
        self.last_flush = time.monotonic() if now is None else now


def make_optimizer(params: Any, cfg: OptimConfig, lr: float) -> torch.optim.Optimizer:
    if cfg.name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    if cfg.name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=cfg.weight_decay)
    return torch.optim.AdamW(params, lr=lr, weight_decay=cfg.weight_decay)


def epoch_indices(n: int, epoch: int, seed: int, rank: int, world: int) -> torch.Tensor:
    """This rank's shard of a seeded permutation, padded so every rank gets as many."""
    gen = torch.Generator().manual_seed(seed * 100003 + epoch)
    perm = torch.randperm(n, generator=gen)
    if world > 1:
        per_rank = -(-n // world)
        pad = per_rank * world - n
        if pad:
            perm = torch.cat([perm, perm[:pad]])
        perm = perm[rank::world]
    return perm


def resolve_device(spec_device: str, rank: int) -> torch.device:
    if spec_device == "cuda":
        return torch.device("cuda", rank % max(1, torch.cuda.device_count()))
    return torch.device(spec_device)


class Trainer:
    """The training loop of one worker."""

    def __init__(self, spec: WorkerSpec, data: PreparedData, shared: list[dict[str, torch.Tensor]],
                 ch: Channels, out: RecordSender) -> None:
        self.spec, self.data, self.ch, self.out = spec, data, ch, out
        cfg = spec.config
        self.device = resolve_device(spec.device, spec.rank)
        self.is_ddp = spec.strategy == "ddp" and spec.world_size > 1  # one rank needs no all-reduce
        self.shared = bind_shared_model(spec, data, shared[spec.rank] if spec.strategy == "sweep" else shared[0])
        if self.device.type == "cpu" and not self.is_ddp:
            self.model = self.shared  # train the shared-memory weights in place
        else:
            self.model = copy.deepcopy(self.shared).to(self.device)
        self.net: nn.Module = self.model
        if self.is_ddp:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.net = DDP(self.model, device_ids=ids)
        self.optimizer = make_optimizer(self.model.parameters(), cfg.optim, spec.lr)
        shard_world = spec.world_size if spec.strategy in ("hogwild", "ddp") else 1
        self.shard_rank = spec.rank if shard_world > 1 else 0
        self.shard_world = shard_world
        self.batches = make_batches(data.train, data.info, cfg.train.batch_size, cfg.data.loader_workers)
        if spec.optimizer_state is not None:
            self.optimizer.load_state_dict(state_from_bytes(spec.optimizer_state))
        if spec.rng_state is not None:
            torch.set_rng_state(state_from_bytes(spec.rng_state))
        self.evaluates = spec.strategy != "hogwild" or spec.rank == 0
        self.epoch = spec.start_epoch
        self.batch = spec.start_batch  # batches done in the epoch in progress
        self.step = spec.start_step
        self.samples = spec.start_samples
        self.epochs_done = spec.start_epoch - 1
        self.last_eval: dict[str, Any] | None = None
        self._loss_acc = 0.0  # losses since the last step record
        self._n_acc = 0
        self._last_record = time.monotonic()
        self._lr = float(self.optimizer.param_groups[0]["lr"])

    # -- control ----------------------------------------------------------------
    def _agree(self, cmd: int) -> int:
        """DDP ranks must pause/stop at the same step: take the max over ranks."""
        if not self.is_ddp:
            return cmd
        import torch.distributed as dist

        flag = torch.tensor([cmd], dtype=torch.int32)
        if dist.get_backend() == "nccl":
            flag = flag.to(self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())

    def _command(self) -> int:
        return int(self.ch.command.value)

    def _handle(self, cmd: int) -> None:
        """Called at a batch boundary with the agreed command; raises StopTraining."""
        while cmd == PAUSE:
            self._emit_step(force=True)
            self.out.state("paused", f"epoch {self.epoch} step {self.step}")
            while self._command() == PAUSE:
                self.ch.run_event.wait(0.1)
            cmd = self._agree(self._command())
            if cmd == RUN:
                self.out.state("running", "resumed")
        if cmd == STOP:
            raise StopTraining

    # -- records ----------------------------------------------------------------
    def _emit_step(self, force: bool = False) -> None:
        if self._n_acc == 0:
            return
        now = time.monotonic()
        if force or now - self._last_record >= RECORD_INTERVAL:
            self.out.add({
                "kind": "step", "t": time.time(), "worker": self.spec.rank, "epoch": self.epoch,
                "step": self.step, "samples": self.samples, "loss": self._loss_acc / self._n_acc,
                "lr": self._lr,
            })
            self._loss_acc = 0.0
            self._n_acc = 0
            self._last_record = now
            self.out.maybe_flush(now)

    # -- loop -------------------------------------------------------------------
    def run(self) -> str:
        cfg = self.spec.config
        self._last_record = time.monotonic()
        self.out.state("running")
        try:
            for epoch in range(self.spec.start_epoch, cfg.train.epochs + 1):
                self.epoch = epoch
                self._train_epoch()
                self.epochs_done = epoch
                self.epoch, self.batch = epoch + 1, 0
                self._sync_back()
                self._evaluate(epoch)
        except StopTraining:
            self._emit_step(force=True)
            self._sync_back()
            return "stopped"
        self._emit_step(force=True)
        return "finished"

    def _train_epoch(self) -> None:
        spec = self.spec
        indices = epoch_indices(len(self.data.train), self.epoch, spec.config.train.seed + (
            spec.rank if spec.strategy == "sweep" else 0), self.shard_rank, self.shard_world)
        if self.batch:  # resuming mid-epoch: the permutation is seeded, skip what was done
            indices = indices[self.batch * spec.config.train.batch_size:]
        net, opt, device = self.net, self.optimizer, self.device
        command = self.ch.command
        net.train()
        on_cpu = device.type == "cpu"
        check_every = DDP_CONTROL_EVERY if self.is_ddp else 1
        for xb, yb in self.batches.epoch(indices):
            if self.step % check_every == 0:
                cmd = self._agree(command.value) if self.is_ddp else command.value
                if cmd:
                    self._handle(cmd)
            if not on_cpu:
                xb = xb.to(device, non_blocking=True)
                yb = yb.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(xb), yb)
            loss.backward()
            value = loss.item()
            if not math.isfinite(value):
                self._diverged(value)  # raises, or returns after a pause: skip this batch
                continue
            opt.step()
            self.batch += 1
            self.step += 1
            self.samples += yb.shape[0]
            self._loss_acc += value
            self._n_acc += 1
            now = time.monotonic()
            if now - self._last_record >= RECORD_INTERVAL:
                self._emit_step()
        self._emit_step(force=True)

    def _diverged(self, value: float) -> None:
        """A non-finite loss: the weights are still finite (no step taken with it)."""
        where = f"worker {self.spec.rank}, epoch {self.epoch}, step {self.step + 1}"
        message = f"loss became {value} at {where} (learning rate {self._lr:g}); lower optim.lr"
        if not self.spec.pause_on_divergence or self.is_ddp:
            raise Diverged(message)
        self.out.log("error", f"{message}; run paused, the step was skipped")
        self.out.add({"kind": "_diverged", "t": time.time(), "worker": self.spec.rank, "message": message})
        self.ch.command.value = PAUSE  # pauses every worker at its next batch
        self.ch.run_event.clear()
        self.out.flush()
        self._handle(PAUSE)

    def _sync_back(self) -> None:
        """Copy trained weights to the shared model the parent reads (ddp, GPU)."""
        if self.model is self.shared:
            return
        if self.is_ddp and self.spec.rank != 0:
            return
        with torch.no_grad():
            for dst, src in zip(self.shared.state_dict().values(), self.model.state_dict().values()):
                dst.copy_(src.detach().to("cpu"))

    @torch.no_grad()
    def _evaluate(self, epoch: int) -> None:
        if not self.evaluates or self.data.info.n_val == 0:
            return
        x, y = full_tensors(self.data.val, self.data.info)
        if self.is_ddp:
            x, y = x[self.spec.rank::self.spec.world_size], y[self.spec.rank::self.spec.world_size]
        model = self.model
        model.eval()
        loss_sum = torch.zeros((), dtype=torch.float64)
        correct = torch.zeros((), dtype=torch.float64)
        for start in range(0, len(y), EVAL_BATCH):
            xb = x[start:start + EVAL_BATCH].to(self.device)
            yb = y[start:start + EVAL_BATCH].to(self.device)
            logits = model(xb)
            loss_sum += F.cross_entropy(logits, yb, reduction="sum").double().cpu()
            correct += (logits.argmax(1) == yb).sum().double().cpu()
        stats = torch.stack([loss_sum, correct, torch.tensor(float(len(y)), dtype=torch.float64)])
        if self.is_ddp:
            import torch.distributed as dist

            if dist.get_backend() == "nccl":
                stats = stats.to(self.device)
            dist.all_reduce(stats)
            stats = stats.cpu()
            if self.spec.rank != 0:
                model.train()
                return
        total = max(1.0, float(stats[2]))
        record = {
            "kind": "eval", "t": time.time(), "worker": self.spec.rank, "epoch": epoch,
            "val_loss": float(stats[0]) / total, "val_accuracy": float(stats[1]) / total,
            "samples": self.samples,
        }
        self.last_eval = record
        self.out.add(record)
        self.out.flush()
        model.train()


def bind_shared_model(spec: WorkerSpec, data: PreparedData, state: dict[str, torch.Tensor]) -> nn.Module:
    """Build the configured model whose parameters *are* the shared-memory tensors."""
    from core.models import build_model

    info = data.info
    model = build_model(spec.config.model, info.input_shape, info.num_classes, info.image_shape)
    model.load_state_dict(state, assign=True)  # assign: use these tensors, do not copy into new ones
    return model


def _init_distributed(spec: WorkerSpec) -> None:
    import torch.distributed as dist

    backend = "nccl" if spec.device.startswith("cuda") else "gloo"
    if spec.dist_init.startswith("env://"):
        dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=120))
    else:
        dist.init_process_group(backend, init_method=spec.dist_init, rank=spec.rank,
                                world_size=spec.world_size, timeout=timedelta(seconds=120))


def _done(spec: WorkerSpec, status: str, trainer: Trainer | None, error: str | None) -> dict[str, Any]:
    """The last record of a worker: how it ended and where to continue from."""
    record: dict[str, Any] = {
        "kind": "_done", "t": time.time(), "worker": spec.rank, "status": status, "error": error,
        "epochs_done": spec.start_epoch - 1, "epoch": spec.start_epoch, "batch": spec.start_batch,
        "steps": spec.start_step, "samples": spec.start_samples, "optimizer": None, "rng": None,
    }
    if trainer is not None:
        record.update(epochs_done=trainer.epochs_done, epoch=trainer.epoch, batch=trainer.batch,
                      steps=trainer.step, samples=trainer.samples,
                      optimizer=state_to_bytes(trainer.optimizer.state_dict()),
                      rng=state_to_bytes(torch.get_rng_state()))
    return record


def run_worker(spec: WorkerSpec, data: PreparedData, shared: list[dict[str, torch.Tensor]], ch: Channels) -> int:
    """The body of a worker; returns the process exit code. Usable in-process (tests, torchrun)."""
    out = RecordSender(ch.queue, spec.rank)
    out.state("starting")
    trainer: Trainer | None = None
    distributed = False
    try:
        torch.manual_seed(spec.seed)
        if spec.strategy == "ddp" and spec.world_size > 1:
            _init_distributed(spec)
            distributed = True
        trainer = Trainer(spec, data, shared, ch, out)
        status = trainer.run()
        out.state(status)
        out.add(_done(spec, status, trainer, None))
        code = 0
    except Exception as exc:  # report everything; the session decides what the run becomes
        if isinstance(exc, Diverged):  # not a bug: the message says it all
            message = f"worker {spec.rank}: {exc}"
            out.log("error", message)
        else:
            message = f"worker {spec.rank}: {type(exc).__name__}: {exc}".splitlines()[0]
            out.log("error", traceback.format_exc())
        out.state("failed", message)
        out.add(_done(spec, "failed", trainer, message))
        code = 1
    # Deliver every record before tearing anything down: a teardown that blocks
    # (gloo joining its threads while holding the GIL) must not hold back the
    # records, and the session bounds how long it waits for the process itself.
    out.flush()
    ch.queue.close()
    ch.queue.join_thread()
    if distributed:
        _teardown_distributed(trainer, failed=code != 0)
    return code


def _teardown_distributed(trainer: Trainer | None, failed: bool) -> None:
    """Leave the process group in step with the peers, in a thread that may not block the exit."""
    import torch.distributed as dist

    def teardown() -> None:
        try:
            if not failed:
                dist.barrier()  # no collective of a peer is still reading from us
            if trainer is not None:
                trainer.net = trainer.model  # drop the DDP reducer while the group is alive
            dist.destroy_process_group()
        except Exception:
            pass

    thread = threading.Thread(target=teardown, name="traindesk-ddp-teardown", daemon=True)
    thread.start()
    thread.join(TEARDOWN_TIMEOUT_S)


def worker_main(spec: WorkerSpec, data: PreparedData, shared: list[dict[str, torch.Tensor]], ch: Channels) -> None:
    """Process entry point: isolate from the terminal, set threads, train, exit."""
    # Ctrl-C in a terminal reaches the whole process group; the session decides how to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from core.launcher import die_with_parent

    die_with_parent(spec.parent_pid)
    torch.set_num_threads(spec.threads)
    code = run_worker(spec, data, shared, ch)
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is delivered: skip interpreter teardown, whose C++ destructors
    # (process groups, thread pools) can block or abort; loader processes die with us.
    os._exit(code)


def default_threads(workers: int, configured: int) -> int:
    if configured > 0:
        return configured
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // workers)

