"""Training batches: from tensors in memory by index, or image files decoded by DataLoader processes."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from core.data.images import ImagePrep, decode_image
from core.data.info import DatasetInfo, FeatureSplit, ImageSplit, Split, TensorSplit
from core.errors import DataError
from core.host.lifeline import loader_worker_init


class ImageDataset(torch.utils.data.Dataset):
    """Decodes image files on demand (``info.prep``, as every face does), augments, standardises per channel."""

    def __init__(self, split: ImageSplit, info: DatasetInfo, augment: Any = None) -> None:
        self.augment = augment  # training only: runs here, in the DataLoader processes, on pixels in [0, 1]
        self.paths = split.paths
        self.labels = split.labels
        self.prep = info.prep or ImagePrep.of(info.input_shape)
        self.mean = torch.tensor(info.mean, dtype=torch.float32).reshape(-1, 1, 1)
        self.std = torch.tensor(info.std, dtype=torch.float32).reshape(-1, 1, 1)
        self.defer_errors = False  # in DataLoader processes: a bad file travels as a BadImage, named

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int] | BadImage:
        try:
            return self.sample(i)
        except DataError as exc:
            if self.defer_errors:
                return BadImage(str(exc))
            raise

    def sample(self, i: int) -> tuple[torch.Tensor, int]:
        x = torch.from_numpy(decode_image(self.paths[i], self.prep))
        if self.augment is not None:
            x = self.augment(x)
        return (x - self.mean) / self.std, self.labels[i]


@dataclass(frozen=True)
class BadImage:
    """A file a DataLoader process could not decode: its one line (an exception raised there reaches the
    training loop as "Caught DataError in DataLoader worker process 0", without the file's name)."""

    message: str


def _collate(items: list[Any]) -> Any:
    bad = next((it for it in items if isinstance(it, BadImage)), None)
    return bad if bad is not None else torch.utils.data.default_collate(items)


class TensorBatches:
    """Mini-batches from in-memory tensors by index: no per-sample Python work."""

    def __init__(
        self, split: TensorSplit, batch_size: int, augment: Any = None, image_shape: tuple[int, ...] | None = None
    ) -> None:
        self.x, self.y, self.batch_size = split.x, split.y, batch_size
        self.augment, self.image_shape = augment, image_shape  # images held as rows (digits)

    def epoch(self, indices: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        bs = self.batch_size
        for start in range(0, len(indices), bs):
            idx = indices[start : start + bs]
            xb = self.x.index_select(0, idx)
            if self.augment is not None and self.image_shape is not None:
                xb = self.augment.standardized(xb.view(-1, *self.image_shape)).reshape(xb.shape)
            yield xb, self.y.index_select(0, idx)


class _EpochSampler(torch.utils.data.Sampler[int]):
    """The indices of the current epoch; set by the training loop before each epoch."""

    def __init__(self) -> None:
        self.indices: list[int] = []

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class ImageBatches:
    """Mini-batches decoded by ``loader_workers`` DataLoader processes.

    One DataLoader for the whole run, with persistent workers: its sampler
    takes each epoch's indices (sampling happens in this process), so loader
    processes start once, not every epoch.
    """

    def __init__(
        self, split: ImageSplit, info: DatasetInfo, batch_size: int, loader_workers: int, augment: Any = None
    ) -> None:
        self.dataset = ImageDataset(split, info, augment)
        self.dataset.defer_errors = loader_workers > 0
        self.batch_size = batch_size
        self.loader_workers = loader_workers
        self.sampler = _EpochSampler()
        self.loader = torch.utils.data.DataLoader(
            self.dataset,
            batch_size=batch_size,
            sampler=self.sampler,
            collate_fn=_collate,
            num_workers=loader_workers,
            persistent_workers=loader_workers > 0,
            worker_init_fn=functools.partial(loader_worker_init, os.getpid()) if loader_workers else None,
            # fork is safe here: a training worker has no Qt and no CUDA context
            multiprocessing_context="fork" if loader_workers and os.name == "posix" else None,
        )

    def epoch(self, indices: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.sampler.indices = indices.tolist()
        for batch in self.loader:
            if isinstance(batch, BadImage):
                self.close()
                raise DataError(batch.message)
            xb, yb = batch
            yield xb, yb.long()

    def close(self) -> None:
        """End the loader processes now (a traceback that holds the loop would keep them alive)."""
        # DataLoader has no public way to end persistent workers: they live in its one iterator
        it = self.loader._iterator  # noqa: SLF001  # see above
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()  # noqa: SLF001  # see above
        self.loader._iterator = None  # noqa: SLF001  # see above


def make_batches(
    split: Split, info: DatasetInfo, batch_size: int, loader_workers: int, augment: Any = None
) -> TensorBatches | ImageBatches:
    """Training batches; ``augment`` (core.training.augment) changes training images only."""
    if isinstance(split, FeatureSplit):  # a frozen backbone's features: no image left to augment
        return TensorBatches(split, batch_size)
    if isinstance(split, TensorSplit):
        return TensorBatches(split, batch_size, augment, info.image_shape)
    return ImageBatches(split, info, batch_size, loader_workers, augment)


def full_tensors(split: Split, info: DatasetInfo) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole split as tensors (decoding images if needed): for evaluation and export checks."""
    if isinstance(split, TensorSplit):
        return split.x, split.y
    ds = ImageDataset(split, info)
    xs = [ds.sample(i)[0] for i in range(len(ds))]
    x = torch.stack(xs) if xs else torch.empty((0, *info.input_shape))
    return x, torch.tensor(split.labels, dtype=torch.long)
