"""A Hugging Face cache as huggingface_hub lays it out, made by tests (no network)."""

from __future__ import annotations

from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cache_weights(cache: Path, repo: str, data: bytes = b"weights") -> Path:
    """``repo``'s model.safetensors in the cache folder ``cache`` (HF_HUB_CACHE), laid out as huggingface_hub
    writes it: a snapshot named by its commit, and refs/main naming that commit."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").write_bytes(data)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(COMMIT)
    return snapshot / "model.safetensors"
