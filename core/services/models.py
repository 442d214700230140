"""What a face asks about a model before a run: can a kind take the data, how many parameters would a run build,
what augmentation makes of sample images."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from core.config import AugmentConfig, ModelConfig
    from core.data import DatasetInfo

__all__ = ["augment_preview", "parameter_count", "takes_samples"]


def takes_samples(kind: str, input_shape: Sequence[int], image_shape: Sequence[int] | None = None) -> bool:
    """A model of ``kind`` can take samples of this shape (a cnn needs images; a table needs a flat model)."""
    from core.training.models import takes_samples as takes

    return takes(kind, input_shape, image_shape)


def parameter_count(cfg: ModelConfig, info: DatasetInfo) -> int:
    """The parameters of the model a run of ``cfg`` builds for this data (a table's embeddings too)."""
    from core.training.models import build_model_for, count_parameters

    return count_parameters(build_model_for(cfg, info))


def augment_preview(cfg: AugmentConfig, images: Sequence[np.ndarray], copies: int = 6, seed: int = 0) -> Any:
    """For each sample image: the image, then ``copies`` augmented versions (uint8)."""
    from core.training.augment import preview_grid

    return preview_grid(cfg, images, copies, seed)
