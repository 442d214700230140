"""A folder of real-photo JPEGs at camera size, made once: crops of scikit-learn's two sample photographs.

Ten class folders; a class is a region of one of the photographs (so there is something to learn), each file
a different crop of it, flipped or not, with its own JPEG quality, upscaled to ``size`` as a phone would save
it. Written once into ``root`` (reused while the count and size match).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def photo_folder(root: Path, n: int = 2000, size: tuple[int, int] = (1600, 1200), classes: int = 10) -> Path:
    from PIL import Image
    from sklearn.datasets import load_sample_images

    stamp = root / "photos.json"
    what = {"n": n, "size": list(size), "classes": classes, "version": 1}
    if stamp.exists() and json.loads(stamp.read_text()) == what:
        return root
    photos = [Image.fromarray(a) for a in load_sample_images().images]  # china.jpg, flower.jpg: 640x427
    rng = np.random.default_rng(0)
    for i in range(n):
        c = i % classes
        photo = photos[c % len(photos)]
        pw, ph = photo.size
        # each class a region of its photograph; each file a crop inside it
        cx, cy = (c // len(photos)) * (pw - 320) / max(1, classes // len(photos) - 1), (ph - 240) / 2
        x0 = int(np.clip(cx + rng.integers(-40, 41), 0, pw - 320))
        y0 = int(np.clip(cy + rng.integers(-60, 61), 0, ph - 240))
        crop = photo.crop((x0, y0, x0 + 320, y0 + 240)).resize(size, Image.Resampling.BICUBIC)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        folder = root / f"class{c}"
        folder.mkdir(parents=True, exist_ok=True)
        crop.save(folder / f"{i:05d}.jpg", quality=int(rng.integers(80, 96)))
    stamp.write_text(json.dumps(what))
    return root


def random_weights(arch: str, where: Path) -> Path:
    """A weights file of ``arch`` in timm's key layout with random values (made once): speed does not depend
    on the values, and this machine cannot download the pretrained ones."""
    import timm
    from safetensors.torch import save_file

    path = where / f"{arch}.safetensors"
    if not path.exists():
        net = timm.create_model(arch, pretrained=False)
        save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))
    return path
