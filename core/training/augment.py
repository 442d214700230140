"""Random changes to training images: resized crop, horizontal flip, rotation, colour jitter.

Applied to training batches only, never to validation: by the DataLoader
processes for image folders (per image, in ``ImageDataset``) and to the
batch for images held as tensors (digits). torchvision's transforms would
be the first choice; its wheels here are built against a CUDA torch, not
the CPU build the project pins, so these are written with torch alone
(one affine grid per image).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from core.config import AugmentConfig

Augment = Callable[[torch.Tensor], torch.Tensor]


def active(cfg: AugmentConfig) -> bool:
    return cfg.crop_scale < 1.0 or cfg.hflip or cfg.rotation > 0 or cfg.jitter > 0


def make_augment(cfg: AugmentConfig, image_shape: tuple[int, ...] | None) -> Augment | None:
    """A function of a batch (N, C, H, W) or one image (C, H, W); None when off or not images."""
    if image_shape is None or not active(cfg):
        return None

    def augment(x: torch.Tensor) -> torch.Tensor:
        single = x.dim() == 3
        batch = x.unsqueeze(0) if single else x
        out = _augment_batch(cfg, batch)
        return out[0] if single else out

    return augment


def _augment_batch(cfg: AugmentConfig, x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    dtype = x.dtype if x.is_floating_point() else torch.float32
    theta = torch.zeros(n, 2, 3, dtype=dtype)
    scale = torch.ones(n, dtype=dtype)
    if cfg.crop_scale < 1.0:  # keep a random share of the area in [crop_scale, 1], then resize
        area = torch.empty(n).uniform_(cfg.crop_scale, 1.0)
        scale = area.sqrt().to(dtype)
    angle = torch.zeros(n, dtype=dtype)
    if cfg.rotation > 0:
        angle = torch.empty(n).uniform_(-cfg.rotation, cfg.rotation).to(dtype) * (math.pi / 180)
    flip = torch.ones(n, dtype=dtype)
    if cfg.hflip:
        flip = torch.where(torch.rand(n) < 0.5, -1.0, 1.0).to(dtype)
    cos, sin = torch.cos(angle) * scale, torch.sin(angle) * scale
    theta[:, 0, 0], theta[:, 0, 1] = cos * flip, -sin
    theta[:, 1, 0], theta[:, 1, 1] = sin * flip, cos
    shift = 1 - scale  # the crop lies anywhere inside the image
    theta[:, 0, 2] = (torch.rand(n, dtype=dtype) * 2 - 1) * shift
    theta[:, 1, 2] = (torch.rand(n, dtype=dtype) * 2 - 1) * shift
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    out = F.grid_sample(x.to(dtype), grid, mode="bilinear", padding_mode="border", align_corners=False)
    if cfg.jitter > 0:
        out = _jitter(out, cfg.jitter)
    return out.to(x.dtype)


def _jitter(x: torch.Tensor, strength: float) -> torch.Tensor:
    """Brightness, contrast and (for colour images) saturation, each by a factor in [1 - s, 1 + s]."""
    n = x.shape[0]

    def factor() -> torch.Tensor:
        return torch.empty(n, 1, 1, 1).uniform_(max(0.0, 1 - strength), 1 + strength).to(x.dtype)

    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    x = (x - mean) * factor() + mean  # contrast around the image's mean
    x = x + (factor() - 1) * x.abs().mean(dim=(1, 2, 3), keepdim=True)  # brightness, standardised data
    if x.shape[1] == 3:
        grey = x.mean(dim=1, keepdim=True)
        x = grey + (x - grey) * factor()
    return x


def preview(cfg: AugmentConfig, images: torch.Tensor, copies: int = 8, seed: int = 0) -> torch.Tensor:
    """``copies`` augmented versions of each image (N, C, H, W) -> (N, copies, C, H, W), for a preview grid."""
    torch.manual_seed(seed)
    fn = make_augment(cfg, tuple(images.shape[1:])) or (lambda x: x)
    return torch.stack([fn(images.clone()) for _ in range(copies)], dim=1)


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
