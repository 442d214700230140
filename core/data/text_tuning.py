"""A table's sentence encoder fine-tuned on the training split (``model.finetune = "full"`` with
``model.text_encoder``), before its texts are embedded.

The encoder learns with a linear head on its sentence embedding (as sentence-transformers gives it: the
model's own pooling), the run's task as the loss (cross-entropy on the classes, mean squared error on the
standardised target), every text column's training texts paired with their row's target (a missing text is
no example). AdamW, :data:`EPOCHS` passes in batches of :data:`BATCH`, the encoder at :data:`LR` (a rate for
a pretrained transformer) and the fresh head at :data:`HEAD_LR`; seeded by ``train.seed``. Only the training
rows are seen: the validation split measures the tuned encoder as it measures the model.

The tuned encoder is saved (``SentenceTransformer.save``) beside its final name and renamed to it when
whole, so a stop or a failure while it learns or saves leaves no folder. From then on it is part of the run's
model: the run directory's ``text-encoder/``, which the schema names relative to the model (see
:func:`core.schema.sentences.located`), so the run directory can be moved or copied; a run continued in another
directory (a fork, a race's clone) and an export take a copy of it beside their model. Otherwise it is an
encoder like any other: fingerprinted by its files, its embeddings cached.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import DataError
from core.readers import check_stop
from core.schema.coded import Coded

EPOCHS = 2
BATCH = 16
LR = 3e-5
HEAD_LR = 1e-3
REPORT_EVERY = 30.0  # seconds between progress lines within an epoch
FOLDER = "text-encoder"  # a run's tuned encoder, in its run directory


@dataclass(frozen=True)
class TextTuning:
    """Where the tuned encoder goes (a folder not there yet) and who hears its progress (one line each)."""

    into: Path
    report: Callable[[str], None] = lambda line: None
    inherited: bool = False  # an earlier run's tuned encoder (into: its folder), which the run takes a copy of


def training_texts(columns: dict[str, Any], text_columns: list[str], rows: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Every text column's present training texts, and for each the training row it came from."""
    texts: list[str] = []
    origin: list[np.ndarray] = []
    for name in text_columns:
        values = columns[name][rows]
        cells = values.tolist() if isinstance(values, Coded) else list(values)
        present = [i for i, v in enumerate(cells) if isinstance(v, str) and v.strip()]
        texts += [cells[i] for i in present]
        origin.append(np.asarray(present, dtype=np.int64))
    return texts, np.concatenate(origin) if origin else np.zeros(0, dtype=np.int64)


def tune_encoder(
    name: str, texts: list[str], y: np.ndarray, classes: int, tuning: TextTuning, seed: int = 0
) -> tuple[Path, list[float]]:
    """Fine-tune the encoder ``name`` on ``texts`` and their targets ``y`` (class indices, or numbers when
    ``classes`` is 0), save it at ``tuning.into``; (the folder, each epoch's mean training loss)."""
    import torch

    from core.schema.sentences import fresh_encoder

    if not texts:
        raise DataError(f'model: model.finetune = "full" fine-tunes {name}, but no training row has a text')
    model, dim = fresh_encoder(name)
    aside = tuning.into.parent / f".{tuning.into.name}.{os.getpid()}.tmp"
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            losses = _learn(model, dim, texts, y, classes, tuning.report)
        tuning.into.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(aside, ignore_errors=True)
        model.save(str(aside))
        check_stop()
        os.replace(aside, tuning.into)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    tuning.report(f"text encoder: fine-tuned, saved as {tuning.into}")
    return tuning.into, losses


def _learn(
    model: Any, dim: int, texts: list[str], y: np.ndarray, classes: int, report: Callable[[str], None]
) -> list[float]:
    import torch

    target = torch.as_tensor(y, dtype=torch.long if classes else torch.float32)
    if not classes:  # a standardised target: the loss is on the scale of a class's
        target = (target - target.mean()) / (target.std() if len(target) > 1 and target.std() > 0 else 1.0)
    head = torch.nn.Linear(dim, classes or 1)
    loss_of = torch.nn.CrossEntropyLoss() if classes else torch.nn.MSELoss()
    optimizer = torch.optim.AdamW(
        [{"params": list(model.parameters()), "lr": LR}, {"params": list(head.parameters()), "lr": HEAD_LR}]
    )
    report(f"text encoder: fine-tuning on {len(texts)} training texts, {EPOCHS} epochs of batches of {BATCH}")
    model.train()
    losses = []
    for epoch in range(EPOCHS):
        order = torch.randperm(len(texts)).tolist()
        total, seen, start, last = 0.0, 0, time.monotonic(), time.monotonic()
        for lo in range(0, len(order), BATCH):
            check_stop()
            batch = order[lo : lo + BATCH]
            features = model.tokenize([texts[i] for i in batch])
            embedding = model(features)["sentence_embedding"]
            out = head(embedding)
            loss = loss_of(out if classes else out.squeeze(1), target[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
            seen += len(batch)
            if time.monotonic() - last > REPORT_EVERY:
                last = time.monotonic()
                report(f"text encoder: epoch {epoch + 1}/{EPOCHS}: {seen}/{len(texts)} texts, loss {total / seen:.4f}")
        losses.append(total / max(seen, 1))
        report(f"text encoder: epoch {epoch + 1}/{EPOCHS}: loss {losses[-1]:.4f} ({time.monotonic() - start:.1f}s)")
    model.eval()
    return losses


def encoder_of(schema: dict[str, Any] | None) -> str:
    """The sentence encoder a schema's text columns were embedded by ("" for none)."""
    for column in (schema or {}).get("columns", []):
        if isinstance(column.get("encoder"), dict):
            return str(column["encoder"]["name"])
    return ""


def own(schema: dict[str, Any], old: str) -> dict[str, Any]:
    """``schema`` with its text columns' encoder ``old`` named as the run's own (``text-encoder/`` beside the
    model)."""
    columns = []
    for column in schema.get("columns", []):
        encoder = column.get("encoder")
        if isinstance(encoder, dict) and encoder.get("name") == old:
            column = {**column, "encoder": {**encoder, "name": FOLDER, "relative": True}}
        columns.append(column)
    return {**schema, "columns": columns}


def own_folder(schema: dict[str, Any] | None, base: Path) -> Path | None:
    """The folder under ``base`` of the tuned encoder ``schema`` names relative to its model (None: it names
    none; a missing folder is a one-line error)."""
    from core.schema.sentences import located

    for column in (located(schema, base) or {}).get("columns", []):
        encoder = column.get("encoder")
        if isinstance(encoder, dict) and encoder.get("relative"):
            return Path(encoder["name"])
    return None


def carry(folder: Path, into: Path) -> Path:
    """A copy of the tuned encoder ``folder`` as ``into/text-encoder`` (an identical one there is kept): linked
    where the file system allows (its files are never written again), written aside and renamed when whole."""
    from core.schema.sentences import folder_digest

    final = Path(into) / FOLDER
    if final.is_dir() and final.resolve() == Path(folder).resolve():
        return final
    if final.is_dir() and folder_digest(final) == folder_digest(Path(folder)):
        return final
    aside, old = into / f".{FOLDER}.{os.getpid()}.tmp", into / f".{FOLDER}.{os.getpid()}.old"
    try:
        shutil.rmtree(aside, ignore_errors=True)
        shutil.copytree(folder, aside, copy_function=_link_or_copy)
        if final.exists():
            os.replace(final, old)
        os.replace(aside, final)
    except OSError as exc:
        raise DataError(f"text encoder: cannot copy {folder} into {into}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(aside, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return final


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def tuning_for(
    text_encoder: str,
    finetune: str,
    timm: bool,
    runs_dir: Path,
    checkpoint: dict[str, Any] | None,
    report: Callable[[str], None],
) -> tuple[str, TextTuning | None]:
    """The encoder a run embeds its texts by, and the tuning that makes it or brings it (None: neither).

    A continued or forked run's model learned from its checkpoint's encoder: it goes on with that one, a tuned
    one (its checkpoint's schema located) copied into its run directory by :func:`settle`. A new run's tuned
    encoder is made under ``runs_dir`` (its run directory does not exist yet) and moved into the run directory
    by :func:`settle`."""
    if not text_encoder or finetune != "full" or timm:
        return text_encoder, None
    schema = ((checkpoint or {}).get("info") or {}).get("schema")
    earlier = encoder_of(schema)
    if earlier:
        own_earlier = any((c.get("encoder") or {}).get("relative") for c in (schema or {}).get("columns", []))
        return earlier, (TextTuning(Path(earlier), report, inherited=True) if own_earlier else None)
    return text_encoder, TextTuning(Path(runs_dir) / f".{FOLDER}-{os.getpid()}-{time.time_ns()}", report)


def settle(tuning: TextTuning | None, run_dir: Path, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """Move a tuned encoder into ``run_dir`` (as ``text-encoder/``; an earlier run's is copied there);
    ``schema`` naming it as the run's own."""
    if tuning is None or schema is None or not tuning.into.is_dir():
        return schema
    if tuning.inherited:
        carry(tuning.into, Path(run_dir))
    else:
        os.replace(tuning.into, Path(run_dir) / FOLDER)
    return own(schema, str(tuning.into))


def discard(tuning: TextTuning | None) -> None:
    """A tuned encoder no run came to hold (the run failed or stopped before its directory was made)."""
    if tuning is not None and not tuning.inherited:
        shutil.rmtree(tuning.into, ignore_errors=True)
