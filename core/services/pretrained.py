"""Pretrained backbones for a face to offer: a short list of suggested ones, whether their weights are here, and
their download into huggingface_hub's cache with progress and a cancel.

The list is a table measured once from timm (a test checks it against timm), so offering it imports neither timm
nor torch (the kinds' names are :mod:`core.config.timm_kind`'s: the window offers them at its start); whether the
weights are here is a look into the hub's cache (``HF_HOME``, ``HF_HUB_CACHE``). Any other ``timm:NAME`` asks timm
(:mod:`core.training.backbones`). A download goes through the engine's own path (the same
files, the same one-line errors), with a progress reporter that says the bytes and the rate and stops it on cancel;
huggingface_hub writes a download aside and renames it, and what a cancelled one left aside is removed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.config import ModelConfig
from core.config.timm_kind import PREFIX, WEIGHTS_FILES, is_timm, timm_name
from core.errors import DownloadCancelled

REPORT_EVERY_S = 0.1  # progress said at most ten times a second: a GUI redraws once per report


@dataclass(frozen=True)
class Backbone:
    """A suggested backbone: timm's name, what it is, its size (without a classifier) and its input."""

    name: str  # timm's, with the pretrained tag
    title: str
    params: int  # the backbone's parameters, its ImageNet classifier left out (what a run keeps)
    input_size: tuple[int, int, int]  # (C, H, W) of timm's pretrained configuration
    repo: str  # the Hugging Face repository of its weights

    @property
    def kind(self) -> str:
        return PREFIX + self.name

    def describe(self) -> str:
        return f"{self.title} · {params_text(self.params)} · {self.input_size[1]}px"


# measured with timm 1.0 (create_model(name, num_classes=0), get_pretrained_cfg); tests/core/services/test_pretrained.py
# checks every entry against the installed timm
SUGGESTED: tuple[Backbone, ...] = (
    Backbone("resnet18.a1_in1k", "ResNet-18", 11_176_512, (3, 224, 224), "timm/resnet18.a1_in1k"),
    Backbone("resnet50.a1_in1k", "ResNet-50", 23_508_032, (3, 224, 224), "timm/resnet50.a1_in1k"),
    Backbone(
        "efficientnet_lite0.ra_in1k", "EfficientNet-Lite0", 3_371_008, (3, 224, 224), "timm/efficientnet_lite0.ra_in1k"
    ),
    Backbone(
        "mobilenetv3_small_100.lamb_in1k",
        "MobileNetV3-S",
        1_517_856,
        (3, 224, 224),
        "timm/mobilenetv3_small_100.lamb_in1k",
    ),
    Backbone("convnext_atto.d2_in1k", "ConvNeXt-Atto", 3_374_520, (3, 224, 224), "timm/convnext_atto.d2_in1k"),
    Backbone(
        "vit_tiny_patch16_224.augreg_in21k_ft_in1k",
        "ViT-Tiny/16",
        5_524_416,
        (3, 224, 224),
        "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k",
    ),
)


def params_text(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def suggested(name: str) -> Backbone | None:
    """The suggested backbone of this timm name (or kind), if it is one."""
    name = timm_name(name) if is_timm(name) else name
    return next((b for b in SUGGESTED if b.name == name), None)


def _repo(kind: str) -> str | None:
    known = suggested(kind)
    if known is not None:
        return known.repo
    from core.training.backbones import hub_repo  # asks timm (and torch): only for a name not suggested

    return hub_repo(kind)


def cached_weights(kind: str) -> Path | None:
    """The backbone's weights file in the hub's cache, if they are there (nothing is downloaded)."""
    repo = _repo(kind)
    if repo is None:
        return None
    from huggingface_hub import try_to_load_from_cache

    for filename in WEIGHTS_FILES:
        found = try_to_load_from_cache(repo, filename)
        if isinstance(found, str):  # (a cached "not on the hub" is a sentinel object, not a path)
            return Path(found)
    return None


def needs_download(model: ModelConfig) -> bool:
    """A run of this model would download its weights first: a timm backbone whose hub weights are not cached.
    (A name timm does not know, or one without hub weights, needs none: the run says what is wrong.)"""
    if not is_timm(model.kind) or model.weights != "hub":
        return False
    try:
        return _repo(model.kind) is not None and cached_weights(model.kind) is None
    except Exception:  # an unknown architecture: the run's own error says so
        return False


@dataclass(frozen=True)
class Progress:
    """A download so far: bytes done, bytes in all (0 when not known yet), bytes a second."""

    done: int
    total: int
    rate: float

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 0.0

    def describe(self) -> str:
        of = f" of {_size(self.total)}" if self.total else ""
        return f"{_size(self.done)}{of} · {_size(self.rate)}/s"


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 1e3:.0f} kB"


class _Reporter:
    """What a download's progress class reports to, and asks whether to go on (one per download)."""

    def __init__(self, progress: Callable[[Progress], None] | None, cancel: Callable[[], bool] | None) -> None:
        self.progress, self.cancel = progress, cancel
        self.done = self.total = 0
        self.t0 = time.monotonic()
        self.last = 0.0
        self.closed = False

    def check(self) -> None:
        if self.cancel is not None and self.cancel():
            raise DownloadCancelled("download cancelled")

    def add(self, n: int, total: int | None, final: bool = False) -> None:
        self.done += n
        self.total = int(total or 0)
        now = time.monotonic()
        if self.progress is not None and (final or now - self.last >= REPORT_EVERY_S):
            self.last = now
            rate = self.done / max(now - self.t0, 1e-6)
            self.progress(Progress(self.done, max(self.total, self.done if final else 0), rate))
        if not final:
            self.check()


def _progress_class(reporter: _Reporter) -> type:
    """A tqdm class for huggingface_hub that draws nothing: it hands the bytes to ``reporter``, and raises
    DownloadCancelled from inside the transfer once cancel says so."""
    from tqdm import tqdm

    class Reporting(tqdm):
        monitor_interval = 0  # no tqdm monitor thread: nothing is drawn

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            kwargs.pop("name", None)
            super().__init__(*args, **kwargs)
            reporter.check()

        def update(self, n: float | None = 1) -> bool | None:
            reporter.add(int(n or 0), self.total)
            return None

        def update_transfer(self, n: int) -> None:  # bytes also counted by update(): only the cancel matters
            reporter.check()

        def close(self) -> None:
            if reporter.done and not reporter.closed:  # (tqdm closes again when it is collected)
                reporter.closed = True
                reporter.add(0, self.total, final=True)
            super().close()

    return Reporting


_ONE_DOWNLOAD = threading.Lock()


@contextmanager
def _plain_http() -> Iterator[None]:
    """hf_xet swallows an exception raised by a progress callback (it logs "Python exception updating
    progress" and goes on), so a download through it cannot be cancelled: this one goes by plain HTTP."""
    from huggingface_hub import constants

    with _ONE_DOWNLOAD:
        before = constants.HF_HUB_DISABLE_XET
        constants.HF_HUB_DISABLE_XET = True
        try:
            yield
        finally:
            constants.HF_HUB_DISABLE_XET = before


def _partial_files(repo: str) -> set[Path]:
    from huggingface_hub import constants

    folder = Path(constants.HF_HUB_CACHE) / f"models--{repo.replace('/', '--')}" / "blobs"
    return set(folder.glob("*.incomplete")) if folder.is_dir() else set()


def download(
    kind: str, progress: Callable[[Progress], None] | None = None, cancel: Callable[[], bool] | None = None
) -> Path:
    """Bring the backbone's hub weights into the cache (at once when they are there) and return their file.

    ``progress`` is called from this thread, at most every 0.1 s and once at the end; ``cancel`` is polled with
    every chunk, and True stops the download (:class:`DownloadCancelled`) with nothing of it left in the cache.
    Every other failure is the engine's one line (:class:`core.errors.ModelError`)."""
    cached = cached_weights(kind) if _repo(kind) else None
    if cached is not None:
        return cached
    reporter = _Reporter(progress, cancel)
    reporter.check()
    repo = _repo(kind) or ""
    before = _partial_files(repo)
    from core.training.backbones import hub_weights

    try:
        with _plain_http():
            return hub_weights(kind, _progress_class(reporter))
    except DownloadCancelled:
        for path in _partial_files(repo) - before:  # what huggingface_hub left aside, should it keep any
            path.unlink(missing_ok=True)
        raise


__all__ = ["SUGGESTED", "Backbone", "DownloadCancelled", "Progress", "cached_weights", "download", "needs_download"]
