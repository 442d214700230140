"""What ``model.kind = "timm:NAME"`` names: a timm backbone, and the files its weights come in on the Hugging Face
hub.

Plain strings, no torch nor timm: the config's check and the window's suggested backbones (their cached marks at
start) read them; building the backbone and fetching its weights is :mod:`core.training.backbones`'s.
"""

from __future__ import annotations

PREFIX = "timm:"
WEIGHTS_FILES = ("model.safetensors", "pytorch_model.bin")  # what timm's hub repositories hold, in its order


def is_timm(kind: str) -> bool:
    return kind.startswith(PREFIX)


def timm_name(kind: str) -> str:
    return kind[len(PREFIX) :]
