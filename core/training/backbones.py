"""Pretrained backbones from timm: ``model.kind = "timm:NAME"``.

The network is timm's architecture without its classifier (``num_classes=0``: it gives features) and a new
linear head for the data's classes (one output for a regression). Built anywhere with random weights, as every
model here is: a checkpoint or an export carries the trained weights. Only a fresh run loads the pretrained
ones (:func:`start_pretrained`): from huggingface_hub's cache (``model.weights = "hub"``, downloaded once, with
``HF_HOME`` and ``HF_HUB_OFFLINE`` honoured), or from a file in timm's key layout, loaded by timm itself (its
per-architecture adaptations, a ViT's position embeddings resampled to ``data.image_size`` among them).
The images a backbone takes are timm's answer too (``timm.data.resolve_data_config``): size, mean and std,
interpolation, crop and crop mode, carried into the data's :class:`~core.readers.images.ImagePrep`.

``model.finetune = "head"`` freezes the backbone: its features are computed once and cached
(:mod:`core.training.features`) and the head trains on them; the model then takes either images (N, C, H, W)
or those features (N, D) (:meth:`BackboneNet.forward`), so every face of a trained model still takes images.
"""

from __future__ import annotations

import difflib
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core.config import Config, ModelConfig
from core.config.timm_kind import WEIGHTS_FILES, is_timm, timm_name
from core.data import ImageInput
from core.errors import DownloadCancelled, ModelError
from core.readers.images import CROP_MODES, INTERPOLATIONS, ImagePrep


class BackboneNet(nn.Module):
    """A timm backbone (images -> features) and a linear head (features -> outputs)."""

    def __init__(
        self, backbone: nn.Module, num_features: int, num_outputs: int, frozen: bool, image_shape: Sequence[int]
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.image_shape = tuple(int(s) for s in image_shape)  # (C, H, W) it was built for
        self.head = nn.Linear(num_features, num_outputs)
        self.frozen = frozen
        if frozen:
            self.backbone.requires_grad_(False)
            self.backbone.eval()  # its batch-norm statistics are the pretrained ones, and stay so

    def train(self, mode: bool = True) -> BackboneNet:
        super().train(mode)
        if self.frozen:
            self.backbone.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:  # cached features (finetune = "head")
            return self.head(x)
        return self.head(self.backbone(x))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x)


@dataclass(frozen=True)
class Preprocessing:
    """The images a backbone takes: timm's ``resolve_data_config`` of its ``pretrained_cfg``."""

    input_size: tuple[int, int, int]  # (C, H, W)
    mean: tuple[float, ...]
    std: tuple[float, ...]
    interpolation: str
    crop_pct: float
    crop_mode: str


def _timm() -> Any:
    try:
        import timm
    except ImportError:  # pragma: no cover - a dependency of the project
        raise ModelError("model: timm backbones need the timm package (pip install timm)") from None
    return timm


def _check_name(kind: str) -> str:
    timm = _timm()
    name = timm_name(kind)
    arch = name.split(".", 1)[0]
    if not timm.is_model(arch):
        close = difflib.get_close_matches(arch, timm.list_models(), n=5, cutoff=0.6)
        hint = f"; closest names timm knows: {', '.join(close)}" if close else "; see timm.list_models()"
        raise ModelError(f'model: model.kind = "{kind}": timm knows no architecture {arch!r}{hint}')
    return name


def _pretrained_cfg(name: str) -> dict[str, Any]:
    cfg = _timm().models.get_pretrained_cfg(name)
    return dict(cfg.to_dict()) if cfg is not None else {}  # none: timm's defaults (ImageNet's) apply


def _size_args(name: str, image_shape: Sequence[int]) -> dict[str, Any]:
    """``img_size`` for an architecture whose size is fixed when built (a ViT's position embeddings): timm's
    own sign of one is ``fixed_input_size`` in its pretrained config, and it then passes ``img_size`` itself."""
    if not _pretrained_cfg(name).get("fixed_input_size", False):
        return {}
    return {"img_size": (int(image_shape[1]), int(image_shape[2]))}


def create_backbone(kind: str, image_shape: Sequence[int], **extra: Any) -> nn.Module:
    """timm's architecture for images of ``image_shape`` (C, H, W), no classifier (its output: features), with
    random weights unless ``extra`` asks timm for pretrained ones."""
    name = _check_name(kind)
    try:
        args = {"pretrained": False, **_size_args(name, image_shape), **extra}
        return _timm().create_model(name, num_classes=0, **args)
    except Exception as exc:  # an unknown pretrained tag, a size the architecture cannot take
        raise ModelError(f'model: model.kind = "{kind}": timm could not build it: {_first_line(exc)}') from None


def _first_line(exc: BaseException) -> str:
    """An exception's first line, with the next when it only announces it (torch's "Error(s) in loading...:")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[0]} {lines[1]}"
    return lines[0] if lines else type(exc).__name__


def preprocessing(kind: str, image_size: int = 0) -> Preprocessing:
    """The backbone's own preprocessing (input size, mean and std, interpolation, crop and crop mode) as timm
    resolves it; ``image_size``: a square size instead of the pretrained one."""
    name = _check_name(kind)
    args: dict[str, Any] = {"input_size": (3, image_size, image_size)} if image_size else {"in_chans": 3}
    cfg = _timm().data.resolve_data_config(args=args, pretrained_cfg=_pretrained_cfg(name))
    c, h, w = (int(v) for v in cfg["input_size"])
    return Preprocessing(
        (c, h, w),
        tuple(float(v) for v in cfg["mean"]),
        tuple(float(v) for v in cfg["std"]),
        str(cfg["interpolation"]),
        float(cfg["crop_pct"]),
        str(cfg["crop_mode"]),
    )


def build_backbone_net(kind: str, frozen: bool, image_shape: Sequence[int] | None, num_outputs: int) -> BackboneNet:
    if image_shape is None or len(image_shape) != 3:
        raise ModelError(
            f'model: model.kind = "{kind}" needs images (data.source = "images:DIR", a folder of class folders)'
        )
    backbone = create_backbone(kind, image_shape)
    num_features = int(getattr(backbone, "num_features", 0))
    if num_features <= 0:
        with torch.no_grad():
            num_features = int(backbone.eval()(torch.zeros(1, *image_shape)).shape[-1])
    return BackboneNet(backbone, num_features, num_outputs, frozen=frozen, image_shape=image_shape)


# -- the pretrained weights -------------------------------------------------------------------------------------
def hub_cache() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def weights_file(cfg: ModelConfig) -> Path | None:
    """The file the pretrained weights come from (downloading it into the hub's cache once); None: random."""
    if cfg.weights == "none":
        return None
    if cfg.weights != "hub":
        path = Path(cfg.weights).expanduser()
        if not path.is_file():
            raise ModelError(f"model: model.weights: file not found: {path}")
        return path
    return hub_weights(cfg.kind)


def hub_repo(kind: str) -> str | None:
    """The Hugging Face repository timm takes the backbone's weights from (None: timm knows none)."""
    pretrained = _timm().models.get_pretrained_cfg(_check_name(kind))
    repo = getattr(pretrained, "hf_hub_id", None) if pretrained is not None else None
    return str(repo) if repo else None


def hub_weights(kind: str, tqdm_class: type | None = None) -> Path:
    """The weights' file in the hub's cache, downloaded there first if need be (``tqdm_class``: what reports
    the download's bytes, and may stop it by raising :class:`DownloadCancelled`)."""
    repo = hub_repo(kind)
    where = f'model: model.kind = "{kind}"'
    if not repo:
        raise ModelError(
            f'{where}: timm has no hub weights for it; set model.weights = "none" (random) or the path of a file'
        )
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    missing: list[str] = []
    for filename in WEIGHTS_FILES:
        try:  # a download is written aside and renamed by huggingface_hub: the cache never holds half a file
            return Path(hf_hub_download(repo_id=repo, filename=filename, tqdm_class=tqdm_class))
        except DownloadCancelled:
            raise
        except LocalEntryNotFoundError:  # (a subclass of EntryNotFoundError: first)
            continue  # this file is not cached (offline, or the hub could not be reached): try the next
        except EntryNotFoundError:
            missing.append(filename)
        except RepositoryNotFoundError:
            raise ModelError(f"{where}: the hub has no repository {repo}") from None
        except Exception as exc:  # a network failure, a refused download
            raise ModelError(
                f"{where}: could not download the weights of {repo} ({type(exc).__name__}); without internet, set "
                f"model.weights = PATH to a .safetensors file, or fill the cache {hub_cache()}"
            ) from None
    why = "HF_HUB_OFFLINE is set and" if offline else "the hub could not be reached and"
    if len(missing) == len(WEIGHTS_FILES):
        why = "the hub repository holds"
        return _no_weights(where, f"{why} none of {', '.join(WEIGHTS_FILES)} ({repo})")
    return _no_weights(where, f"{why} the cache {hub_cache()} holds no weights of {repo}")


def _no_weights(where: str, why: str) -> Path:
    raise ModelError(f"{where}: {why}; set model.weights = PATH to a .safetensors or .pth file in timm's key layout")


def weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """The names and shapes of a .safetensors or .pth/.pt/.bin file's tensors, read without their data where
    the format allows (pickled code is refused); a wrapping training checkpoint is looked into."""
    try:
        if path.suffix.lower() == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as fh:
                return {k: tuple(fh.get_slice(k).get_shape()) for k in fh.keys()}
        try:  # a zip file (torch.save's format since 1.6) maps its tensors: only the names are read
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # the older format cannot be mapped
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ModelError(
            f"model: model.weights: {path} is not a readable weights file ({type(exc).__name__})"
        ) from None
    for wrapper in ("state_dict", "model"):  # a training checkpoint that holds the state dict
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelError(f"model: model.weights: {path} is not a state dict (a mapping of names to tensors)")
    return {str(k).removeprefix("module."): tuple(v.shape) for k, v in state.items()}


def weights_digest(net: BackboneNet) -> str:
    """Names the weights the backbone holds (what its features depend on), whatever file they came from."""
    h = hashlib.sha256()
    for name, tensor in net.backbone.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:24]


def check_fits(kind: str, backbone: nn.Module, shapes: dict[str, tuple[int, ...]], path: Path) -> None:
    """The file holds every weight of the backbone and nothing else (its classifier aside): timm's own load of
    a backbone without classifier leaves a missing weight random, silently."""
    classifier = _pretrained_cfg(timm_name(kind)).get("classifier") or ()
    heads = (classifier,) if isinstance(classifier, str) else tuple(classifier)
    taken = {k for k in shapes if not any(k == h or k.startswith(h + ".") for h in heads)}
    own = backbone.state_dict()
    where = f"model: model.weights: {path}: does not fit {timm_name(kind)}"
    for k in own:
        if k not in taken:
            raise ModelError(f"{where}: it has no {k!r} (is it another architecture?)")
    extra = sorted(taken - set(own))
    if extra:
        raise ModelError(f"{where}: the file has {extra[0]!r}, the model has not")


def pretrained_backbone(kind: str, path: Path, image_shape: Sequence[int]) -> nn.Module:
    """The backbone with the file's weights, loaded by timm (``pretrained_cfg_overlay={"file": ...}``): its
    filter for the architecture adapts what the file holds to the model built (a ViT's position embeddings
    to another image size)."""
    try:
        return create_backbone(kind, image_shape, pretrained=True, pretrained_cfg_overlay={"file": str(path)})
    except ModelError as exc:  # a shape that differs, and timm's filter could not adapt
        why = str(exc).split("timm could not build it: ", 1)[-1]
        raise ModelError(f"model: model.weights: {path}: does not fit {timm_name(kind)}: {why}") from None


def image_input(cfg: Config) -> ImageInput | None:
    """How a timm backbone takes its images (its size unless ``data.image_size`` is set, its mean and std, its
    eval transform); None for every other model (the data's own size and statistics)."""
    if not is_timm(cfg.model.kind):
        return None
    pre = preprocessing(cfg.model.kind, cfg.data.image_size)
    interpolation = pre.interpolation if pre.interpolation in INTERPOLATIONS else "bicubic"
    prep = ImagePrep(
        (3, pre.input_size[1], pre.input_size[2]),
        resize="crop",
        crop_pct=pre.crop_pct,
        interpolation=interpolation,
        crop_mode=pre.crop_mode if pre.crop_mode in CROP_MODES else "center",
        fill=tuple(round(255 * v) for v in pre.mean) if pre.crop_mode == "border" else (),
    )
    return ImageInput(prep, pre.mean, pre.std, f'model.kind = "{cfg.model.kind}"')


def start_pretrained(cfg: ModelConfig, nets: Sequence[nn.Module]) -> None:
    """Load the pretrained weights (read once, by timm) into each of ``nets``, models of a fresh run."""
    path = weights_file(cfg)
    if path is None or not nets:
        return
    first = nets[0]
    assert isinstance(first, BackboneNet)
    check_fits(cfg.kind, first.backbone, weight_shapes(path), path)  # a bad file said before timm tries it
    state = pretrained_backbone(cfg.kind, path, first.image_shape).state_dict()
    with torch.no_grad():
        for net in nets:
            assert isinstance(net, BackboneNet)
            net.backbone.load_state_dict(state, strict=True)


def frozen_backbone(cfg: ModelConfig) -> bool:
    """Only the head trains, on the backbone's cached features."""
    return is_timm(cfg.kind) and cfg.finetune == "head"
