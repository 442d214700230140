"""What every strategy decides, with the defaults most strategies share.

A strategy is a small picklable value: the config and the data's task, never
changed (``with_config`` and ``with_task`` give a new one) and holding no state
of a run; what a method needs of the run (its directory) is passed to it.
Its class says the rules that need no config (how the advisor probes it, the
worker loop it runs) and takes from its line of
:data:`~core.config.strategy_rules.STRATEGY_RULES` those the config checks
(the worker count it always has, the keys only it reads, whether each worker
trains a model of its own).
The session asks it about the run's shape (workers, models, shards, learning
rates, which model is the result); each worker asks it which ranks it steps
with (``collectives``: a :class:`~core.strategies.collectives.Collectives`,
which wraps the model, agrees on pause/stop/checkpoint, says which rank
publishes the trained weights to the shared copy the session reads, and splits
and sums the evaluation), and runs its ``loop``, a
:class:`~core.worker.loop.WorkerLoop` (the Trainer, or the search's trials).
Callers never test a strategy's name.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from core.config.strategy_rules import STRATEGY_RULES
from core.errors import ConfigError
from core.runfiles.records import EVAL
from core.worker.trainer import Trainer

if TYPE_CHECKING:
    from pathlib import Path

    import torch

    from core.config import Config
    from core.strategies.collectives import Collectives
    from core.worker.loop import WorkerLoopClass
    from core.worker.spec import WorkerSpec


@dataclasses.dataclass(frozen=True)
class Strategy(abc.ABC):
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""  # one line, for the window's tooltip and docs (its STRATEGY_RULES line's)
    runs_on_gpu: ClassVar[bool] = True
    uses_process_group: ClassVar[bool] = False  # the launcher provides a rendezvous (file:// or env://)
    pauses_on_divergence: ClassVar[bool] = True  # one worker may pause the run on a non-finite loss
    recovers_from_divergence: ClassVar[bool] = True  # a diverged worker rolls back and lowers its own rate
    # ranks share their gradients: a non-finite gradient (the same on every rank) decides a divergence, so
    # every rank recovers at the same step; a rank's own loss alone would split them
    divergence_from_gradients: ClassVar[bool] = False
    keeps_best: ClassVar[bool] = True  # reporting workers send the weights of each new best evaluation
    loop: ClassVar[WorkerLoopClass] = Trainer  # what each worker runs (search: its trials)
    # the rules the config checks, from the strategy's line of STRATEGY_RULES (see __init_subclass__)
    fixed_workers: ClassVar[int] = 0  # the worker count it always has (0: parallel.workers)
    own_keys: ClassVar[tuple[str, ...]] = ()  # config keys that only this strategy reads
    model_per_worker: ClassVar[bool] = False  # each worker trains a model of its own (a sweep)
    advisable: ClassVar[bool] = False  # the advisor may probe it (it trains the run's one model faster or not)
    min_workers: ClassVar[int] = 1  # the fewest workers that make it what it is (the advisor's probes)
    # a head on cached features (model.head_fit = "lbfgs") is fitted by rank 0 alone, the other ranks idle; a
    # sweep or a search compares optimizer settings, and DDP's ranks must step together: they train it by batches
    fits_head: ClassVar[bool] = False

    config: Config
    task: str = "classification"  # the data's task, known once the data is loaded
    skewed: bool = False  # its classes are imbalanced (the selection metric is then balanced accuracy)

    # -- rules of the class (no config needed) -------------------------------------------
    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A strategy the config names takes the rules the config checks from its line of the table."""
        super().__init_subclass__(**kwargs)
        rules = STRATEGY_RULES.get(cls.name)
        if rules is not None:
            cls.description, cls.fixed_workers, cls.own_keys = rules.description, rules.fixed_workers, rules.own_keys
            cls.model_per_worker = rules.model_per_worker

    @classmethod
    def probe_counts(cls, max_workers: int) -> tuple[int, ...]:
        """The worker counts the advisor probes, up to ``max_workers``."""
        if cls.fixed_workers:
            return (cls.fixed_workers,)
        return tuple(range(cls.min_workers, max_workers + 1))

    # -- a new value ----------------------------------------------------------------------
    def with_config(self, config: Config) -> Strategy:
        """The same strategy over another config (a paused run's live changes)."""
        return dataclasses.replace(self, config=config)

    def with_task(self, task: str, skewed: bool = False) -> Strategy:
        """The same strategy once the data's task (and whether its classes are skewed) is known."""
        return dataclasses.replace(self, task=task, skewed=skewed)

    # -- the run's shape (session side) ------------------------------------------------
    @property
    def num_workers(self) -> int:
        return self.fixed_workers or self.config.parallel.workers

    @property
    def num_models(self) -> int:
        """Models in shared memory: one, or one per worker (sweep)."""
        return self.num_workers if self.model_per_worker else 1

    def model_index(self, rank: int) -> int:
        return 0

    def shard(self, rank: int) -> tuple[int, int]:
        """(shard rank, shard count) of the training set this worker trains on."""
        return 0, 1

    def samples_per_epoch(self, n_train: int) -> int:
        """Training samples one worker sees per epoch (its shard, padded)."""
        _, world = self.shard(0)
        return -(-n_train // world)

    def batches_per_epoch(self, n_train: int) -> int:
        return max(1, math.ceil(self.samples_per_epoch(n_train) / self.config.train.batch_size))

    def worker_lr(self, rank: int) -> float:
        return self.config.optim.lr

    def worker_seed(self, rank: int) -> int:
        """Seeds the worker's torch RNG (dropout, init of what it builds)."""
        return self.config.train.seed + rank

    def permutation_seed(self, rank: int) -> int:
        """Seeds the epoch permutations; workers of one shared run must agree on it."""
        return self.config.train.seed

    def worker_label(self, rank: int) -> str:
        return f"worker {rank}"

    def trial_budget(self) -> int | None:
        """Trials this run trains, each a model of its own (a search); None when the workers train the
        run's model(s) for its epochs."""
        return None

    def validate(self) -> None:
        """Refuse a config this strategy cannot run (ConfigError, one line)."""
        from core.host.devices import validate_device

        device = self.config.parallel.device
        validate_device(device)
        if device != "cpu" and not self.runs_on_gpu:
            raise ConfigError(
                f'config: parallel.strategy "{self.name}" runs on the CPU; use ddp, sweep or single with {device}'
            )

    def result_worker(self, last_eval: dict[int, dict[str, Any]]) -> int:
        """The worker whose model is the run's result (``last_eval``: each worker's last eval record)."""
        return 0

    def result_worker_of(self, records: Iterable[dict[str, Any]]) -> int:
        """The result worker of a run from its records (a past run's metrics.jsonl)."""
        last_eval = {r["worker"]: r for r in records if r.get("kind") == EVAL and isinstance(r.get("worker"), int)}
        return self.result_worker(last_eval)

    def summary_extra(
        self, last_eval: dict[int, dict[str, Any]], run_dir: Path | None, result: int | None = None
    ) -> dict[str, Any]:
        """Strategy-specific keys of summary.json (``run_dir``: the run's directory, where it has one; ``result``:
        the worker whose model the run hands on, when its best checkpoint says)."""
        return {}

    def prepare_run(self, run_dir: Path, resuming: bool) -> None:  # noqa: B027 - a hook most strategies leave empty
        """Once the run directory exists, before the workers start (search: open the study)."""

    def result_checkpoint(self, run_dir: Path) -> Path | None:
        """A checkpoint holding the run's result when it is not the shared model (search: the best trial)."""
        return None

    # -- inside a worker ------------------------------------------------------------------
    control_every: ClassVar[int] = 1  # batches between reads of the control word

    def setup_worker(self, spec: WorkerSpec) -> None:  # noqa: B027 - a hook most strategies leave empty
        """Before the model is built (e.g. join the process group)."""

    def evaluates(self, rank: int) -> bool:
        return True

    @abc.abstractmethod
    def collectives(self, device: torch.device) -> Collectives:
        """What this worker does with the ranks it steps with, once ``setup_worker`` has run: a
        :class:`~core.strategies.collectives.SingleProcess` when it steps alone."""

    def teardown_worker(self, failed: bool) -> None:  # noqa: B027 - a hook most strategies leave empty
        """After the last record is delivered (e.g. leave the process group)."""
