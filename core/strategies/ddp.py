"""ddp: DistributedDataParallel over torch.distributed (gloo on CPU, nccl on CUDA).

Each rank trains a copy of the model on its shard; gradients are averaged, so
the copies stay equal and rank 0 publishes its weights to the shared copy the
session reads. Ranks must act on the same batch, so they agree on the control
word (pause, checkpoint, stop) with an all-reduce every ``control_every``
batches, and split the validation set and sum its statistics.

The strategy holds no state of the worker: whether ranks step together is
the process group's own world size (:class:`~core.strategies.collectives.ProcessGroup`
when it has more than one rank), and the DDP wrapper is the trainer's.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import TYPE_CHECKING, ClassVar

from core.strategies.base import Strategy
from core.strategies.collectives import Collectives, ProcessGroup, SingleProcess

if TYPE_CHECKING:
    import torch

    from core.worker.spec import WorkerSpec

PROCESS_GROUP_TIMEOUT = timedelta(seconds=120)
TEARDOWN_TIMEOUT_S = 5.0


class DDP(Strategy):
    name = "ddp"
    uses_process_group = True
    pauses_on_divergence = False  # one rank cannot pause alone: its peers would wait in a collective
    divergence_from_gradients = True
    control_every: ClassVar[int] = 8
    advisable = True
    min_workers = 2  # one rank has no one to average with

    def shard(self, rank: int) -> tuple[int, int]:
        return rank, self.num_workers

    # -- inside a worker ------------------------------------------------------------------
    def setup_worker(self, spec: WorkerSpec) -> None:
        if spec.world_size <= 1:
            return  # one rank needs no all-reduce
        import torch.distributed as dist

        if dist.is_initialized():  # torchrun: the command joined the group already
            return
        backend = "nccl" if spec.config.parallel.device.startswith("cuda") else "gloo"
        if spec.dist_init.startswith("env://"):
            dist.init_process_group(backend, init_method="env://", timeout=PROCESS_GROUP_TIMEOUT)
        else:
            dist.init_process_group(
                backend,
                init_method=spec.dist_init,
                rank=spec.rank,
                world_size=spec.world_size,
                timeout=PROCESS_GROUP_TIMEOUT,
            )

    def collectives(self, device: torch.device) -> Collectives:
        """The process group this worker joined; a rank alone (one worker, or none joined) steps by itself."""
        return ProcessGroup(device) if ProcessGroup.joined() else SingleProcess()

    def teardown_worker(self, failed: bool) -> None:
        """Leave the process group in step with the peers, in a thread that may not block the exit."""
        if not ProcessGroup.joined():
            return
        import torch.distributed as dist

        def teardown() -> None:
            try:
                if not failed:
                    dist.barrier()  # no collective of a peer is still reading from us
                dist.destroy_process_group()
            except Exception:
                pass

        thread = threading.Thread(target=teardown, name="traindesk-ddp-teardown", daemon=True)
        thread.start()
        thread.join(TEARDOWN_TIMEOUT_S)
