"""A pretrained sentence encoder's embedding of a text column (``model.text_encoder``), computed once per text.

``model.text_encoder`` names a sentence-transformers model: a folder it was saved to
(``SentenceTransformer.save``), or a hub name read through huggingface_hub's cache (``HF_HOME`` and
``HF_HUB_OFFLINE`` honoured; downloaded once). The encoder is frozen: a text's block of the encoded row is
its embedding as sentence-transformers gives it (normalised when the model ends in a ``Normalize`` module), a
missing text all zeros.

A run's fine-tuned encoder (``model.finetune = "full"``) is part of its model: the schema names it relative
to the folder that holds the model (``"relative": true``, the name ``text-encoder``: the run directory, or an
export's folder), and :func:`located` names it by its folder wherever that model is read from, so a run or an
export moved or copied elsewhere embeds its texts as before.

Its fingerprint names the weights: the hub revision (a hub name is read at that revision wherever the model
is used) or, for a folder, the sha256 of its weights and configuration files; a folder whose files changed
since training is refused. Each distinct text is encoded once: embeddings are kept on disk under
``$XDG_CACHE_HOME/traindesk/text-embeddings/<fingerprint>/`` (``~/.cache`` by default), keyed by the sha256
of the text, so training, ``traindesk predict`` and ``traindesk serve`` (each of their processes) share
them. Each update is a new chunk (``<digest>.npz``: the texts' digests and their embeddings) written aside
and renamed: processes add chunks at the same time without a lock, and a reader never sees half a chunk.
The texts not yet cached are encoded in batches on torch's intra-op threads (every core by default).

sentence-transformers (and torch) are imported only when a text is encoded or an encoder described: the
schema stays torch-free at import.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import ModelError

PRE_STEP = "sentence_transformers.SentenceTransformer(encoder).encode(texts)"
BATCH = 64  # texts per forward pass
# what a sentence-transformers folder's fingerprint covers: its weights and everything that shapes the embedding
FINGERPRINT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".json", ".txt", ".model")
HUB_SKIP = ["onnx/*", "openvino/*", "*.onnx", "*.h5", "*.msgpack", "*.ot", "tf_model*", "flax_model*", "rust_model*"]


@dataclass
class _Loaded:
    model: Any
    fingerprint: str
    dim: int
    cached: dict[bytes, np.ndarray] = field(default_factory=dict)  # text digest -> embedding (float32)
    chunks: set[str] = field(default_factory=set)  # the cache's chunk files already read


_loaded: dict[str, _Loaded] = {}  # (name as given, fingerprint) -> the encoder, once per process
_lock = threading.Lock()


def located(schema: dict[str, Any] | None, base: Path) -> dict[str, Any] | None:
    """``schema`` with each encoder named relative to its model named by its folder under ``base`` (the folder
    that holds the model: the run directory, or an export's folder); a missing folder is a one-line error."""
    if not schema:
        return schema
    columns = []
    for column in schema.get("columns", []):
        encoder = column.get("encoder")
        if isinstance(encoder, dict) and encoder.get("relative"):
            folder = Path(base) / str(encoder.get("name", ""))  # an absolute name (located already) stays
            if not folder.is_dir():
                raise ModelError(
                    f"model: its fine-tuned text encoder {folder} is missing (the model's texts are embedded by "
                    f"it); keep the {folder.name}/ folder beside the model when moving or copying it, or train again"
                )
            column = {**column, "encoder": {**encoder, "name": str(folder.resolve())}}
        columns.append(column)
    return {**schema, "columns": columns}


def _where(name: str) -> str:
    return f'model: model.text_encoder = "{name}"'


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "traindesk" / "text-embeddings"


def folder_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in FINGERPRINT_SUFFIXES):
        h.update(str(path.relative_to(folder)).encode() + b"\0")
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()


def _local_folder(name: str) -> Path | None:
    """The folder ``name`` names, or None for a hub name (a path that is not there is an error)."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.is_absolute() or name.startswith((".", "~")) or name.count("/") > 1 or path.exists():
        raise ModelError(f"{_where(name)}: no such folder")
    return None


def _hub_folder(name: str, revision: str | None) -> tuple[Path, str]:
    """The hub model's snapshot in huggingface_hub's cache (downloaded there first if need be) and its
    revision."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    offline = constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:
        folder = Path(snapshot_download(repo_id=name, revision=revision, ignore_patterns=HUB_SKIP))
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set and" if offline else "the hub could not be reached and"
        raise ModelError(
            f"{_where(name)}: {why} the cache {constants.HF_HUB_CACHE} holds no "
            + (f"revision {revision} of it" if revision else "copy of it")
            + "; set HF_HUB_OFFLINE=0 to download it, or model.text_encoder = the folder of a saved encoder"
        ) from None
    except RepositoryNotFoundError:
        raise ModelError(f"{_where(name)}: the hub has no repository {name}") from None
    except Exception as exc:  # a malformed name, a network failure, a refused download
        raise ModelError(
            f"{_where(name)}: could not get it from the hub ({type(exc).__name__}: {str(exc).splitlines()[0]})"
        ) from None
    return folder, "hub:" + folder.name  # a snapshot's folder is named by its commit


def _load(name: str, fingerprint: str = "") -> _Loaded:
    """The encoder ``name`` names, loaded once per process; ``fingerprint``: the one it was trained with."""
    key = f"{name}\0{fingerprint}"
    with _lock:
        if key in _loaded:
            return _loaded[key]
        local = _local_folder(name)
        if local is None:
            revision = fingerprint[4:] if fingerprint.startswith("hub:") else None
            folder, found = _hub_folder(name, revision)
        else:
            folder, found = local, ""
        if not (folder / "modules.json").is_file():
            raise ModelError(
                f"{_where(name)}: {folder} is not a sentence encoder (no modules.json); give a model saved by "
                "sentence-transformers (SentenceTransformer.save) or its hub name"
            )
        if local is not None:
            found = folder_digest(folder)
        if fingerprint and found != fingerprint:
            raise ModelError(
                f"{_where(name)}: its files changed since the model was trained ({found[:19]}, trained with "
                f"{fingerprint[:19]}); give the encoder it was trained with"
            )
        model, dim = _sentence_transformer(name, folder)
        loaded = _Loaded(model, found, dim)
        _loaded[key] = _loaded[f"{name}\0{found}"] = loaded
        return loaded


def _sentence_transformer(name: str, folder: Path) -> tuple[Any, int]:
    import logging

    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)  # its load notes are not the run's log
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0][:200]
        raise ModelError(
            f"{_where(name)}: {folder} is not a sentence encoder sentence-transformers can load "
            f"({type(exc).__name__}: {first})"
        ) from None
    dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dim = dimension()
    if not dim:
        raise ModelError(f"{_where(name)}: {folder} gives no sentence embedding of a fixed size")
    model.eval()
    return model, int(dim)


def fresh_encoder(name: str) -> tuple[Any, int]:
    """A copy of the encoder ``name`` names of its own (to fine-tune: the shared one embeds texts), and its
    embedding size."""
    local = _local_folder(name)
    folder = local if local is not None else _hub_folder(name, None)[0]
    if not (folder / "modules.json").is_file():
        raise ModelError(f"{_where(name)}: {folder} is not a sentence encoder (no modules.json)")
    return _sentence_transformer(name, folder)


def describe(name: str) -> tuple[str, int]:
    """(fingerprint, embedding size) of the encoder ``name`` names; loads it (a one-line error when it cannot)."""
    loaded = _load(name)
    return loaded.fingerprint, loaded.dim


def describe_pre_step(name: str, fingerprint: str, dim: int) -> dict[str, Any]:
    """What an encoded text column's input to an exported graph is, for ``model.json``."""
    return {
        "width": dim,
        "pre_step": PRE_STEP,
        "encoder": name,
        "fingerprint": fingerprint,
        "layout": f"the encoder's {dim}-number sentence embedding, as sentence-transformers gives it; a missing "
        "text is all zeros",
    }


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def _read_new_chunks(loaded: _Loaded, folder: Path) -> None:
    try:
        names = sorted(p.name for p in folder.glob("*.npz"))
    except OSError:
        return
    for name in names:
        if name in loaded.chunks:
            continue
        try:
            with np.load(folder / name) as chunk:
                keys, vectors = chunk["keys"], chunk["vectors"]
        except (OSError, ValueError, KeyError):
            continue  # not a chunk this writes: left alone
        if vectors.ndim == 2 and vectors.shape[1] == loaded.dim and len(keys) == len(vectors):
            for k, v in zip(keys, vectors.astype(np.float32)):
                loaded.cached[k.tobytes()] = v
        loaded.chunks.add(name)


def _write_chunk(loaded: _Loaded, folder: Path, keys: list[bytes], vectors: np.ndarray) -> None:
    h = hashlib.sha256(b"".join(keys))
    name = h.hexdigest()[:32] + ".npz"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        aside = folder / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        with aside.open("wb") as fh:
            np.savez(fh, keys=np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32), vectors=vectors)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(aside, folder / name)
        loaded.chunks.add(name)
    except OSError:
        pass  # a cache that cannot be written is only slower: the embeddings are computed each time


def _cache_folder(fingerprint: str) -> Path:
    return cache_root() / hashlib.sha256(fingerprint.encode()).hexdigest()[:32]


def embed_texts(name: str, fingerprint: str, texts: list[str]) -> np.ndarray:
    """The embeddings (float32, (len(texts), dim)) of ``texts``, each distinct text encoded at most once (here
    and in every process sharing the cache)."""
    loaded = _load(name, fingerprint)
    keys = [_digest(t) for t in texts]
    out = np.zeros((len(texts), loaded.dim), dtype=np.float32)
    folder = _cache_folder(loaded.fingerprint)
    with _lock:  # one thread of a process encodes; the others wait for its embeddings
        if any(k not in loaded.cached for k in keys):
            _read_new_chunks(loaded, folder)
        todo: dict[bytes, str] = {}
        for k, t in zip(keys, texts):
            if k not in loaded.cached:
                todo.setdefault(k, t)
        if todo:
            import torch

            with torch.inference_mode():
                vectors = loaded.model.encode(
                    list(todo.values()), batch_size=BATCH, convert_to_numpy=True, show_progress_bar=False
                )
            vectors = np.asarray(vectors, dtype=np.float32).reshape(len(todo), loaded.dim)
            _write_chunk(loaded, folder, list(todo), vectors)
            for k, v in zip(todo, vectors):
                loaded.cached[k] = v
        for i, k in enumerate(keys):
            out[i] = loaded.cached[k]
    return out


def embedding_block(values: Any, name: str, fingerprint: str) -> tuple[np.ndarray, int]:
    """A text column's encoded block: (float32 (rows, dim), missing cells); a missing text is all zeros.

    ``values``: the cells (``str``, ``None`` or NaN for missing, or a :class:`Coded` column)."""
    from core.schema.coded import Coded

    if isinstance(values, Coded):
        levels = [str(v) for v in values.levels]
        block = embed_texts(name, fingerprint, levels)
        full = np.zeros((len(block) + 1, block.shape[1]), dtype=np.float32)
        full[:-1] = block
        return full[values.codes], int((values.codes < 0).sum())
    cells = ["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in values]
    present = [i for i, t in enumerate(cells) if t]
    distinct = sorted({cells[i] for i in present})
    vectors = embed_texts(name, fingerprint, distinct)
    index = {t: j for j, t in enumerate(distinct)}
    out = np.zeros((len(cells), vectors.shape[1] if len(distinct) else _load(name, fingerprint).dim), np.float32)
    for i in present:
        out[i] = vectors[index[cells[i]]]
    return out, len(cells) - len(present)
