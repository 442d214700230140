"""Model builders: linear, mlp, cnn, custom:PATH.py:FUNCTION and timm:NAME (core.training.backbones).

A model is rebuilt anywhere from ``(ModelConfig, input_shape, num_classes,
image_shape)``, which the checkpoint and exports carry.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from core.config import ModelConfig
from core.config.timm_kind import is_timm
from core.errors import ModelError
from core.training.backbones import build_backbone_net

if TYPE_CHECKING:
    from core.data import DatasetInfo

IMAGE_ONLY_KINDS = ("cnn",)  # built-in kinds whose samples must be images (channels, height, width)


def image_shaped(input_shape: Sequence[int], image_shape: Sequence[int] | None = None) -> bool:
    """Whether samples of this shape are images: what a cnn needs (digits are flat samples of an image shape)."""
    return len(tuple(image_shape) if image_shape else tuple(input_shape)) == 3


def takes_samples(kind: str, input_shape: Sequence[int], image_shape: Sequence[int] | None = None) -> bool:
    """Whether a model of this kind can take such samples (a custom one is only known once built)."""
    return kind not in IMAGE_ONLY_KINDS or image_shaped(input_shape, image_shape)


_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "tanh": nn.Tanh,
    "silu": nn.SiLU,
}


def _mlp(n_in: int, hidden: Sequence[int], n_out: int, activation: str, dropout: float) -> list[nn.Module]:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(n_in, width), _ACTIVATIONS[activation]()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        n_in = width
    layers.append(nn.Linear(n_in, n_out))
    return layers


class TabularNet(nn.Module):
    """A table's model: one embedding per category feature (fastai's sizes), a bag of n-gram embeddings per
    free-text column, concatenated with the numbers.

    Input: the encoded row of :mod:`core.schema`, float32: numeric features first (dates' parts among them),
    then each text column's n-gram buckets and their weights (``texts``: slots per column), then one
    category index per category column (0 missing, 1 unseen, 2.. levels) as a float holding an integer. A
    text column becomes the weighted sum of its buckets' embeddings: a linear map of its hashed n-grams.
    """

    def __init__(
        self, n_numeric: int, cardinalities: Sequence[int], head: Sequence[nn.Module], texts: Sequence[int] = ()
    ) -> None:
        super().__init__()
        from core.schema import embedding_size
        from core.schema.text import BUCKETS, TEXT_DIM

        self.n_numeric = n_numeric
        self.texts = tuple(int(k) for k in texts)
        self.embeddings = nn.ModuleList(nn.Embedding(int(c), embedding_size(int(c))) for c in cardinalities)
        self.text_bags = nn.ModuleList(nn.Embedding(BUCKETS, TEXT_DIM) for _ in self.texts)
        for bag in self.text_bags:  # a text of unit-length weights starts near zero, as a linear layer does
            nn.init.normal_(cast(nn.Embedding, bag).weight, std=0.1)
        self.head = nn.Sequential(*head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1)
        parts = [x[:, : self.n_numeric]]
        at = self.n_numeric
        for k, bag in zip(self.texts, cast(Sequence[nn.Embedding], self.text_bags)):
            ids = x[:, at : at + k].round().long().clamp(0, bag.num_embeddings - 1)
            weights = x[:, at + k : at + 2 * k]
            parts.append((bag(ids) * weights.unsqueeze(-1)).sum(dim=1))
            at += 2 * k
        codes = x[:, at:].round().long()
        embeddings = cast(Sequence[nn.Embedding], self.embeddings)  # a ModuleList's items are typed as any Module
        parts += [emb(codes[:, i].clamp(0, emb.num_embeddings - 1)) for i, emb in enumerate(embeddings)]
        return self.head(torch.cat(parts, dim=1))


def tabular_width(n_features: int, cardinalities: Sequence[int], texts: Sequence[int] = ()) -> tuple[int, int]:
    """(numeric features, width after the embeddings) of an encoded row."""
    from core.schema import embedding_size
    from core.schema.text import TEXT_DIM

    n_numeric = n_features - len(cardinalities) - 2 * sum(int(k) for k in texts)
    return n_numeric, n_numeric + TEXT_DIM * len(texts) + sum(embedding_size(int(c)) for c in cardinalities)


def _cnn(cfg: ModelConfig, image_shape: Sequence[int], num_classes: int) -> list[nn.Module]:
    c, h, w = image_shape
    layers: list[nn.Module] = []
    size = min(h, w)
    for width in cfg.channels:
        layers += [nn.Conv2d(c, width, 3, padding=1), _ACTIVATIONS[cfg.activation]()]
        if size >= 8:  # keep at least 4x4 maps: digits (8x8) pools once
            layers.append(nn.MaxPool2d(2))
            size //= 2
        c = width
    pooled = min(4, size)
    layers += [nn.AdaptiveAvgPool2d(pooled), nn.Flatten()]
    layers += _mlp(c * pooled * pooled, cfg.hidden[:1], num_classes, cfg.activation, cfg.dropout)
    return layers


def _one_line(exc: BaseException, limit: int = 200) -> str:
    """An exception's message as one line (the first non-empty one), cut to ``limit``."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _user_line(exc: BaseException, path: Path) -> str:
    """`` (line N)`` of the deepest traceback frame in the user's file, or ``""``."""
    try:
        target = path.resolve()
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == target]
    except (OSError, ValueError):
        return ""
    return f" (line {frames[-1].lineno})" if frames else ""


def load_custom_factory(kind: str) -> Callable[..., Any]:
    """Import FUNCTION from PATH.py for ``custom:PATH.py:FUNCTION``."""
    path_text, _, func = kind[len("custom:") :].rpartition(":")
    path = Path(path_text).expanduser()
    where = f"model: {kind}"
    if not path.is_file():
        raise ModelError(f"{where}: file not found: {path}")
    mod_name = f"traindesk_custom_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{where}: cannot import {path}: a custom model must be a Python file ending in .py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        msg = " ".join((exc.msg or "invalid syntax").split())
        line = f" line {exc.lineno}" if exc.lineno else ""
        raise ModelError(f"{where}: syntax error in {path}{line}: {msg}") from None
    except (Exception, SystemExit) as exc:  # SystemExit: a file that calls sys.exit() or exit()
        raise ModelError(
            f"{where}: importing {path} raised {type(exc).__name__}: {_one_line(exc)}{_user_line(exc, path)}"
        ) from None
    sys.modules.setdefault(mod_name, module)
    factory = getattr(module, func, None)
    if not callable(factory):
        raise ModelError(f"{where}: {path} has no function {func!r}")
    return factory


def build_model(
    cfg: ModelConfig,
    input_shape: Sequence[int],
    num_classes: int,
    image_shape: Sequence[int] | None = None,
    categories: Sequence[int] = (),
    texts: Sequence[int] = (),
) -> nn.Module:
    """Build the configured model for samples of ``input_shape`` and ``num_classes`` outputs.

    ``categories``: a table's category features (their number of levels), the last ``len(categories)``
    features of a sample; linear and mlp learn an embedding for each (regression: ``num_classes`` 1).
    ``texts``: a table's free-text columns (their n-gram slots), before the categories.
    """
    n_in = int(math.prod(input_shape))
    if (categories or texts) and cfg.kind in ("linear", "mlp"):
        n_numeric, width = tabular_width(n_in, categories, texts)
        head: list[nn.Module] = (
            [nn.Linear(width, num_classes)]
            if cfg.kind == "linear"
            else _mlp(width, cfg.hidden, num_classes, cfg.activation, cfg.dropout)
        )
        return TabularNet(n_numeric, categories, head, texts)
    if cfg.kind == "linear":
        return nn.Sequential(nn.Flatten(), nn.Linear(n_in, num_classes))
    if cfg.kind == "mlp":
        return nn.Sequential(nn.Flatten(), *_mlp(n_in, cfg.hidden, num_classes, cfg.activation, cfg.dropout))
    if cfg.kind == "cnn":
        shape = tuple(image_shape) if image_shape else tuple(input_shape)
        if not takes_samples(cfg.kind, input_shape, image_shape):
            raise ModelError(
                'model: model.kind = "cnn" needs image-shaped data (digits, an image folder or '
                f"an npz of images); this data has {n_in} plain features"
            )
        layers = _cnn(cfg, shape, num_classes)
        if tuple(input_shape) != shape:  # flat samples (digits): restore the image shape first
            layers.insert(0, nn.Unflatten(1, shape))
        return nn.Sequential(*layers)
    if is_timm(cfg.kind):
        images = image_shape or (tuple(input_shape) if len(input_shape) == 3 else None)
        return build_backbone_net(cfg.kind, cfg.finetune == "head", images, num_classes)
    return _build_custom(cfg.kind, input_shape, num_classes)


def build_model_for(cfg: ModelConfig, info: DatasetInfo) -> nn.Module:
    """The configured model for a data set as loaded or described: its sample shape, outputs and a table's
    category features (their embeddings are parameters too). The one call a run and a count both make."""
    return build_model(cfg, info.input_shape, info.num_classes, info.image_shape, info.categories, info.texts)


def _build_custom(kind: str, input_shape: Sequence[int], num_classes: int) -> nn.Module:
    factory = load_custom_factory(kind)
    where = f"model: {kind}"
    path = Path(kind[len("custom:") :].rpartition(":")[0]).expanduser()
    try:
        model = factory(tuple(input_shape), num_classes)
    except (Exception, SystemExit) as exc:
        raise ModelError(
            f"{where}: calling it raised {type(exc).__name__}: {_one_line(exc)}{_user_line(exc, path)}"
        ) from None
    if not isinstance(model, nn.Module):
        raise ModelError(f"{where}: must return a torch.nn.Module, returned {type(model).__name__}")
    if not any(p.requires_grad for p in model.parameters()):
        raise ModelError(f"{where}: the model has no trainable parameters")
    check_output(model, input_shape, num_classes, where)
    return model


def check_output(model: nn.Module, input_shape: Sequence[int], num_classes: int, where: str) -> None:
    """Run a batch of 2 zeros through the model and check the output is (2, num_classes)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(torch.zeros(2, *input_shape))
    except (Exception, SystemExit) as exc:
        raise ModelError(
            f"{where}: forward pass on input shape {tuple(input_shape)} failed: {type(exc).__name__}: {_one_line(exc)}"
        ) from None
    finally:
        model.train(was_training)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, num_classes):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ModelError(
            f"{where}: output must have shape (batch, {num_classes}) for {num_classes} classes, got {shape}"
        )


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
