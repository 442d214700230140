"""ddp: DistributedDataParallel over torch.distributed (gloo on CPU, nccl on CUDA).

Each rank trains a copy of the model on its shard; gradients are averaged, so
the copies stay equal and rank 0 publishes its weights to the shared copy the
session reads. Ranks must act on the same batch, so they agree on the control
word (pause, checkpoint, stop) with an all-reduce every ``control_every``
batches, and split the validation set and sum its statistics.

The strategy holds no state of the worker: whether ranks step together is
the process group's own world size, and the DDP wrapper is the trainer's.
"""

from __future__ import annotations

import copy
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from core.strategies.base import Strategy

if TYPE_CHECKING:
    import torch
    from torch import nn

    from core.worker.trainer import WorkerSpec

PROCESS_GROUP_TIMEOUT = timedelta(seconds=120)
TEARDOWN_TIMEOUT_S = 5.0


class DDP(Strategy):
    name = "ddp"
    description = "DistributedDataParallel: gradients averaged over ranks (gloo on CPU, nccl on GPUs)."
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

    @property
    def _world(self) -> int:
        """Ranks stepping together: the process group's size (1 when this worker joined none)."""
        import torch.distributed as dist

        return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1

    @property
    def _distributed(self) -> bool:
        return self._world > 1

    def wrap_model(self, shared: nn.Module, device: torch.device) -> tuple[nn.Module, nn.Module]:
        if not self._distributed:
            return super().wrap_model(shared, device)
        from torch.nn.parallel import DistributedDataParallel

        model = copy.deepcopy(shared).to(device)
        ids = [device.index] if device.type == "cuda" else None
        return model, DistributedDataParallel(model, device_ids=ids)

    def _all_reduce(self, tensor: torch.Tensor, device: torch.device, op: str = "sum") -> torch.Tensor:
        import torch.distributed as dist

        on_device = tensor.to(device) if dist.get_backend() == "nccl" else tensor
        dist.all_reduce(on_device, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return on_device.cpu()

    def agree(self, command: int, device: torch.device) -> int:
        if not self._distributed:
            return command
        import torch

        flag = self._all_reduce(torch.tensor([command], dtype=torch.int32), device, op="max")
        return int(flag.item())

    def publishes_weights(self, rank: int) -> bool:
        return rank == 0  # the copies are equal

    def eval_split(self, x: torch.Tensor, y: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not self._distributed:
            return x, y
        return x[rank :: self._world], y[rank :: self._world]

    def reduce_eval(self, stats: torch.Tensor, rank: int, device: torch.device) -> bool:
        if not self._distributed:
            return True
        stats.copy_(self._all_reduce(stats, device))
        return rank == 0

    def gather(self, obj: Any) -> list[Any]:
        if not self._distributed:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self._world
        dist.all_gather_object(out, obj)
        return out

    def teardown_worker(self, failed: bool) -> None:
        """Leave the process group in step with the peers, in a thread that may not block the exit."""
        if not self._distributed:
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
