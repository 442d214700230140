"""What ranks that train together do together, apart from what a strategy plans.

A :class:`Collectives` is asked by a worker once it has joined whatever group
its strategy uses (:meth:`core.strategies.base.Strategy.collectives`): its
rank and world, four primitives (``all_reduce``, ``all_gather``, ``barrier``,
``wrap_model``) and what the worker builds on them: agreeing on the control
word, gathering records, which rank publishes the weights, the rank's slice
of the validation set and the summed evaluation. :class:`SingleProcess` is a
worker alone (a world of one); :class:`ProcessGroup` is this process's
torch.distributed group (gloo on CPU, nccl on CUDA).

Importing this module loads no torch: the methods import it.
"""

from __future__ import annotations

import abc
import copy
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn


class Collectives(abc.ABC):
    """The ranks stepping together with this worker (one: itself alone)."""

    @property
    @abc.abstractmethod
    def rank(self) -> int:
        """This worker's place among them (0 alone)."""

    @property
    @abc.abstractmethod
    def world(self) -> int:
        """How many step together."""

    @abc.abstractmethod
    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """``tensor`` summed (``op="max"``: the max) over the ranks, on the CPU; ``tensor`` itself is left as it
        was."""

    @abc.abstractmethod
    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's picklable ``obj``, in rank order."""

    @abc.abstractmethod
    def barrier(self) -> None:
        """Return once every rank has reached it."""

    @abc.abstractmethod
    def wrap_model(self, shared: nn.Module, device: torch.device) -> tuple[nn.Module, nn.Module]:
        """(model whose parameters the optimizer steps, module the batch goes through)."""

    # -- built on them ----------------------------------------------------------------------
    def agree(self, command: int) -> int:
        """The command every rank acts on (the max over the ranks: a stop wins over a pause)."""
        if self.world == 1:
            return command
        import torch

        return int(self.all_reduce(torch.tensor([command], dtype=torch.int32), op="max").item())

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order."""
        return [obj] if self.world == 1 else self.all_gather(obj)

    def publishes_weights(self) -> bool:
        """Whether this rank copies its weights to the shared copy (the ranks' copies are equal: rank 0 does)."""
        return self.rank == 0

    def eval_split(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's share of the validation set (every ``world``-th sample from its rank)."""
        if self.world == 1:
            return x, y
        return x[self.rank :: self.world], y[self.rank :: self.world]

    def reduce_eval(self, stats: torch.Tensor) -> bool:
        """Sum (loss sum, correct, count) over the ranks in place; True if this rank reports them."""
        if self.world == 1:
            return True
        stats.copy_(self.all_reduce(stats))
        return self.rank == 0


class SingleProcess(Collectives):
    """A worker that steps alone: every collective is the worker's own value."""

    @property
    def rank(self) -> int:
        return 0

    @property
    def world(self) -> int:
        return 1

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        return tensor.detach().cpu().clone()

    def all_gather(self, obj: Any) -> list[Any]:
        return [obj]

    def barrier(self) -> None:
        pass

    def wrap_model(self, shared: nn.Module, device: torch.device) -> tuple[nn.Module, nn.Module]:
        """On the CPU the worker trains the shared-memory weights in place; on a GPU a copy."""
        if device.type == "cpu":
            return shared, shared
        model = copy.deepcopy(shared).to(device)
        return model, model


class ProcessGroup(Collectives):
    """This process's torch.distributed group, which it has joined; tensors travel on ``device`` under nccl."""

    def __init__(self, device: torch.device) -> None:
        import torch.distributed as dist

        self.device = device
        self._dist = dist
        self._rank = dist.get_rank()
        self._world = dist.get_world_size()

    @staticmethod
    def joined() -> bool:
        """Whether this process is in a torch.distributed group of more than one rank."""
        import torch.distributed as dist

        return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world(self) -> int:
        return self._world

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        dist = self._dist
        on_device = tensor.to(self.device, copy=True) if dist.get_backend() == "nccl" else tensor.clone()
        dist.all_reduce(on_device, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return on_device.cpu()

    def all_gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self._world
        self._dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        self._dist.barrier()

    def wrap_model(self, shared: nn.Module, device: torch.device) -> tuple[nn.Module, nn.Module]:
        """A copy on ``device``, its gradients averaged over the ranks by DistributedDataParallel."""
        from torch.nn.parallel import DistributedDataParallel

        model = copy.deepcopy(shared).to(device)
        ids = [device.index] if device.type == "cuda" else None
        return model, DistributedDataParallel(model, device_ids=ids)
