"""Image files: the suffixes taken, checking and decoding one, an image folder as a source, its statistics.

Torch-free (PIL and numpy): prediction decodes images with the same code as training.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.data.raw import RawSource, where
from core.errors import DataError
from core.readers import check_stop
from core.readers.inputs import IMAGE_SUFFIXES  # the image folder input kind's


def read_image_folder(dir_text: str, image_size: int, source: str) -> RawSource:
    root = Path(dir_text).expanduser()
    if not root.is_dir():
        raise DataError(f"{where(source)}: folder not found: {root}")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(classes) < 2:
        raise DataError(f"{where(source)}: {root} needs one sub-folder per class (at least 2), found {len(classes)}")
    paths: list[str] = []
    labels: list[int] = []
    for label, cls in enumerate(classes):
        files = sorted(str(p) for p in (root / cls).rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise DataError(f"{where(source)}: class folder {root / cls} holds no images")
        paths += files
        labels += [label] * len(files)
    for k, path in enumerate(paths):  # a broken file is an input error now, not a worker crash mid-training
        if k % 64 == 0:
            check_stop()  # a Stop or Ctrl-C while a large folder is checked
        verify_image(path, source)
    first = open_image(paths[0], source)
    channels = 1 if first.mode in ("L", "1", "I", "I;16", "F") else 3
    w, h = (image_size, image_size) if image_size else first.size
    return RawSource(root.name, classes, np.asarray(labels, dtype=np.int64), paths=paths, image_shape=(channels, h, w))


def _image_problem(exc: Exception) -> str:
    """Why PIL refused a file, in a few words on one line."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(exc, UnidentifiedImageError):
        return "not an image file (or a format Pillow cannot read)"
    if isinstance(exc, Image.DecompressionBombError):
        return "too many pixels (possible decompression bomb)"
    if isinstance(exc, FileNotFoundError):
        return "file not found"
    text = " ".join(str(exc).split())
    return text[:120] or type(exc).__name__


def verify_image(path: str, source: str) -> None:
    """Check a file's header and, for PNG, every chunk's checksum, without decoding pixels."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            img.verify()
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as exc:
        raise DataError(f"data: {source}: cannot decode image {path}: {_image_problem(exc)}") from None


def open_image(path: str, source: str = "") -> Any:
    from PIL import Image

    try:
        img = Image.open(path)
        img.load()
        return img
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as exc:
        raise DataError(f"data: {source or path}: cannot decode image {path}: {_image_problem(exc)}") from None


def decode_image(path: str, image_shape: tuple[int, ...]) -> np.ndarray:
    """Decode, convert and resize one image to float32 (C, H, W) in [0, 1]."""
    c, h, w = image_shape
    img = open_image(path)
    img = img.convert("L" if c == 1 else "RGB")
    if img.size != (w, h):
        img = img.resize((w, h))
    arr = np.asarray(img, dtype=np.float32) / 255.0
    return arr[None] if c == 1 else arr.transpose(2, 0, 1).copy()


def image_stats(paths: Sequence[str], shape: tuple[int, ...], seed: int) -> tuple[list[float], list[float]]:
    """Per-channel mean/std from up to 256 training images (enough for standardisation)."""
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(paths), size=min(256, len(paths)), replace=False)
    decoded = []
    for k, i in enumerate(pick):
        if k % 32 == 0:
            check_stop()
        decoded.append(decode_image(paths[i], shape))
    arrs = np.stack(decoded)
    mean = arrs.mean(axis=(0, 2, 3))
    std = arrs.std(axis=(0, 2, 3))
    return mean.tolist(), np.where(std < 1e-6, 1.0, std).tolist()
