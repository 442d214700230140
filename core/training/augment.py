"""Random changes to training images: resized crop, horizontal flip, rotation, colour jitter.

torchvision's ``transforms.v2`` (RandomResizedCrop, RandomHorizontalFlip, RandomRotation, ColorJitter),
applied to training images only, never to validation: per image, on pixels in [0, 1], by the DataLoader
processes for image folders (``ImageDataset``, before standardisation), and to a batch for images held
as standardised tensors (digits: :meth:`Augment.standardized`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from core.config import AugmentConfig

GROUPS = 8  # a batch is augmented in up to this many groups, each with its own draw (one per image costs 50x)


def active(cfg: AugmentConfig) -> bool:
    return cfg.crop_scale < 1.0 or cfg.hflip or cfg.rotation > 0 or cfg.jitter > 0


class Augment:
    """The [augment] settings as v2 transforms, for one image (C, H, W) or a batch (N, C, H, W)."""

    def __init__(self, cfg: AugmentConfig, image_shape: Sequence[int]) -> None:
        # imported here: a run without augmentation (and the forkserver's preload of the worker) skips its 1.8 s
        from torchvision.transforms import v2  # type: ignore[import-untyped]  # torchvision ships no py.typed

        c, h, w = (int(s) for s in image_shape[-3:])
        steps: list[torch.nn.Module] = []
        if cfg.crop_scale < 1.0:
            steps.append(v2.RandomResizedCrop((h, w), scale=(cfg.crop_scale, 1.0), antialias=True))
        if cfg.hflip:
            steps.append(v2.RandomHorizontalFlip())
        if cfg.rotation > 0:
            steps.append(v2.RandomRotation(cfg.rotation, interpolation=v2.InterpolationMode.BILINEAR))
        if cfg.jitter > 0:
            j = cfg.jitter
            steps.append(v2.ColorJitter(brightness=j, contrast=j, saturation=j if c == 3 else None))
        self.transform = v2.Compose(steps)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Pixels in [0, 1]: one image gets its own draw; a batch one draw per group of images."""
        if x.dim() == 3:
            return self.transform(x)
        return torch.cat([self.transform(g) for g in x.chunk(min(GROUPS, len(x)))]) if len(x) else x

    def standardized(self, x: torch.Tensor) -> torch.Tensor:
        """Images of any range (standardised data): each mapped to [0, 1] by its own range, augmented, mapped back."""
        batch = x.unsqueeze(0) if x.dim() == 3 else x
        flat = batch.reshape(len(batch), -1)
        lo = flat.min(dim=1).values.view(-1, 1, 1, 1)
        span = (flat.max(dim=1).values.view(-1, 1, 1, 1) - lo).clamp_min(1e-12)
        out = self((batch - lo) / span) * span + lo
        return out[0] if x.dim() == 3 else out


def make_augment(cfg: AugmentConfig, image_shape: tuple[int, ...] | None) -> Augment | None:
    """The augmentation of training images; None when off or the data are not images."""
    if image_shape is None or not active(cfg):
        return None
    return Augment(cfg, image_shape)


def preview(cfg: AugmentConfig, images: torch.Tensor, copies: int = 8, seed: int = 0) -> torch.Tensor:
    """``copies`` augmented versions of each image (N, C, H, W) in [0, 1] -> (N, copies, C, H, W), for a preview."""
    torch.manual_seed(seed)
    fn = make_augment(cfg, tuple(images.shape[1:]))
    if fn is None:
        return torch.stack([images.clone() for _ in range(copies)], dim=1)
    return torch.stack([torch.stack([fn(img) for img in images]) for _ in range(copies)], dim=1)


def preview_grid(
    cfg: AugmentConfig, images: Sequence[np.ndarray], copies: int = 6, seed: int = 0
) -> list[list[np.ndarray]]:
    """For each uint8 image (H, W) or (H, W, 3): the image, then ``copies`` augmented versions, as uint8.

    What the window's preview shows of a data set's sample images (``DatasetInfo.preview_images``),
    each augmented alone so that images of different sizes may be mixed.
    """
    rows = []
    for k, image in enumerate(images):
        a = np.asarray(image, dtype=np.uint8)
        x = torch.from_numpy(a.astype(np.float32) / 255.0)
        x = x.unsqueeze(0) if a.ndim == 2 else x.permute(2, 0, 1)  # (C, H, W)
        with torch.random.fork_rng(devices=[]):  # preview seeds torch: leave the caller's generator alone
            out = preview(cfg, x.unsqueeze(0).contiguous(), copies, seed + k)[0]  # (copies, C, H, W)
        pixels = (out.clamp(0, 1) * 255).round().to(torch.uint8)
        pixels = pixels[:, 0] if a.ndim == 2 else pixels.permute(0, 2, 3, 1)
        rows.append([a] + [np.ascontiguousarray(p.numpy()) for p in pixels])
    return rows
