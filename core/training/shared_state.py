"""A model's weights in one shared-memory block, and how they cross to another process.

A shared tensor crosses to a process as a file descriptor per storage, and the forkserver passes at most a
few hundred descriptors to one process: a pretrained network of 300 tensors would not start. So
:func:`share_flat` moves a model's parameters and buffers into one shared block (the model keeps using
them: hogwild's workers and the session see the same memory), and :class:`SharedState` carries a state dict
as its few storages and where each tensor lies in them, rebuilt as views on the other side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

ALIGN = 64  # bytes: every tensor starts on a cache line


def share_flat(model: nn.Module) -> None:
    """Move ``model``'s parameters and buffers into one shared-memory block per dtype, in place (one per dtype:
    torch.save refuses views of one storage as different types)."""
    tensors: dict[int, torch.Tensor] = {}
    for t in model.state_dict(keep_vars=True).values():  # parameters and buffers themselves; tied ones once
        tensors.setdefault(id(t), t)
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in tensors.values():
        by_dtype.setdefault(t.dtype, []).append(t)
    for dtype, group in by_dtype.items():
        size = torch.empty(0, dtype=dtype).element_size()
        offsets, total = [], 0
        for t in group:
            offsets.append(total)
            total += -(-t.numel() * size // ALIGN) * ALIGN
        block = torch.UntypedStorage(max(total, 1)).share_memory_()
        for offset, t in zip(offsets, group):
            view = torch.empty(0, dtype=dtype).set_(block, offset // size, t.shape, t.new_empty(t.shape).stride())
            view.copy_(t.detach())
            t.data = view


@dataclass(frozen=True)
class SharedState:
    """A state dict as its shared storages and each tensor's place in them (picklable, few descriptors)."""

    storages: tuple[torch.Tensor, ...]  # uint8 tensors over whole storages
    layout: tuple[tuple[str, int, torch.dtype, int, tuple[int, ...], tuple[int, ...]], ...]

    @classmethod
    def of(cls, state: Mapping[str, torch.Tensor]) -> SharedState:
        index: dict[int, int] = {}
        storages: list[torch.Tensor] = []
        layout = []
        for name, t in state.items():
            storage = t.untyped_storage()
            k = index.setdefault(storage.data_ptr(), len(storages))
            if k == len(storages):
                storages.append(torch.empty(0, dtype=torch.uint8).set_(storage))
            layout.append((name, k, t.dtype, int(t.storage_offset()), tuple(t.shape), tuple(t.stride())))
        return cls(tuple(storages), tuple(layout))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The tensors again, as views of the same memory."""
        out = {}
        for name, k, dtype, offset, shape, stride in self.layout:
            storage = self.storages[k].untyped_storage()
            out[name] = torch.empty(0, dtype=dtype).set_(storage, offset, shape, stride)
        return out


Shared = SharedState | Mapping[str, torch.Tensor]  # what a worker is handed: crossed to it, or in its own process


def as_state_dict(shared: Shared) -> dict[str, torch.Tensor]:
    return shared.state_dict() if isinstance(shared, SharedState) else dict(shared)
