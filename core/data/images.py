"""An image folder as a source: its files checked (cheaply, on threads), the modes it converts, its statistics.

One image is decoded by ``core.readers.images`` (re-exported here: :class:`ImagePrep`, :func:`decode_image`),
the torch-free decoder that training, evaluation, ``predict`` and ``serve`` all call.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from core.data.raw import RawSource, where
from core.errors import DataError
from core.readers import check_stop
from core.readers.images import (
    GREY_MODES,
    ImageError,
    ImageHeader,
    ImagePrep,
    check_image,
    decode_image,
)
from core.readers.inputs import IMAGE_SUFFIXES  # the image folder input kind's

__all__ = [
    "IMAGE_SUFFIXES",
    "ImageError",
    "ImagePrep",
    "check_folder",
    "conversion_note",
    "decode_image",
    "image_stats",
    "read_image_folder",
]

CHECK_CHUNK = 256  # files checked between two looks at Stop / Ctrl-C
MODE_NAMES = {
    "1": "1-bit",
    "P": "palette",
    "PA": "palette with alpha",
    "I;16": "16-bit",
    "I;16B": "16-bit",
    "I;16L": "16-bit",
    "I;16N": "16-bit",
    "I": "32-bit integer",
    "F": "32-bit float",
}


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
    headers = check_folder(paths, source)  # a broken file is an input error now, not a worker crash mid-training
    modes = Counter(h.mode for h in headers)
    channels = 1 if set(modes) <= GREY_MODES else 3
    w, h = (image_size, image_size) if image_size else headers[0].size
    raw = RawSource(root.name, classes, np.asarray(labels, dtype=np.int64), paths=paths, image_shape=(channels, h, w))
    note = conversion_note(modes, channels)
    if note:
        raw.notes.append(("info", f"{root}: {note}"))
    return raw


def check_folder(paths: Sequence[str], source: str, threads: int = 0) -> list[ImageHeader]:
    """Every file's header checked (``check_image``: no pixels decoded but for a JPEG without its end
    marker), on ``threads`` threads (0: one per core, at most 8): the file reads overlap on a slow disk."""
    threads = threads or min(8, os.cpu_count() or 1)
    out: list[ImageHeader] = []
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="image-check") as pool:
        for start in range(0, len(paths), CHECK_CHUNK):
            check_stop()  # a Stop or Ctrl-C while a large folder is checked
            chunk = paths[start : start + CHECK_CHUNK]
            out += pool.map(lambda p: check_image(p, source), chunk)
    return out


def conversion_note(modes: Counter[str] | Iterable[str], channels: int) -> str:
    """One line saying which of a folder's image modes are converted to what the model takes; "" for none."""
    counts = modes if isinstance(modes, Counter) else Counter(modes)
    want = "L" if channels == 1 else "RGB"
    converted = {m: n for m, n in counts.items() if m != want}
    if not converted:
        return ""
    parts = ", ".join(
        f"{n} {m}" + (f" ({MODE_NAMES[m]})" if m in MODE_NAMES else "")
        for m, n in sorted(converted.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    return f"{sum(converted.values())} of {sum(counts.values())} images converted to {'grey' if channels == 1 else 'RGB'}: {parts}"


def image_stats(paths: Sequence[str], prep: ImagePrep | Sequence[int], seed: int) -> tuple[list[float], list[float]]:
    """Per-channel mean/std from up to 256 training images (enough for standardisation)."""
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(paths), size=min(256, len(paths)), replace=False)
    decoded = []
    for k, i in enumerate(pick):
        if k % 32 == 0:
            check_stop()
        decoded.append(decode_image(paths[i], prep))
    arrs = np.stack(decoded)
    mean = arrs.mean(axis=(0, 2, 3))
    std = arrs.std(axis=(0, 2, 3))
    return mean.tolist(), np.where(std < 1e-6, 1.0, std).tolist()
