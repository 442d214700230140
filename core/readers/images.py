"""One image decoded as a model takes it, the same on every face: training, evaluation, predict and serve.

:class:`ImagePrep` says what the model takes ((C, H, W), squash or timm's eval transform with its crop
mode, the resampling filter); :func:`decode_image` turns a file or bytes into float32 (C, H, W) in [0, 1]
by it. A JPEG is decoded at the size needed (Pillow's draft mode, never below the target), EXIF orientation
is applied, any mode is converted to grey or RGB, and no image decodes to more than ``MAX_DECODED_PIXELS``.
:func:`preview_image` is the same image, oriented, for a face to show.
:func:`check_image` is the cheap check of a file before training (header, PNG checksums, a JPEG's end).

Torch-free (PIL and numpy): the HTTP process of ``serve`` and an ONNX model's ``predict`` decode without torch.
"""

from __future__ import annotations

import io
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.errors import DataError

MAX_DECODED_PIXELS = 64_000_000  # a 64-megapixel decode is 192 MB as RGB, 256 MB as 32-bit: never gigabytes
DRAFT_MAX_SCALE = 8  # JPEG's draft mode decodes at 1/2, 1/4 or 1/8 of each side
RESIZES = ("squash", "crop")
CROP_MODES = ("center", "squash", "border")  # timm's (timm.data.transforms_imagenet_eval)
MAX_CROP_PCT = 2.0  # above 1 the image is scaled below the size and padded (timm's volo at 448: 1.15)
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")
GREY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"})
ORIENTATION = 0x0112  # the EXIF tag; 5 to 8 swap width and height
JPEG_END = b"\xff\xd9"
_PIL_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, SyntaxError, EOFError)

Source = str | os.PathLike[str] | bytes


class ImageError(DataError):
    """A file or bytes that cannot be decoded; ``reason`` says why in a few words (faces word the rest)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process pools (predict's workers) whole
        return type(self), (str(self), self.reason)


@dataclass(frozen=True)
class ImagePrep:
    """How an image becomes what the model takes; travels in the checkpoint and model.json.

    ``resize``: "squash" resizes to (W, H), whatever the aspect; "crop" is timm's eval transform
    (``transforms_imagenet_eval``), the scale ``floor(H / crop_pct)`` x ``floor(W / crop_pct)`` reached as
    ``crop_mode`` says: "center", the shorter side to it, then the centre H x W; "squash", both sides to it
    whatever the aspect, then the centre H x W; "border", the longer side to it, then the centre H x W, the
    sides short of it padded with ``fill`` (0-255 per channel, timm's ``round(255 * mean)``).
    """

    shape: tuple[int, int, int]  # (C, H, W), C 1 (grey) or 3 (RGB)
    resize: str = "squash"
    crop_pct: float = 1.0
    interpolation: str = "bilinear"
    crop_mode: str = "center"
    fill: tuple[int, ...] = ()  # "border"'s padding, one value per channel (none: black)

    def __post_init__(self) -> None:
        shape = tuple(int(s) for s in self.shape)
        if len(shape) != 3 or shape[0] not in (1, 3) or min(shape[1:]) < 1:
            raise ValueError(f"image prep: shape must be (C, H, W) with C 1 or 3, got {self.shape}")
        object.__setattr__(self, "shape", shape)
        if self.resize not in RESIZES:
            raise ValueError(f"image prep: resize must be one of {', '.join(RESIZES)}, got {self.resize!r}")
        if not 0.0 < float(self.crop_pct) <= MAX_CROP_PCT:
            raise ValueError(f"image prep: crop_pct must be in (0, {MAX_CROP_PCT}], got {self.crop_pct}")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(
                f"image prep: interpolation must be one of {', '.join(INTERPOLATIONS)}, got {self.interpolation!r}"
            )
        if self.crop_mode not in CROP_MODES:
            raise ValueError(f"image prep: crop_mode must be one of {', '.join(CROP_MODES)}, got {self.crop_mode!r}")
        if self.crop_mode != "center" and self.resize != "crop":
            raise ValueError(f'image prep: crop_mode {self.crop_mode!r} needs resize "crop", got {self.resize!r}')
        fill = tuple(int(v) for v in self.fill)
        if fill and (len(fill) != shape[0] or not all(0 <= v <= 255 for v in fill)):
            raise ValueError(f"image prep: fill must be {shape[0]} values 0 to 255, got {self.fill}")
        object.__setattr__(self, "fill", fill)

    @classmethod
    def of(cls, prep: ImagePrep | Sequence[int]) -> ImagePrep:
        """``prep`` itself, or a (C, H, W) shape as a squash (what every model before ImagePrep took)."""
        return prep if isinstance(prep, ImagePrep) else cls(tuple(int(s) for s in prep))  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "shape": list(self.shape),
            "resize": self.resize,
            "crop_pct": self.crop_pct,
            "interpolation": self.interpolation,
        }
        if self.crop_mode != "center":  # a centre crop is written as before: its cached features stay valid
            doc["crop_mode"] = self.crop_mode
        if self.fill:
            doc["fill"] = list(self.fill)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ImagePrep:
        try:
            return cls(
                tuple(int(s) for s in doc["shape"]),  # type: ignore[arg-type]
                str(doc.get("resize", "squash")),
                float(doc.get("crop_pct", 1.0)),
                str(doc.get("interpolation", "bilinear")),
                str(doc.get("crop_mode", "center")),  # a model from before crop modes: a centre crop
                tuple(int(v) for v in doc.get("fill", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"image_prep {doc!r} is unusable: {exc}") from None

    def plan(self, width: int, height: int) -> tuple[tuple[int, int], tuple[int, int, int, int] | None]:
        """For an image of ``width`` x ``height`` (oriented): the size to resize to and the box to crop, if any
        (a box past the resized image's edges pads it with ``fill``)."""
        _c, h, w = self.shape
        if self.resize == "squash":
            return (w, h), None
        sh, sw = math.floor(h / self.crop_pct), math.floor(w / self.crop_pct)
        if self.crop_mode == "squash":  # torchvision's Resize((sh, sw))
            size = (sw, sh)
        elif self.crop_mode == "border":  # timm's ResizeKeepRatio(longest=1): both sides at most the scale
            ratio = max(height / sh, width / sw)
            size = (round(width / ratio), round(height / ratio))
        elif sh == sw:  # torchvision's Resize(int): the shorter side to sh, the longer in proportion (truncated)
            if width <= height:
                size = (sh, int(sh * height / width))
            else:
                size = (int(sh * width / height), sh)
        else:  # timm's ResizeKeepRatio(longest=0): both sides at least the target
            ratio = min(height / sh, width / sw)
            size = (round(width / ratio), round(height / ratio))
        left, top = _offset(size[0], w), _offset(size[1], h)
        return size, (left, top, left + w, top + h)


def _offset(have: int, want: int) -> int:
    """Where the crop of ``want`` starts along a side of ``have``: timm's ``center_crop_or_pad`` pads a short
    side by half the gap (the odd pixel after), and centres the crop of a long one (rounded)."""
    return -((want - have) // 2) if want > have else int(round((have - want) / 2.0))


def prep_of(doc: dict[str, Any] | None, shape: Sequence[int]) -> ImagePrep:
    """A model's ``image_prep`` (its checkpoint's or model.json's), else a squash to ``shape`` (older models)."""
    return ImagePrep.from_json(doc) if doc else ImagePrep.of(shape)


def _pil() -> Any:
    """PIL's Image, with this module's pixel policy set once.

    Pillow refuses a header of more than twice ``MAX_IMAGE_PIXELS`` on its own; ours is the check of the
    pixels actually decoded, so Pillow's limit is set where a JPEG that draft mode shrinks 8x per side
    still reaches it, and its warning below that is left out (the check here refuses, naming the file).
    """
    from PIL import Image

    if Image.MAX_IMAGE_PIXELS != _PILLOW_LIMIT:
        Image.MAX_IMAGE_PIXELS = _PILLOW_LIMIT
        warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
    return Image


_PILLOW_LIMIT = MAX_DECODED_PIXELS * DRAFT_MAX_SCALE**2 // 2


def problem(exc: BaseException) -> str:
    """Why PIL refused a file, in a few words on one line."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(exc, ImageError):
        return exc.reason
    if isinstance(exc, UnidentifiedImageError):
        return "not an image file (or a format Pillow cannot read)"
    if isinstance(exc, Image.DecompressionBombError):
        return "too many pixels (possible decompression bomb)"
    if isinstance(exc, FileNotFoundError):
        return "file not found"
    text = " ".join(str(exc).split())
    return text[:120] or type(exc).__name__


def _name(source: Source) -> str:
    return "image bytes" if isinstance(source, bytes) else os.fspath(source)


def _refuse(source: Source, reason: str, where: str = "") -> ImageError:
    name = _name(source)
    return ImageError(f"data: {where or name}: cannot decode image {name}: {reason}", reason)


def _too_many(width: int, height: int) -> str:
    return (
        f"too many pixels (possible decompression bomb): {width}×{height} to decode, "
        f"more than {MAX_DECODED_PIXELS // 1_000_000} megapixels"
    )


def _open(source: Source) -> Any:
    return _pil().open(io.BytesIO(source) if isinstance(source, bytes) else source)


def _orientation(img: Any) -> int:
    try:
        return int(img.getexif().get(ORIENTATION, 1) or 1)
    except _PIL_ERRORS:  # a broken EXIF block: the pixels are still usable, upright as stored
        return 1


def decode_image(
    source: Source, prep: ImagePrep | Sequence[int], formats: Sequence[str] | None = None, where: str = ""
) -> np.ndarray:
    """Decode, orient, convert and resize one image (a path or bytes) to float32 (C, H, W) in [0, 1].

    ``prep``: an :class:`ImagePrep`, or a (C, H, W) shape meaning squash. ``formats``: the formats taken
    (PIL's names), any when None. ``where`` begins the error line (a data source); ImageError otherwise.
    """
    p = ImagePrep.of(prep)
    Image = _pil()
    try:
        with _open(source) as img:
            if formats and img.format not in formats:
                raise _refuse(source, f"is a {img.format} image; send {' or '.join(formats)}", where)
            out = _fit(img, p, source, where)
    except ImageError:
        raise
    except (*_PIL_ERRORS, Image.DecompressionBombError) as exc:
        raise _refuse(source, problem(exc), where) from None
    arr = np.asarray(out, dtype=np.float32) / 255.0
    return arr[None] if p.shape[0] == 1 else arr.transpose(2, 0, 1).copy()


def _upright(img: Any, orientation: int) -> Any:
    """The image as its EXIF orientation says it is seen: how every face reads it, and shows it."""
    from PIL import ImageOps

    return ImageOps.exif_transpose(img) if orientation != 1 else img


def preview_image(source: Source, max_side: int) -> np.ndarray:
    """An image to look at: oriented as :func:`decode_image` reads it, at most ``max_side`` pixels a side
    (aspect kept, never enlarged), uint8 HxW (grey) or HxWx3 (RGB). ImageError names the file."""
    Image = _pil()
    try:
        with _open(source) as img:
            if img.format == "JPEG":  # a square: the file's sides, whichever way it is turned
                img.draft(img.mode, (max_side, max_side))
            if img.size[0] * img.size[1] > MAX_DECODED_PIXELS:
                raise _refuse(source, _too_many(*img.size))
            img.load()
            img = _upright(img, _orientation(img))  # after the pixels: a PNG's EXIF may follow them
            img = convert_mode(img, 1 if img.mode in GREY_MODES else 3)
            img.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
            return np.asarray(img, dtype=np.uint8).copy()
    except ImageError:
        raise
    except (*_PIL_ERRORS, Image.DecompressionBombError) as exc:
        raise _refuse(source, problem(exc)) from None


def _fit(img: Any, prep: ImagePrep, source: Source, where: str) -> Any:
    Image = _pil()
    channels = prep.shape[0]
    orientation = _orientation(img) if img.format == "JPEG" else 1  # others' EXIF may need the pixels read
    plan = None
    if img.format == "JPEG":  # decode at 1/2, 1/4 or 1/8 scale where that stays at least the size needed
        width, height = img.size
        turned = orientation in (5, 6, 7, 8)
        plan = prep.plan(*((height, width) if turned else (width, height)))
        size = plan[0]
        img.draft("L" if channels == 1 else img.mode, (size[1], size[0]) if turned else size)
    if img.size[0] * img.size[1] > MAX_DECODED_PIXELS:
        raise _refuse(source, _too_many(*img.size), where)
    img.load()
    img = _upright(img, orientation if img.format == "JPEG" else _orientation(img))
    size, box = plan or prep.plan(*img.size)
    img = convert_mode(img, channels)
    if img.size != size:
        img = img.resize(size, Image.Resampling[prep.interpolation.upper()])
    if box is None:
        return img
    if box[0] >= 0 and box[1] >= 0 and box[2] <= size[0] and box[3] <= size[1]:
        return img.crop(box)
    fill = prep.fill[0] if channels == 1 and prep.fill else tuple(prep.fill) or 0
    canvas = Image.new(img.mode, (box[2] - box[0], box[3] - box[1]), fill)  # Pillow's own crop pads black
    canvas.paste(img, (-box[0], -box[1]))
    return canvas


def convert_mode(img: Any, channels: int) -> Any:
    """``img`` as grey ("L") or "RGB": 16-bit and 32-bit integers read as 16-bit (65535 is white), floats
    as 0-255 (Pillow's own scale for "F"), a palette with transparency through RGBA, alpha dropped."""
    Image = _pil()
    mode = img.mode
    if mode.startswith("I") or mode == "F":
        scale = 1.0 if mode == "F" else 255.0 / 65535.0
        arr = np.asarray(img, dtype=np.float32) * scale
        img = Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8), "L")
    elif mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    want = "L" if channels == 1 else "RGB"
    return img if img.mode == want else img.convert(want)


@dataclass(frozen=True)
class ImageHeader:
    """What a file's header says: its mode and its size as seen (EXIF orientation applied, JPEG only)."""

    mode: str
    size: tuple[int, int]


def check_image(path: str, where: str = "") -> ImageHeader:
    """Check a file without decoding it where that suffices: the header, every chunk's checksum for PNG, a
    JPEG's end marker (a JPEG without one is decoded at 1/8 scale to see if its data is whole), the pixels
    it would decode to. ImageError names the file."""
    Image = _pil()
    try:
        with open(path, "rb") as fh, Image.open(fh) as img:
            mode, size = img.mode, img.size
            if img.format == "JPEG":
                turned = _orientation(img) in (5, 6, 7, 8)
                drafted = (-(-size[0] // DRAFT_MAX_SCALE), -(-size[1] // DRAFT_MAX_SCALE))
                if drafted[0] * drafted[1] > MAX_DECODED_PIXELS:
                    raise _refuse(path, _too_many(*drafted), where)
                fh.seek(-2, os.SEEK_END)
                if fh.read(2) != JPEG_END:  # cut short, or data after the image (a phone's motion photo)
                    fh.seek(0)
                    with Image.open(fh) as whole:
                        whole.draft(whole.mode, (1, 1))
                        whole.load()
                return ImageHeader(mode, (size[1], size[0]) if turned else size)
            if size[0] * size[1] > MAX_DECODED_PIXELS:
                raise _refuse(path, _too_many(*size), where)
            img.verify()
            return ImageHeader(mode, size)
    except ImageError:
        raise
    except (*_PIL_ERRORS, Image.DecompressionBombError) as exc:
        raise _refuse(path, problem(exc), where) from None
