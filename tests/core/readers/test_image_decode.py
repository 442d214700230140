"""One image decoder for every face: training, predict and serve give the same arrays; any mode, any
orientation, any size; bad and huge files refused with one line naming them."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

import numpy as np
import orjson
import pytest
import torch
from PIL import Image

from core.data import DatasetInfo, ImageSplit, load_data
from core.data.batches import ImageBatches, ImageDataset
from core.data.images import conversion_note, read_image_folder
from core.errors import DataError
from core.readers.images import MAX_DECODED_PIXELS, ImageError, ImagePrep, check_image, decode_image

RNG = np.random.default_rng(0)


def _photo(w: int, h: int, seed: int = 0) -> np.ndarray:
    """A smooth colour picture (gradients and a disc): resampling differences show, as in a photo."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    r = 127 + 120 * np.sin(x / (w / 3.0) + seed)
    g = 127 + 120 * np.cos(y / (h / 4.0) - seed)
    b = np.where((x - w / 2) ** 2 + (y - h / 3) ** 2 < (min(w, h) / 4) ** 2, 230.0, 30.0)
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).astype(np.uint8)


def _jpeg(path: Path, w: int, h: int, orientation: int = 1, seed: int = 0, quality: int = 90) -> Path:
    img = Image.fromarray(_photo(w, h, seed))
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    img.save(path, "JPEG", quality=quality, exif=exif.tobytes())
    return path


def _huge_png(w: int, h: int) -> bytes:
    """A PNG of a few bytes whose header claims ``w`` x ``h`` pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def _mixed_folder(root: Path) -> list[Path]:
    """Images of several sizes and modes, each kind in both classes."""
    files = []
    for cls in ("a", "b"):
        d = root / cls
        d.mkdir(parents=True)
        s = 1 if cls == "a" else 2
        files.append(_jpeg(d / "0_rotated.jpg", 64, 40, orientation=6, seed=s))
        files.append(_jpeg(d / "1_photo.jpg", 1600, 1200, seed=s))
        Image.fromarray(_photo(50, 30, s)).convert("CMYK").save(d / "2_cmyk.jpg", "JPEG", quality=92)
        Image.fromarray(_photo(33, 47, s)).convert("RGBA").save(d / "3_rgba.png")
        Image.fromarray(_photo(40, 40, s)).convert("P", palette=Image.Palette.ADAPTIVE).save(d / "4_palette.png")
        grey16 = (RNG.random((20, 28)) * 65535).astype(np.uint16)
        Image.fromarray(grey16).save(d / "5_grey16.png")
        Image.fromarray(_photo(31, 17, s)[..., 0]).save(d / "6_grey.jpg", quality=80)
        files += [d / n for n in ("2_cmyk.jpg", "3_rgba.png", "4_palette.png", "5_grey16.png", "6_grey.jpg")]
    return sorted(files)


def _meta(prep: ImagePrep) -> dict:
    c = prep.shape[0]
    return {
        "input": {
            "shape": list(prep.shape),
            "image_shape": list(prep.shape),
            "features": [],
            "image_prep": prep.to_json(),
        },
        "classes": ["a", "b"],
        "preprocessing": {"mean": [0.0] * c, "std": [1.0] * c},
    }


@pytest.mark.parametrize(
    "prep",
    [
        ImagePrep((3, 24, 32)),
        ImagePrep((1, 16, 16), interpolation="nearest"),
        ImagePrep((3, 24, 24), resize="crop", crop_pct=0.875, interpolation="bicubic"),
    ],
    ids=["squash-rgb", "squash-grey", "crop-bicubic"],
)
def test_training_predict_and_serve_decode_the_same_bits(tmp_path: Path, prep: ImagePrep) -> None:
    from core.services.predict.inputs import read_image_input
    from core.services.serve.schema import ModelSchema

    files = _mixed_folder(tmp_path / "imgs")
    c = prep.shape[0]
    info = DatasetInfo(
        "imgs", len(files), prep.shape, 2, ("a", "b"), image_shape=prep.shape, mean=(0.0,) * c, std=(1.0,) * c,
        image_prep=prep,
    )  # fmt: skip
    dataset = ImageDataset(ImageSplit(tuple(str(f) for f in files), (0,) * len(files)), info)
    training = np.stack([dataset[i][0].numpy() for i in range(len(files))])  # type: ignore[index]
    inp = read_image_input(tmp_path / "imgs", _meta(prep))
    assert list(inp.paths) == [str(f) for f in files]
    predicted = inp.rows(0, len(files), prep.shape)
    body = orjson.dumps({"images": [base64.b64encode(f.read_bytes()).decode() for f in files]})
    served, _ = ModelSchema.from_meta(_meta(prep)).parse(body)
    assert training.shape == (len(files), *prep.shape) and training.dtype == np.float32
    assert np.array_equal(training, predicted) and np.array_equal(training, served)
    assert 0.0 <= training.min() and training.max() <= 1.0 and training.std() > 0.05


def test_crop_is_timms_eval_transform(tmp_path: Path) -> None:
    from timm.data import create_transform

    for w, h, size in ((71, 53, (3, 32, 32)), (40, 90, (3, 24, 24)), (64, 64, (3, 20, 28))):
        path = tmp_path / f"{w}x{h}.png"
        Image.fromarray(_photo(w, h)).save(path)
        prep = ImagePrep(size, resize="crop", crop_pct=0.9, interpolation="bicubic")
        timm_eval = create_transform(
            input_size=size, is_training=False, crop_pct=0.9, interpolation="bicubic", mean=(0, 0, 0), std=(1, 1, 1)
        )
        want = timm_eval(Image.open(path).convert("RGB")).numpy()
        assert np.abs(decode_image(path, prep) - want).max() < 1e-6, (w, h, size)


@pytest.mark.parametrize("crop_mode", ["center", "squash", "border"])
def test_each_crop_mode_is_timms_eval_transform(tmp_path: Path, crop_mode: str) -> None:
    from timm.data import create_transform, resolve_data_config

    mean, std = (0.5, 0.4, 0.3), (0.25, 0.2, 0.3)
    cases = (
        (71, 53, (3, 32, 32), 0.9),
        (40, 90, (3, 24, 24), 1.0),
        (90, 41, (3, 20, 28), 0.875),
        (30, 50, (3, 32, 32), 1.15),
    )
    for w, h, size, crop_pct in cases:
        path = tmp_path / f"{w}x{h}.png"
        Image.fromarray(_photo(w, h)).save(path)
        pretrained = {"input_size": size, "interpolation": "bicubic", "crop_pct": crop_pct, "crop_mode": crop_mode}
        timm_eval = create_transform(**resolve_data_config(pretrained_cfg={**pretrained, "mean": mean, "std": std}))
        want = timm_eval(Image.open(path).convert("RGB")).numpy()
        fill = tuple(round(255 * v) for v in mean) if crop_mode == "border" else ()
        prep = ImagePrep(size, "crop", crop_pct, "bicubic", crop_mode, fill)
        got = (decode_image(path, prep) - np.reshape(mean, (3, 1, 1))) / np.reshape(std, (3, 1, 1))
        assert got.shape == want.shape and np.abs(got - want).max() < 1e-5, (crop_mode, w, h, size, crop_pct)


def test_a_model_json_without_crop_mode_is_a_centre_crop() -> None:
    old = {"shape": [3, 24, 24], "resize": "crop", "crop_pct": 0.875, "interpolation": "bicubic"}
    assert ImagePrep.from_json(old) == ImagePrep((3, 24, 24), "crop", 0.875, "bicubic", "center")
    assert ImagePrep.from_json(old).to_json() == old  # written as before: a feature cache's key stays
    border = ImagePrep((3, 24, 24), "crop", 1.0, "bicubic", "border", (128, 102, 77))
    assert ImagePrep.from_json(orjson.loads(orjson.dumps(border.to_json()))) == border
    for bad in ({"crop_mode": "letterbox"}, {"resize": "squash", "crop_mode": "border"}, {"fill": [1, 2]}):
        with pytest.raises(DataError, match="image_prep"):
            ImagePrep.from_json({**old, **bad})


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    upright = _jpeg(tmp_path / "upright.jpg", 40, 64, quality=100)
    turned = Image.open(upright).transpose(Image.Transpose.ROTATE_90)  # stored on its side, EXIF says turn back
    exif = Image.Exif()
    exif[0x0112] = 6
    turned.save(tmp_path / "turned.jpg", "JPEG", quality=100, exif=exif.tobytes())
    a = decode_image(upright, (3, 64, 40))
    b = decode_image(tmp_path / "turned.jpg", (3, 64, 40))
    assert np.abs(a - b).mean() < 0.02  # the same picture, but for JPEG's losses
    assert check_image(str(tmp_path / "turned.jpg")).size == (40, 64)  # as seen: what data.image_size = 0 takes


def test_a_large_jpeg_decodes_in_draft_mode_never_below_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PIL import JpegImagePlugin

    path = _jpeg(tmp_path / "big.jpg", 1600, 1200)
    loaded: list[tuple[int, int]] = []
    load = JpegImagePlugin.JpegImageFile.load

    def spy(self):  # type: ignore[no-untyped-def]
        loaded.append(self.size)
        return load(self)

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "load", spy)

    def decoded_at(prep: ImagePrep | tuple[int, int, int]) -> tuple[int, int]:
        loaded.clear()
        decode_image(path, prep)
        return loaded[0]

    assert decoded_at((3, 224, 224)) == (400, 300)  # 1/4: 1/8 (200x150) would be below 224
    assert decoded_at((3, 100, 300)) == (400, 300)  # 1/4: the width needs 300
    assert decoded_at((3, 100, 150)) == (200, 150)  # 1/8
    assert decoded_at(ImagePrep((3, 224, 224), resize="crop", crop_pct=0.875)) == (400, 300)  # 256 before the crop
    assert decoded_at((3, 1200, 1600)) == (1600, 1200)


@pytest.mark.parametrize(
    "mode, want",
    [("RGBA", 3), ("P", 3), ("CMYK", 3), ("LA", 1), ("I;16", 1), ("I", 1), ("F", 1), ("1", 1)],
)
def test_any_mode_becomes_what_the_model_takes(tmp_path: Path, mode: str, want: int) -> None:
    grey = (np.arange(12 * 16).reshape(12, 16) % 256).astype(np.uint8)
    if mode == "I;16":
        img = Image.fromarray(grey.astype(np.uint16) * 257)  # 16 bits: 255 * 257 = 65535 is white
    elif mode == "I":
        img = Image.fromarray(grey.astype(np.int32) * 257)
    elif mode == "F":
        img = Image.fromarray(grey.astype(np.float32))
    else:
        img = Image.fromarray(grey).convert(mode)
    assert img.mode == mode
    path = tmp_path / ("x.tiff" if mode in ("I", "F") else "x.jpg" if mode == "CMYK" else "x.png")
    img.save(path)
    for channels in (1, 3):
        out = decode_image(path, (channels, 12, 16))
        assert out.shape == (channels, 12, 16) and out.dtype == np.float32
        if mode in ("I;16", "I", "F", "LA"):  # exact: the same grey levels as the 8-bit picture
            assert np.array_equal(out[0], grey / np.float32(255.0)), mode


def test_a_folder_says_once_which_modes_it_converts(tmp_path: Path) -> None:
    for cls, mode in (("a", "RGBA"), ("b", "P")):
        (tmp_path / cls).mkdir()
        for i in range(3):
            Image.fromarray(_photo(10, 10, i)).convert(mode).save(tmp_path / cls / f"{i}.png")
    Image.fromarray(_photo(10, 10)).save(tmp_path / "a" / "rgb.png")
    raw = read_image_folder(str(tmp_path), 8, f"images:{tmp_path}")
    assert raw.image_shape == (3, 8, 8)
    notes = [m for _level, m in raw.notes]
    assert len(notes) == 1 and "6 of 7 images converted to RGB: 3 P (palette), 3 RGBA" in notes[0], notes
    assert conversion_note({"L": 4}, 1) == "" and "2 I;16 (16-bit)" in conversion_note(["I;16", "I;16", "L"], 1)
    assert read_image_folder(str(tmp_path), 8, "x").image_shape == (3, 8, 8)


def test_grey_folders_stay_grey_whatever_the_bit_depth(tmp_path: Path) -> None:
    for cls in "ab":
        (tmp_path / cls).mkdir()
        Image.fromarray(np.zeros((6, 6), np.uint8)).save(tmp_path / cls / "8.png")
        Image.fromarray(np.zeros((6, 6), np.uint16)).save(tmp_path / cls / "16.png")
    assert read_image_folder(str(tmp_path), 0, "x").image_shape == (1, 6, 6)


def test_a_huge_header_is_refused_naming_the_file_without_decoding(tmp_path: Path) -> None:
    import resource

    path = tmp_path / "huge.png"
    path.write_bytes(_huge_png(20_000, 20_000))  # 400 megapixels: 1.2 GB as RGB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for call in (lambda: check_image(str(path), "images:x"), lambda: decode_image(path, (3, 8, 8))):
        with pytest.raises(ImageError, match=r"huge\.png: too many pixels \(possible decompression bomb\)") as e:
            call()
        assert "\n" not in str(e.value)
    with pytest.raises(ImageError, match="too many pixels"):
        decode_image(_huge_png(70_000, 70_000), (3, 8, 8))  # past Pillow's own limit too
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KB: nothing was decoded
    assert MAX_DECODED_PIXELS < 20_000**2


def _truncated_jpeg(path: Path) -> Path:
    data = _jpeg(path, 300, 200, seed=3).read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _broken_deflate_png(path: Path) -> Path:
    """A PNG whose chunks' checksums are right but whose pixel data is not deflate: only decoding finds it."""
    data = _huge_png(30, 20)
    start = data.index(b"IDAT") - 4
    length = struct.unpack(">I", data[start : start + 4])[0]
    junk = b"\x13\x37" * (length // 2)
    idat = struct.pack(">I", len(junk)) + b"IDAT" + junk + struct.pack(">I", zlib.crc32(b"IDAT" + junk))
    path.write_bytes(data[:start] + idat + data[start + 12 + length :])
    return path


def test_a_truncated_jpeg_is_named_when_the_folder_is_checked(tmp_path: Path) -> None:
    for cls in "ab":
        (tmp_path / cls).mkdir()
        for i in range(3):
            _jpeg(tmp_path / cls / f"{i}.jpg", 30, 20, seed=i)
    _truncated_jpeg(tmp_path / "b" / "cut.jpg")
    with pytest.raises(DataError, match=r"cannot decode image .*b/cut\.jpg: image file is truncated") as e:
        read_image_folder(str(tmp_path), 8, f"images:{tmp_path}")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("loader_workers", [0, 1])
def test_a_bad_file_met_by_the_loader_is_named(tmp_path: Path, loader_workers: int) -> None:
    """A file that passes the cheap check but does not decode: the loader names it (in its processes too)."""
    from core.config import DataConfig

    for cls in "ab":
        (tmp_path / cls).mkdir()
        for i in range(4):
            _jpeg(tmp_path / cls / f"{i}.jpg", 30, 20, seed=i)
    _broken_deflate_png(tmp_path / "a" / "9_broken.png")
    data = load_data(DataConfig(source=f"images:{tmp_path}", image_size=8, val_fraction=0.0, standardize=False))
    batches = ImageBatches(data.train, data.info, 4, loader_workers)
    try:
        with pytest.raises(DataError, match=r"cannot decode image .*a/9_broken\.png") as e:
            for _ in batches.epoch(torch.arange(len(data.train))):
                pass
        assert "\n" not in str(e.value) and "DataLoader" not in str(e.value)
    finally:
        del batches  # its loader processes end with it


def test_image_prep_travels_as_json_and_refuses_bad_values() -> None:
    prep = ImagePrep((3, 224, 224), resize="crop", crop_pct=0.875, interpolation="bicubic")
    assert ImagePrep.from_json(orjson.loads(orjson.dumps(prep.to_json()))) == prep
    assert ImagePrep.of((1, 8, 8)) == ImagePrep((1, 8, 8), "squash", 1.0, "bilinear")
    for bad in ({"shape": [3, 8]}, {"shape": [3, 8, 8], "resize": "pad"}, {"shape": [3, 8, 8], "crop_pct": 0}):
        with pytest.raises(DataError, match="image_prep"):
            ImagePrep.from_json(bad)
    with pytest.raises(ValueError, match="interpolation"):
        ImagePrep((3, 8, 8), interpolation="cubic")


def test_a_run_carries_its_image_prep_to_the_checkpoint(tmp_path: Path) -> None:
    from core.config import DataConfig

    for cls in "ab":
        (tmp_path / cls).mkdir()
        for i in range(3):
            _jpeg(tmp_path / cls / f"{i}.jpg", 30, 20, seed=i)
    prep = ImagePrep((3, 16, 16), resize="crop", crop_pct=0.875, interpolation="bicubic")
    data = load_data(DataConfig(source=f"images:{tmp_path}", image_size=8), image_prep=prep)
    assert data.info.image_shape == (3, 16, 16) and data.info.as_dict()["image_prep"] == prep.to_json()
    plain = load_data(DataConfig(source=f"images:{tmp_path}", image_size=8)).info
    assert plain.prep == ImagePrep((3, 8, 8)) and plain.as_dict()["image_prep"]["resize"] == "squash"
