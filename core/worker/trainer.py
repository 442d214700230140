"""A worker's training loop: the spec it gets, the Trainer, the training step.

A worker gets a picklable :class:`WorkerSpec` and ``shared``, state dicts of
shared-memory tensors, not modules: each
worker builds its model from the config (a custom model's class need not be
importable by name) and binds it to those tensors. The training step is as
plain as pytorch/examples' mnist_hogwild; the strategy object
(:mod:`core.strategies`) plans the worker's part of the run and names the
ranks it steps with, a :class:`~core.strategies.collectives.Collectives` that
wraps the model, agrees on the control word and splits and sums the evaluation.

The worker reads the control word (:mod:`core.worker.channels`) at batch
boundaries. On a checkpoint request every worker publishes its weights,
sends its optimizer, RNG and precision states and its :class:`~core.worker.position.Position`,
and waits until the session has copied the weights: a checkpoint holds one
consistent point of the run. How a step computes (autocast, gradient
scaling) is a :mod:`core.training.precision` object. The process around the loop
(its entry point, its last record, teardown) is :mod:`core.worker.process`.
"""

from __future__ import annotations

import copy
import math
import time
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from core.config import FIELDS, LIVE_KEYS
from core.data import PreparedData, full_tensors, make_batches
from core.host.devices import worker_device
from core.host.machine import usable_cores
from core.metric_names import selection_metric
from core.runfiles.records import (
    best_record,
    diverged_record,
    eval_record,
    recovery_record,
    snapshot_record,
    step_record,
)
from core.training.augment import make_augment
from core.training.checkpoint import state_from_bytes, state_to_bytes
from core.training.losses import eval_metrics, eval_stats, make_loss
from core.training.optimizers import make_optimizer, set_lr
from core.training.precision import precision_for
from core.training.schedule import Plateau, improved, lr_at, scheduled
from core.training.shared_state import Shared, as_state_dict
from core.worker.channels import (
    CHECKPOINT,
    PAUSE,
    RECORD_INTERVAL,
    RUN,
    SETTINGS,
    STOP,
    Channels,
    EpochRestart,
    RecordSender,
)
from core.worker.head_fit import HeadFitting
from core.worker.position import Position
from core.worker.recovery import LR_DIVISOR, Recovery
from core.worker.spec import WorkerSpec

if TYPE_CHECKING:
    from core.strategies.base import Strategy

EVAL_BATCH = 2048
EXCHANGE_EVERY = 32  # torchrun: steps between collections of every rank's records (a multiple of 8)


class StopTraining(Exception):
    pass


class Diverged(Exception):
    pass


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


class Trainer(HeadFitting):
    """The training loop of one worker."""

    # a live key's declared effect -> the method that applies it; the batches restart last
    LIVE_HANDLERS: ClassVar[dict[str, str]] = {
        "optimizer": "_retune_optimizer",
        "loop": "_read_by_loop",
        "batches": "_rebatch",
    }

    def __init__(
        self,
        spec: WorkerSpec,
        data: PreparedData,
        shared: list[Shared],
        ch: Channels,
        out: RecordSender,
        strategy: Strategy,
    ) -> None:
        self.spec, self.data, self.ch, self.out = spec, data, ch, out
        self.config = cfg = spec.config  # changes while paused replace it
        self._settings_version = ch.settings.version.value
        self.strategy = strategy
        rank = spec.rank
        self.device = worker_device(cfg.parallel.device, spec.local_rank)
        self.shared = bind_shared_model(spec, data, shared[strategy.model_index(rank)])
        self.collectives = strategy.collectives(self.device)  # the ranks this worker steps with
        self.model, self.net = self.collectives.wrap_model(self.shared, self.device)
        self.optimizer = make_optimizer(self.model, cfg.optim, strategy.worker_lr(rank))
        self.shard_rank, self.shard_world = strategy.shard(rank)
        self.batches = make_batches(
            data.train,
            data.info,
            cfg.train.batch_size,
            cfg.data.loader_workers,
            make_augment(cfg.augment, data.info.image_shape),
        )
        if spec.optimizer_state is not None:
            self.optimizer.load_state_dict(state_from_bytes(spec.optimizer_state))
            set_lr(self.optimizer, strategy.worker_lr(rank))  # the config's (a fork may have changed them)
            for group in self.optimizer.param_groups:
                group["weight_decay"] = cfg.optim.weight_decay
        if spec.rng_state is not None:
            torch.set_rng_state(state_from_bytes(spec.rng_state))
        start = spec.start
        self.epoch = start.epoch
        self.batch = start.batch  # batches done in the epoch in progress
        # samples of this worker's shard of the epoch in progress done (batch sizes may change)
        self.offset = start.offset if start.offset >= 0 else start.batch * cfg.train.batch_size
        self.step = start.step
        self.samples = start.samples
        self.epochs_done = start.epoch - 1
        self._loss_acc = 0.0  # losses since the last step record
        self._n_acc = 0
        self._last_record = time.monotonic()
        self._lr_factor = start.lr_factor  # what recoveries from a diverged loss left of this worker's rate
        self._base_lr = strategy.worker_lr(rank) * self._lr_factor  # the schedule's base; a live change replaces it
        if self._lr_factor != 1.0:
            set_lr(self.optimizer, self._base_lr)
        self._lr = float(self.optimizer.param_groups[0]["lr"])
        self._scheduled = scheduled(cfg.schedule)
        self.monitor = selection_metric(cfg, data.info.task, data.info.imbalanced)  # what "best" means here
        y_train = data.train.y if hasattr(data.train, "y") else torch.tensor(data.train.labels)
        self.loss_fn = make_loss(cfg, data.info, y_train).to(self.device)
        self._plateau = Plateau(cfg.schedule, self.monitor, start.lr_scale) if cfg.schedule.kind == "plateau" else None
        self._samples_per_epoch = max(1, strategy.samples_per_epoch(len(data.train)))
        self.precision = precision_for(cfg.parallel.precision, self.device)
        if spec.precision_state is not None:
            self.precision.load_state_dict(state_from_bytes(spec.precision_state))
        self._best: float | None = None  # this worker's best monitored value (best.pt)
        self.keeps_best = strategy.keeps_best
        self.record_extra: dict[str, Any] = {}  # added to this worker's step and eval records
        self.on_eval: Any = None  # called with each eval record this worker reports
        self._gathers = spec.gather_records and spec.world_size > 1
        self._recovery = (
            Recovery(self.model, self.step)
            if strategy.recovers_from_divergence and cfg.train.on_divergence != "fail"
            else None
        )
        self._grads_decide = strategy.divergence_from_gradients and not self.precision.skips_overflowing_steps

    # -- control ----------------------------------------------------------------
    def _word(self) -> int:
        return int(self.ch.command.value)

    def _control_word(self) -> int:
        """The control word, plus SETTINGS while the settings box holds a change this worker has not taken.

        A pause may end before a busy worker reaches a batch boundary: the change still reaches it there.
        """
        word = int(self.ch.command.value)  # first: a word written after the box comes with the box's change
        return word | SETTINGS if self._change_pending() else word

    def _change_pending(self) -> bool:
        return self.ch.settings.version.value != self._settings_version

    def _wait_while(self, command: int) -> None:
        while self._word() == command:
            self.ch.run_event.wait(0.1)

    def _control(self, word: int) -> None:
        """Act on the agreed word at a batch boundary; returns to train, or raises StopTraining."""
        paused = False
        cmd = word & ~SETTINGS
        while cmd != RUN:
            if cmd == STOP:
                raise StopTraining
            if cmd == CHECKPOINT:
                self._send_snapshot()
                self.exchange_records()
                self._wait_while(CHECKPOINT)
            elif cmd == PAUSE:
                if not paused:
                    paused = True
                    self._emit_step(force=True)
                    self.out.state("paused", f"epoch {self.epoch} step {self.step}")
                    self.exchange_records()
                self._wait_while(PAUSE)
            word = self.collectives.agree(self._control_word())
            cmd = word & ~SETTINGS
        if paused:
            self.out.state("running", "resumed")
        if paused or word & SETTINGS:
            self._apply_settings()

    def _apply_settings(self) -> None:
        """Take the config changes the session made while paused (every rank at the same batch).

        Each changed key's declared effect (``core.config.LIVE_EFFECTS``) runs once, through
        :attr:`LIVE_HANDLERS`.
        """
        box = self.ch.settings
        if box.version.value == self._settings_version:
            return
        self._settings_version = box.version.value
        old, self.config = self.config, self.config.with_changes(box.read())
        was = self.strategy.worker_lr(self.spec.rank)
        self.strategy = self.strategy.with_config(self.config)  # live keys change no part of the run's shape
        if self.strategy.worker_lr(self.spec.rank) != was:
            self._lr_factor = 1.0  # a rate the user chose replaces what recoveries left
        effects = {FIELDS[k].effect for k in LIVE_KEYS if old.value(k) != self.config.value(k)}
        for effect in sorted(effects, key=list(self.LIVE_HANDLERS).index):  # the batches restart last
            getattr(self, self.LIVE_HANDLERS[effect])()

    def _retune_optimizer(self) -> None:
        lr = self._base_lr = self.strategy.worker_lr(self.spec.rank) * self._lr_factor  # a schedule goes on
        set_lr(self.optimizer, lr)
        for group in self.optimizer.param_groups:
            group["weight_decay"] = self.config.optim.weight_decay
        self._lr = lr

    def _read_by_loop(self) -> None:
        """Nothing to do now: the loop reads the key (the epoch count) at each epoch's end."""

    def _rebatch(self) -> None:
        self.batches = make_batches(
            self.data.train,
            self.data.info,
            self.config.train.batch_size,
            self.config.data.loader_workers,
            make_augment(self.config.augment, self.data.info.image_shape),
        )
        raise EpochRestart  # the epoch goes on from its offset with the new batch size

    def exchange_records(self) -> None:
        """torchrun: every rank hands what it said since the last exchange to rank 0 (a collective).

        Called where all ranks are at the same point (agreement, pause, checkpoint, the end), so
        nodes need no shared filesystem for metrics.
        """
        if not self._gathers:
            return
        mine: list[dict[str, Any]] = []
        if self.spec.rank != 0:
            self.out.flush()
            mine = self.ch.queue.take()
        # rank 0's own records follow at its next flush: a peer's last records come before rank 0's end
        gathered = self.collectives.gather(mine)
        if self.spec.rank == 0:
            for records in gathered[1:]:
                if records:
                    self.ch.queue.put(records)

    def position(self) -> Position:
        return Position(
            self.epoch,
            self.batch,
            self.step,
            self.samples,
            self.offset,
            self._plateau.scale if self._plateau else 1.0,
            self._lr_factor,
        )

    def _schedule_lr(self, batch_len: int) -> None:
        """Set the lr of the step about to be taken from the run's position."""
        epochs = self.config.train.schedule_epochs or self.config.train.epochs
        progress = (self.epoch - 1 + (self.offset + batch_len) / self._samples_per_epoch) / epochs
        scale = self._plateau.scale if self._plateau else 1.0
        lr = lr_at(self.config.schedule, self._base_lr, self.step, self.epoch, progress, scale)
        if lr != self._lr:
            set_lr(self.optimizer, lr)
            self._lr = lr

    def _send_snapshot(self) -> None:
        """This worker's part of a consistent checkpoint; the session copies the weights meanwhile."""
        self.publish_weights()
        self._emit_step(force=True)
        # under torchrun only rank 0 has the session's request id: ranks agree on it (the max)
        request = self.collectives.agree(int(self.ch.request.value))
        self.out.add(
            snapshot_record(
                self.spec.rank,
                request,
                self.position().as_dict(),
                state_to_bytes(self.optimizer.state_dict()),
                state_to_bytes(torch.get_rng_state()),
                state_to_bytes(self.precision.state_dict()),
            )
        )
        self.out.flush()

    # -- records ----------------------------------------------------------------
    def _emit_step(self, force: bool = False, final: bool = False) -> None:
        """A step record of the batches since the last one.

        While a change waits for this worker's next batch none goes out (unless it is the last): its
        batches go into the first record after the change, so no record later than the session's
        ``config`` record carries the settings it replaced.
        """
        if self._n_acc == 0:
            return
        now = time.monotonic()
        if force or now - self._last_record >= RECORD_INTERVAL:
            t = time.time()  # before the look at the box: a record made after the change knows of it
            if not final and self._change_pending():
                return
            self.out.add(
                step_record(
                    self.spec.rank,
                    self.epoch,
                    self.step,
                    self.samples,
                    self._loss_acc / self._n_acc,
                    self._lr,
                    t=t,
                    **self.record_extra,
                )
            )
            self._loss_acc = 0.0
            self._n_acc = 0
            self._last_record = now
            self.out.maybe_flush(now)

    # -- loop -------------------------------------------------------------------
    def run(self) -> str:
        self._last_record = time.monotonic()
        self.out.state("running")
        try:
            if self.fits_head():
                self._fit_head()
            while self.epoch <= self.config.train.epochs:  # epochs may change while paused
                try:
                    self._train_epoch()
                except EpochRestart:
                    continue
                epoch = self.epoch
                self.epochs_done = epoch
                self.epoch, self.batch, self.offset = epoch + 1, 0, 0
                self.publish_weights()
                self._evaluate(epoch)
        except StopTraining:
            self._emit_step(force=True, final=True)
            self.publish_weights()
            return "stopped"
        self._emit_step(force=True, final=True)
        return "finished"

    def _train_epoch(self) -> None:
        spec, strategy = self.spec, self.strategy
        indices = epoch_indices(
            len(self.data.train), self.epoch, strategy.permutation_seed(spec.rank), self.shard_rank, self.shard_world
        )
        if self.offset:  # resuming mid-epoch: the permutation is seeded, skip what was done
            indices = indices[self.offset :]
        net, opt, device, precision = self.net, self.optimizer, self.device, self.precision
        net.train()
        on_cpu = device.type == "cpu"
        every = strategy.control_every
        for xb, yb in self.batches.epoch(indices):
            if self.step % every == 0:
                if self.step % EXCHANGE_EVERY == 0:
                    self.exchange_records()
                word = self._control_word()
                if every > 1:
                    word = self.collectives.agree(word)
                if word:
                    self._control(word)
            if not on_cpu:
                xb = xb.to(device, non_blocking=True)
                yb = yb.to(device, non_blocking=True)
            if self._scheduled:
                self._schedule_lr(yb.shape[0])
            opt.zero_grad(set_to_none=True)
            with precision.autocast():
                loss = self.loss_fn(net(xb), yb)
            precision.backward(loss)
            value = loss.item()
            if not (self._gradients_finite() if self._grads_decide else math.isfinite(value)):
                self._diverged(value)  # raises, or returns once the worker is back on healthy weights
                continue
            precision.step(opt)
            self.batch += 1
            self.step += 1
            self.offset += yb.shape[0]
            self.samples += yb.shape[0]
            self._loss_acc += value
            self._n_acc += 1
            if self._recovery is not None:
                self._recovery.observe(value, self.step)
            now = time.monotonic()
            if now - self._last_record >= RECORD_INTERVAL:
                self._emit_step()
        self._emit_step(force=True)

    def _gradients_finite(self) -> bool:
        """Whether every gradient is finite (ranks that average gradients see the same answer)."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        return not grads or bool(torch.isfinite(torch.nn.utils.get_total_norm(grads)))

    def _rate_key(self) -> str:
        """The setting that holds this worker's learning rate."""
        rates = self.config.parallel.sweep_lr
        return f"parallel.sweep_lr[{self.spec.rank}]" if self.strategy.model_per_worker and rates else "optim.lr"

    def _diverged(self, value: float) -> None:
        """A non-finite loss (no step was taken with it): roll back, lower this worker's rate and go on
        (``train.on_divergence = "recover"``), then pause when asked to; fail when told to or out of tries."""
        where = f"worker {self.spec.rank}, epoch {self.epoch}, step {self.step + 1}"
        rec = self._recovery
        lowered = f", lowered {rec.recoveries} time(s) after earlier divergences" if rec and rec.recoveries else ""
        message = f"loss became {value} at {where} (learning rate {self._lr:g}{lowered}); lower {self._rate_key()}"
        if rec is None or rec.exhausted:
            raise Diverged(message)
        back_to = rec.restore(self.optimizer)
        old_lr = self._lr
        self._lr_factor /= LR_DIVISOR
        self._base_lr /= LR_DIVISOR
        self._lr = self._lr / LR_DIVISOR
        set_lr(self.optimizer, self._lr)
        self._emit_step(force=True)
        self.out.add(recovery_record(self.spec.rank, self.epoch, self.step, old_lr, self._lr, value, back_to))
        what = (
            f"loss became {value} at epoch {self.epoch}, step {self.step + 1} (learning rate {old_lr:g}): "
            f"weights rolled back to step {back_to}, this worker's learning rate lowered to {self._lr:g}"
        )
        pause = self.config.train.on_divergence == "pause" and self.strategy.pauses_on_divergence
        if not pause:
            self.out.log("warning", f"{what}; training goes on")
            self.out.flush()
            return
        self.out.log(
            "error",
            f"{message}; weights rolled back to step {back_to}, this worker's learning rate "
            f'lowered to {self._lr:g}; run paused (train.on_divergence = "pause"): Resume goes on '
            "at the lowered rate" + (", or change optim.lr first" if self._rate_key() == "optim.lr" else ""),
        )
        self.out.add(diverged_record(self.spec.rank, message))
        self.ch.command.value = PAUSE  # every worker pauses at its next batch; the session follows the record
        self.ch.run_event.clear()
        self.out.flush()
        self._control(PAUSE)

    def publish_weights(self) -> None:
        """Copy the trained weights to the shared model the session reads (when training a copy)."""
        if self.model is self.shared or not self.collectives.publishes_weights():
            return
        with torch.no_grad():
            for dst, src in zip(self.shared.state_dict().values(), self.model.state_dict().values()):
                dst.copy_(src.detach().to("cpu"))

    @torch.no_grad()
    def _evaluate(self, epoch: int) -> None:
        rank = self.spec.rank
        reporter = self.strategy.evaluates(rank)
        if not (reporter or self._plateau) or self.data.info.n_val == 0:
            return  # a plateau schedule needs the metric on every worker, reported or not
        x, y = self.collectives.eval_split(*full_tensors(self.data.val, self.data.info))
        model = self._frozen()
        model.eval()
        info = self.data.info
        stats: torch.Tensor | None = None
        for start in range(0, len(y), EVAL_BATCH):
            xb = x[start : start + EVAL_BATCH].to(self.device)
            yb = y[start : start + EVAL_BATCH].to(self.device)
            part = eval_stats(model(xb), yb, self.loss_fn, info.num_classes, info.target_scale)
            stats = part if stats is None else stats + part
        if stats is None:  # this rank's share is empty: zeros of the right size
            stats = eval_stats(torch.zeros(0, info.num_classes), y[:0], self.loss_fn, info.num_classes)
        reports = self.collectives.reduce_eval(stats) and reporter
        model.train()
        record = eval_record(
            rank, epoch, eval_metrics(stats, info.task, info.num_classes), self.samples, **self.record_extra
        )
        if self._plateau is not None and self._plateau.observe(record):
            self.out.log(
                "info",
                f"{self.monitor} has not improved for "
                f"{self.config.schedule.patience + 1} evaluation(s): lr factor now "
                f"{self._plateau.scale:g}",
            )
        if not reports:
            return
        self.out.add(record)
        self._send_best(record, model)
        self.out.flush()
        if self.on_eval is not None:
            self.on_eval(record)

    def _frozen(self) -> nn.Module:
        """The model to evaluate: a copy when other workers go on training these very weights (hogwild), so
        the figures and the weights a new best sends are of one moment."""
        if self.model is self.shared and self.strategy.num_workers > self.strategy.num_models:
            return copy.deepcopy(self.model)
        return self.model

    def _send_best(self, record: dict[str, Any], model: nn.Module) -> None:
        """The weights of an evaluation that beat this worker's best: the session keeps the run's best."""
        monitor = self.monitor
        if not self.keeps_best or not improved(
            record[monitor], self._best, monitor, self.config.train.early_stop_min_delta
        ):
            return
        self._best = record[monitor]
        weights = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
        self.out.add(best_record(self.spec.rank, record["epoch"], self.step, self._best, state_to_bytes(weights)))


def bind_shared_model(spec: WorkerSpec, data: PreparedData, state: Shared) -> nn.Module:
    """Build the configured model whose parameters *are* the shared-memory tensors."""
    from core.training.models import build_model_for

    info = data.info
    model = build_model_for(spec.config.model, info)
    model.load_state_dict(as_state_dict(state), assign=True)  # assign: use these tensors, do not copy them
    return model


def default_threads(workers: int, configured: int) -> int:
    if configured > 0:
        return configured
    return max(1, usable_cores() // workers)
