"""Decoding real-size photos: the training pipeline against Pillow alone, and what checking the folder costs.

    .venv/bin/python bench/image_decode.py [--dir /tmp/traindesk-photos] [--images 2000] [--size 224]
                                           [--passes 500]

The folder (written once, cached in ``--dir``) holds ``--images`` JPEGs of 1600x1200 in ten class
folders (bench/_photos.py: crops, flips and upscales of scikit-learn's two sample photos, each with its
own JPEG quality, so that no two files are alike). Figures, each over the
first ``--passes`` files (every one a different file, the page cache warm):

- Pillow alone, one process, a tight loop: open, ``draft``, convert to RGB, resize to ``--size``: the limit;
- ``decode_image`` (core.readers.images) alone, one process: the same plus EXIF orientation and checks;
- the training path: ``ImageDataset`` (decode, resize, augment: crop 0.6, flip, rotation 10, jitter 0.2,
  standardise) through a DataLoader of batch 64 with 1 and 2 loader processes;
- checking the whole folder before training (``check_folder``) on 1 thread and on the default threads,
  and its share of one epoch's decoding on 1 process.

Images/s, and each as a ratio of Pillow alone.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import torch
from _photos import photo_folder

from core.config import AugmentConfig
from core.data.batches import ImageBatches
from core.data.images import check_folder
from core.data.info import DatasetInfo, ImageSplit
from core.readers.images import ImagePrep, decode_image
from core.training.augment import make_augment

WIDTH, HEIGHT, CLASSES = 1600, 1200, 10


def make_photos(root: Path, n: int) -> list[Path]:
    """``n`` different 1600x1200 JPEGs from crops of the two sample photos (bench/_photos.py); written once."""
    return sorted(photo_folder(root / "photos", n, (WIDTH, HEIGHT), CLASSES).glob("class*/*.jpg"))[:n]


def rate(fn, items: list) -> float:  # type: ignore[no-untyped-def, type-arg]
    t0 = time.perf_counter()
    for it in items:
        fn(it)
    return len(items) / (time.perf_counter() - t0)


def pillow_alone(path: Path, size: int) -> None:
    from PIL import Image

    with Image.open(path) as img:
        img.draft("RGB", (size, size))
        np.asarray(img.convert("RGB").resize((size, size), Image.Resampling.BILINEAR))


def loader_rate(paths: list[Path], size: int, workers: int) -> float:
    prep = ImagePrep((3, size, size))
    info = DatasetInfo(
        "photos", len(paths), prep.shape, CLASSES, tuple(f"class{c}" for c in range(CLASSES)),
        image_shape=prep.shape, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), image_prep=prep,
    )  # fmt: skip
    split = ImageSplit(tuple(str(p) for p in paths), tuple(i % CLASSES for i in range(len(paths))))
    augment = make_augment(AugmentConfig(crop_scale=0.6, hflip=True, rotation=10.0, jitter=0.2), prep.shape)
    batches = ImageBatches(split, info, 64, workers, augment)
    warm = torch.arange(min(128, len(paths)))  # the loader processes start: not counted
    for _ in batches.epoch(warm):
        pass
    t0 = time.perf_counter()
    n = sum(len(xb) for xb, _ in batches.epoch(torch.arange(len(paths))))
    seconds = time.perf_counter() - t0
    batches.close()
    return n / seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/traindesk-photos")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--passes", type=int, default=500)
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    paths = make_photos(Path(args.dir), args.images)
    print(f"{len(paths)} JPEGs of {WIDTH}x{HEIGHT} in {args.dir} ({time.perf_counter() - t0:.1f} s to make or find)")
    some = paths[: args.passes]
    for p in some:  # the page cache warm for every contestant alike
        p.read_bytes()
    pillow = rate(lambda p: pillow_alone(p, args.size), some)
    ours = rate(lambda p: decode_image(p, (3, args.size, args.size)), some)
    one = loader_rate(some, args.size, 1)
    two = loader_rate(some, args.size, 2)
    print(f"images/s at {args.size}x{args.size}, over {len(some)} files:")
    print(f"  Pillow alone (open, draft, convert, resize)   {pillow:8.1f}   1.00x")
    print(f"  decode_image alone                            {ours:8.1f}   {ours / pillow:.2f}x")
    print(f"  training path, 1 DataLoader process (+augment) {one:7.1f}   {one / pillow:.2f}x")
    print(f"  training path, 2 DataLoader processes          {two:7.1f}   {two / pillow:.2f}x")
    strs = [str(p) for p in paths]
    for threads in (1, 0):
        t0 = time.perf_counter()
        check_folder(strs, "bench", threads)
        seconds = time.perf_counter() - t0
        epoch = len(paths) / ours
        label = "1 thread" if threads == 1 else "default threads"
        print(
            f"  checking {len(paths)} files ({label}): {seconds:.2f} s, {len(paths) / seconds:.0f} files/s, "
            f"{100 * seconds / epoch:.1f} % of one epoch's decoding on 1 process ({epoch:.1f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
