"""Pretrained backbones from timm: ``model.kind = "timm:NAME"``.

The network is timm's architecture without its classifier (``num_classes=0``: it gives features) and a new
linear head for the data's classes (one output for a regression). Built anywhere with random weights, as every
model here is: a checkpoint or an export carries the trained weights. Only a fresh run loads the pretrained
ones (:func:`load_pretrained`): from huggingface_hub's cache (``model.weights = "hub"``, downloaded once, with
``HF_HOME`` and ``HF_HUB_OFFLINE`` honoured), or from a file in timm's key layout.

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
from core.readers.images import INTERPOLATIONS, ImagePrep


class BackboneNet(nn.Module):
    """A timm backbone (images -> features) and a linear head (features -> outputs)."""

    def __init__(self, backbone: nn.Module, num_features: int, num_outputs: int, frozen: bool) -> None:
        super().__init__()
        self.backbone = backbone
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
    """What a backbone was pretrained on: the images it takes (timm's ``pretrained_cfg``)."""

    input_size: tuple[int, int, int]  # (C, H, W)
    mean: tuple[float, ...]
    std: tuple[float, ...]
    interpolation: str
    crop_pct: float


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


def create_backbone(kind: str) -> nn.Module:
    """timm's architecture with random weights and no classifier (its output: features)."""
    name = _check_name(kind)
    try:
        return _timm().create_model(name, pretrained=False, num_classes=0)
    except Exception as exc:  # an unknown pretrained tag, an architecture that needs arguments
        raise ModelError(f'model: model.kind = "{kind}": timm could not build it: {exc}') from None


def preprocessing(kind: str) -> Preprocessing:
    """The backbone's own preprocessing (input size, mean and std, interpolation, crop)."""
    name = _check_name(kind)
    cfg = _timm().models.get_pretrained_cfg(name)
    if cfg is None:  # an architecture without a pretrained configuration: ImageNet's usual one
        return Preprocessing((3, 224, 224), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), "bicubic", 0.875)
    c, h, w = (int(v) for v in cfg.input_size)
    return Preprocessing((c, h, w), tuple(cfg.mean), tuple(cfg.std), str(cfg.interpolation), float(cfg.crop_pct))


def build_backbone_net(kind: str, frozen: bool, image_shape: Sequence[int] | None, num_outputs: int) -> BackboneNet:
    if image_shape is None or len(image_shape) != 3:
        raise ModelError(
            f'model: model.kind = "{kind}" needs images (data.source = "images:DIR", a folder of class folders)'
        )
    backbone = create_backbone(kind)
    num_features = int(getattr(backbone, "num_features", 0))
    if num_features <= 0:
        with torch.no_grad():
            num_features = int(backbone.eval()(torch.zeros(1, *image_shape)).shape[-1])
    return BackboneNet(backbone, num_features, num_outputs, frozen=frozen)


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


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from a .safetensors file or a .pth/.pt/.bin file (tensors only: pickled code is refused)."""
    try:
        if path.suffix.lower() == ".safetensors":
            from safetensors.torch import load_file

            return dict(load_file(str(path)))
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
    return state


def weights_digest(net: BackboneNet) -> str:
    """Names the weights the backbone holds (what its features depend on), whatever file they came from."""
    h = hashlib.sha256()
    for name, tensor in net.backbone.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:24]


def load_pretrained(net: BackboneNet, kind: str, state: dict[str, torch.Tensor], path: Path) -> None:
    """Put pretrained weights (timm's key layout, classifier included or not) into the backbone."""
    pretrained = _timm().models.get_pretrained_cfg(timm_name(kind))
    classifier = getattr(pretrained, "classifier", None) or ()
    heads = (classifier,) if isinstance(classifier, str) else tuple(classifier)
    own = net.backbone.state_dict()
    taken = {k: v for k, v in state.items() if not any(k == h or k.startswith(h + ".") for h in heads)}
    where = f"model: model.weights: {path}"
    for k, v in own.items():
        if k not in taken:
            raise ModelError(f"{where}: does not fit {timm_name(kind)}: it has no {k!r} (is it another architecture?)")
        if tuple(taken[k].shape) != tuple(v.shape):
            raise ModelError(
                f"{where}: does not fit {timm_name(kind)}: {k!r} is {tuple(taken[k].shape)} in the file, "
                f"{tuple(v.shape)} in the model"
            )
    extra = sorted(set(taken) - set(own))
    if extra:
        raise ModelError(f"{where}: does not fit {timm_name(kind)}: the file has {extra[0]!r}, the model has not")
    with torch.no_grad():
        net.backbone.load_state_dict(taken, strict=True)


def image_input(cfg: Config) -> ImageInput | None:
    """How a timm backbone takes its images (its size unless ``data.image_size`` is set, its mean and std);
    None for every other model (the data's own size and statistics)."""
    if not is_timm(cfg.model.kind):
        return None
    pre = preprocessing(cfg.model.kind)
    _, h, w = pre.input_size
    if cfg.data.image_size:
        h = w = cfg.data.image_size
    interpolation = pre.interpolation if pre.interpolation in INTERPOLATIONS else "bicubic"
    prep = ImagePrep((3, h, w), resize="crop", crop_pct=pre.crop_pct, interpolation=interpolation)
    return ImageInput(prep, pre.mean, pre.std, f'model.kind = "{cfg.model.kind}"')


def start_pretrained(cfg: ModelConfig, nets: Sequence[nn.Module]) -> None:
    """Load the pretrained weights (read once) into each of ``nets``, models of a fresh run."""
    path = weights_file(cfg)
    if path is None:
        return
    state = read_weights(path)
    for net in nets:
        assert isinstance(net, BackboneNet)
        load_pretrained(net, cfg.kind, state, path)


def frozen_backbone(cfg: ModelConfig) -> bool:
    """Only the head trains, on the backbone's cached features."""
    return is_timm(cfg.kind) and cfg.finetune == "head"
