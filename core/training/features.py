"""A frozen backbone's features of image files: computed once, by several processes, and cached on disk.

``model.finetune = "head"`` trains only a linear head; the backbone's output for an image never changes, so it
is computed once per file and kept under the runs folder (``<runs>/.features/<key>/``), the key naming the
backbone, its weights (their digest) and the preprocessing. A file is known by its path, size and
modification time: a second run on the same folder computes nothing, and a changed or added file computes only
itself. Every run of a runs folder looks there, a race's variants too (their session is told the runs folder
of the raced run), so runs on the same images wait for the one computing them rather than compute them again.

On disk the cache only grows: each update adds a chunk (its features, ``chunk-N.npy``, and the keys of their
files, ``chunk-N.keys.json``), then rewrites the small ``index.json`` that lists the chunks; each file written
aside, synced and renamed, the index last, under an flock on the folder. A run killed mid-update leaves a chunk
the index does not list (written over by the next update): the cache never holds half an update, and what it
held before is never rewritten.

The images missing from the cache are cut into one shard per process; each process (from the launcher's
context, like a training worker) builds the network on the meta device (no memory, no random initialisation),
takes the session's weights (shared, not copied), decodes its images in its own DataLoader processes and runs
the backbone under ``torch.inference_mode``, writing into one shared tensor.

The head on those features is fitted, not trained by batches (``model.head_fit = "lbfgs"``, :class:`HeadFit`).
On cached features the head's problem is convex and small: a multinomial logistic regression (the run's
cross-entropy, class weights included) or, for one output, a penalised least-squares fit (the run's
regression loss). The whole training split is one batch and each iteration costs a pass over it, so the fit
reaches the optimum in tens to a few hundred iterations, where minibatch SGD at a fixed rate stops short of it.

The penalty is scikit-learn's ``LogisticRegression`` default, C = 1: its objective, ``0.5 |W|^2 + C * sum of
losses``, is the mean loss plus ``l2 / 2 * |W|^2`` with ``l2 = 1 / (C * n)``; the bias is not penalised. The
head stays a plain ``nn.Linear`` on the raw features (nothing is standardised that an export would not do),
so every face of the trained model is as before.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from core.data import DatasetInfo, FeatureSplit, ImageDataset, ImageSplit, PreparedData
from core.errors import DataError, RunError
from core.host.lifeline import set_pdeathsig
from core.host.machine import usable_cores
from core.readers import check_stop
from core.runfiles.writing import atomic_write, atomic_write_json
from core.training.backbones import BackboneNet, build_backbone_net, weights_digest
from core.training.shared_state import SharedState, share_flat

CACHE_FOLDER = ".features"
FORMAT = 2  # bumped when what a feature is computed from changes (the decoding, the layout); 2: chunks
BATCH = 32
PROGRESS_EVERY_S = 2.0
LOCK_POLL_S = 0.2  # how often a run waiting for another's features asks whether it was stopped
Progress = Callable[[int, int, float], None]  # (images done, images to do, seconds so far)
Say = Callable[[str], None]  # a line for the run's log


@dataclass(frozen=True)
class FeatureCount:
    computed: int  # images run through the backbone by this call
    cached: int  # images whose features came from the cache
    seconds: float
    folder: Path

    def describe(self) -> str:
        total = self.computed + self.cached
        return (
            f"backbone features of {total:,} images: {self.computed:,} computed, {self.cached:,} from the cache "
            f"({self.folder}) in {self.seconds:.1f} s"
        )


def feature_progress(done: int, total: int, seconds: float) -> str:
    """The log's line while features are computed."""
    rate = f" ({done / seconds:.0f} images/s)" if done and seconds > 0 else ""
    return f"backbone features: {done:,} of {total:,} images computed{rate}"


def cache_key(kind: str, net: BackboneNet, info: DatasetInfo) -> str:
    """What a cached feature depends on: the backbone, its weights, the image size and statistics."""
    what = {"format": FORMAT, "kind": kind, "weights": weights_digest(net), "shape": list(info.input_shape)}
    what |= {"mean": [round(m, 6) for m in info.mean], "std": [round(s, 6) for s in info.std]}
    what["decoding"] = info.image_prep.to_json() if info.image_prep is not None else None
    name = kind.split(":", 1)[-1].replace("/", "_")
    return f"{name}-{hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]}"


def with_features(
    data: PreparedData,
    net: BackboneNet,
    kind: str,
    runs_dir: Path,
    processes: int,
    loader_workers: int,
    context: Any,
    progress: Progress | None = None,
    say: Say | None = None,
) -> tuple[PreparedData, FeatureCount]:
    """``data`` with both splits replaced by the backbone's features of their images (in shared memory), from
    the cache under ``runs_dir`` or computed; ``say`` tells the log when another run holds the cache."""
    if not isinstance(data.train, ImageSplit) or not isinstance(data.val, ImageSplit):
        raise DataError("data: a frozen backbone's features are computed from image files")
    t0 = time.perf_counter()
    cache = runs_dir / CACHE_FOLDER / cache_key(kind, net, data.info)
    paths = list(data.train.paths) + list(data.val.paths)
    feats, computed = cached_features(
        net, kind, paths, data.info, cache, processes, loader_workers, context, progress, say
    )
    x = torch.from_numpy(feats).share_memory_()
    k = len(data.train)

    def split(rows: slice, src: ImageSplit) -> FeatureSplit:
        y = torch.tensor(src.labels, dtype=torch.long).share_memory_()
        return FeatureSplit(x[rows], y, paths=src.paths)

    prepared = PreparedData(data.info, split(slice(0, k), data.train), split(slice(k, None), data.val))
    count = FeatureCount(computed, len(paths) - computed, time.perf_counter() - t0, cache)
    return prepared, count


def cached_features(
    net: BackboneNet,
    kind: str,
    paths: Sequence[str],
    info: DatasetInfo,
    cache: Path,
    processes: int,
    loader_workers: int,
    context: Any,
    progress: Progress | None = None,
    say: Say | None = None,
) -> tuple[np.ndarray, int]:
    """The features of ``paths`` (N, D) and how many had to be computed."""
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache, say):
        store = FeatureStore.read(cache)
        keys = [_file_key(p) for p in paths]
        rows = [store.index.get(k) for k in keys]
        missing = [i for i, r in enumerate(rows) if r is None]
        todo = [paths[i] for i in missing]
        fresh = compute(net, kind, todo, info, processes, loader_workers, context, progress) if todo else None
        dim = int(fresh.shape[1]) if fresh is not None else store.dim
        out = np.empty((len(paths), dim), dtype=np.float32)
        store.gather(out, rows)
        if fresh is not None:
            out[missing] = fresh
            store.append([keys[i] for i in missing], fresh)
    return out, len(missing)


def compute(
    net: BackboneNet,
    kind: str,
    paths: Sequence[str],
    info: DatasetInfo,
    processes: int,
    loader_workers: int,
    context: Any,
    progress: Progress | None = None,
) -> np.ndarray:
    """The backbone's features of ``paths``, computed by ``processes`` processes into one shared tensor;
    ``progress(done, total, seconds)`` is called as it begins, every few seconds meanwhile and when all are
    done."""
    with torch.inference_mode():
        dim = int(net.features(torch.zeros(1, *info.input_shape)).shape[-1])
    out = torch.empty((len(paths), dim), dtype=torch.float32).share_memory_()
    processes = max(1, min(processes, len(paths)))
    threads = max(1, usable_cores() // processes)
    shards = np.array_split(np.arange(len(paths)), processes)
    done = torch.zeros(processes, dtype=torch.int64).share_memory_()  # images each process has finished
    procs = []
    weights = SharedState.of(net.state_dict())
    if len(weights.storages) > 1:  # one block crosses as one descriptor, whatever the network
        share_flat(net)
        weights = SharedState.of(net.state_dict())
    extra = unsaved_buffers(net)
    frozen = net.frozen
    t0 = said = time.monotonic()
    if progress is not None:
        progress(0, len(paths), 0.0)
    for rank, shard in enumerate(shards):
        part = [paths[i] for i in shard]
        args = (kind, frozen, weights, extra, part, int(shard[0]), info, out, done[rank : rank + 1], threads)
        p = context.Process(target=_extract, args=(*args, loader_workers), name="traindesk-features", daemon=False)
        p.start()
        procs.append(p)
    try:
        while any(p.is_alive() for p in procs):
            check_stop()  # a Stop or Ctrl-C while features are computed
            for p in procs:
                p.join(0.1)
            if progress is not None and time.monotonic() - said >= PROGRESS_EVERY_S:
                said = time.monotonic()
                progress(int(done.sum()), len(paths), said - t0)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    if failed:
        raise RunError(f"computing the backbone's features failed: a process exited with code {failed[0]}")
    if progress is not None:
        progress(len(paths), len(paths), time.monotonic() - t0)
    return out.numpy()


def unsaved_buffers(net: nn.Module) -> bytes:
    """The buffers a state dict leaves out (timm's non-persistent ones: position indices, masks), serialised:
    a network built on the meta device gets its weights from the state dict and these from here."""
    saved = net.state_dict()
    extra = {name: b.detach().clone() for name, b in net.named_buffers() if name not in saved}
    buf = io.BytesIO()
    torch.save(extra, buf)
    return buf.getvalue()


def rebuilt(kind: str, frozen: bool, info: DatasetInfo, state: dict[str, torch.Tensor], extra: bytes) -> BackboneNet:
    """The backbone network with ``state``'s tensors themselves (no copy) and ``extra``'s buffers, built on the
    meta device: no memory and no random initialisation for weights that are replaced at once."""
    with torch.device("meta"):
        net = build_backbone_net(kind, frozen, info.input_shape, info.num_classes)
    net.load_state_dict(state, assign=True)
    for name, tensor in torch.load(io.BytesIO(extra)).items():
        owner, _, leaf = name.rpartition(".")
        net.get_submodule(owner).register_buffer(leaf, tensor, persistent=False)
    empty = [n for n, t in [*net.named_parameters(), *net.named_buffers()] if t.is_meta]
    if empty:
        raise RunError(f"computing the backbone's features: the network's {empty[0]!r} got no value")
    return net


def _extract(
    kind: str,
    frozen: bool,
    weights: SharedState,
    extra: bytes,
    paths: list[str],
    start: int,
    info: DatasetInfo,
    out: torch.Tensor,
    done: torch.Tensor,
    threads: int,
    loader_workers: int,
) -> None:
    set_pdeathsig()  # a process that outlives the session computes for nobody
    torch.set_num_threads(threads)
    net = rebuilt(kind, frozen, info, weights.state_dict(), extra)
    dataset = ImageDataset(ImageSplit(tuple(paths), (0,) * len(paths)), info)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=BATCH, num_workers=loader_workers, persistent_workers=False, shuffle=False
    )
    net.eval()
    row = start
    with torch.inference_mode():
        for xb, _ in loader:
            f = net.features(xb)
            out[row : row + len(f)] = f
            row += len(f)
            done[0] = row - start


# -- the cache on disk ------------------------------------------------------------------------------------------
def _file_key(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        raise DataError(f"data: image file not found: {path}") from None
    return f"{os.path.abspath(path)}|{st.st_size}|{st.st_mtime_ns}"


@contextmanager
def _locked(folder: Path, say: Say | None = None) -> Iterator[None]:
    """The cache folder's flock (runs on one cache update it in turn); while another run holds it, one line
    says so and a stop of this run ends the wait (``ReadStopped``)."""
    with open(folder / "lock", "w") as fh:
        if not _try_lock(fh):
            if say is not None:
                say(f"waiting for another run computing the same backbone features (cache {folder})")
            while True:
                check_stop()
                if _try_lock(fh):
                    break
                time.sleep(LOCK_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _try_lock(fh: Any) -> bool:
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


INDEX = "index.json"
CHUNK = re.compile(r"chunk-(\d{6})")


@dataclass
class FeatureStore:
    """A cache folder as its index lists it: its chunks (each an (n, D) array and the keys of its n files) and
    where each file's features lie (chunk, row). Read and appended under the folder's lock."""

    folder: Path
    dim: int = 0
    chunks: list[dict[str, Any]] = field(default_factory=list)  # {"name", "rows"}, in the order written
    index: dict[str, tuple[int, int]] = field(default_factory=dict)  # file key -> (chunk, row)
    arrays: list[np.ndarray] = field(default_factory=list)  # each chunk's array, mapped

    @classmethod
    def read(cls, folder: Path) -> FeatureStore:
        """The chunks the index lists; an unreadable index is an empty cache (computed again), an unreadable
        chunk is left out (its files computed again)."""
        store = cls(folder)
        try:
            head = json.loads((folder / INDEX).read_text())
            dim, chunks = int(head["dim"]), list(head["chunks"])
            if head.get("format") != FORMAT:
                return store
        except (OSError, ValueError, KeyError, TypeError):
            return store
        store.dim = dim
        for chunk in chunks:
            try:
                name, n = str(chunk["name"]), int(chunk["rows"])
                if not CHUNK.fullmatch(name):
                    continue
                keys = json.loads((folder / f"{name}.keys.json").read_text())
                array = np.load(folder / f"{name}.npy", mmap_mode="r")
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if array.shape != (n, dim) or not isinstance(keys, list) or len(keys) != n:
                continue
            c = len(store.chunks)
            store.chunks.append({"name": name, "rows": n})
            store.arrays.append(array)
            store.index.update((str(k), (c, r)) for r, k in enumerate(keys))
        return store

    def gather(self, out: np.ndarray, rows: Sequence[tuple[int, int] | None]) -> None:
        """Fill ``out[i]`` with the features at ``rows[i]`` (a chunk and row; None: left as it is)."""
        by_chunk: dict[int, tuple[list[int], list[int]]] = {}
        for i, at in enumerate(rows):
            if at is not None:
                mine, theirs = by_chunk.setdefault(at[0], ([], []))
                mine.append(i)
                theirs.append(at[1])
        for c, (mine, theirs) in by_chunk.items():
            out[mine] = self.arrays[c][theirs]

    def append(self, keys: list[str], features: np.ndarray) -> None:
        """A new chunk of ``features`` (one row per key), then the index that lists it: the chunks already
        written stay as they are."""
        if self.chunks and int(features.shape[1]) != self.dim:  # another backbone's width: the cache restarts
            self.chunks, self.arrays, self.index = [], [], {}
        self.dim = int(features.shape[1])
        number = 1 + max((int(c["name"][len("chunk-") :]) for c in self.chunks), default=0)
        name = f"chunk-{number:06d}"
        array = np.ascontiguousarray(features, dtype=np.float32)
        atomic_write(self.folder / f"{name}.npy", lambda fh: np.save(fh, array))
        atomic_write(self.folder / f"{name}.keys.json", lambda fh: fh.write(json.dumps(keys).encode()))
        self.chunks.append({"name": name, "rows": len(keys)})
        self.arrays.append(array)
        c = len(self.chunks) - 1
        self.index.update((k, (c, r)) for r, k in enumerate(keys))
        # the index last: it never lists a chunk that is not whole on disk
        atomic_write_json(self.folder / INDEX, {"format": FORMAT, "dim": self.dim, "chunks": self.chunks})


# -- the head fitted on them ------------------------------------------------------------------------------------
MAX_ITERATIONS = 1000  # a run's budget; a few-shot head converges in far fewer
TOLERANCE_GRAD = 1e-6  # on the largest gradient of the mean objective (scikit-learn stops at 1e-4)
TOLERANCE_CHANGE = 1e-9  # the largest change of a weight by a step
DOUBLE_LIMIT = 50_000_000  # feature values (400 MB in float64) up to which the fit is in float64
HISTORY = 20  # curvature pairs L-BFGS keeps
LINE_SEARCH_EVALS = 30  # objective evaluations one iteration may make (torch's default is 1.25 per iteration)


def default_l2(n_train: int) -> float:
    """scikit-learn's C = 1 on the mean loss."""
    return 1.0 / max(1, n_train)


class HeadFit:
    """L-BFGS on ``head`` over all of ``(x, y)`` at once, one iteration per :meth:`iterate`.

    It works on a float64 copy of the head and of the features (when they fit in :data:`DOUBLE_LIMIT`): near
    the optimum a float32 objective changes by less than its own rounding and the line search stops short.
    Each iteration's weights are copied into ``head``.
    """

    def __init__(
        self,
        head: nn.Linear,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        l2: float,
    ) -> None:
        dtype = torch.float64 if x.numel() <= DOUBLE_LIMIT and x.device.type != "mps" else head.weight.dtype
        self.head, self.x, self.y, self.loss_fn, self.l2 = head, x.to(dtype), y, loss_fn, l2
        self.weight = head.weight.detach().to(dtype).clone().requires_grad_(True)
        self.bias = head.bias.detach().to(dtype).clone().requires_grad_(True)
        # line search by the strong Wolfe conditions: no rate to choose, whatever the features' scale
        self.optimizer = torch.optim.LBFGS(
            [self.weight, self.bias],
            lr=1.0,
            max_iter=1,
            max_eval=LINE_SEARCH_EVALS,
            history_size=HISTORY,
            tolerance_grad=TOLERANCE_GRAD,
            tolerance_change=TOLERANCE_CHANGE,
            line_search_fn="strong_wolfe",
        )
        self.iterations = 0
        self.converged = False
        self._start_loss = math.nan
        self._first = False

    def _closure(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=False)
        out = torch.nn.functional.linear(self.x, self.weight, self.bias)
        loss = self.loss_fn(out, self.y)
        objective = loss + 0.5 * self.l2 * self.weight.pow(2).sum()
        objective.backward()
        if self._first:  # the loss of the weights the iteration starts from, as a training step reports it
            self._start_loss = float(loss.detach())
            self._first = False
        return objective

    def iterate(self) -> float | None:
        """One iteration; the data loss of the weights it started from, or None once converged (no step)."""
        if self.converged:
            return None
        state = self.optimizer.state[self.weight]
        iterations, evaluations = int(state.get("n_iter", 0)), int(state.get("func_evals", 0))
        self._first = True
        with torch.enable_grad():
            objective = float(self.optimizer.step(self._closure).detach())
        # no iteration (the gradient is within tolerance), no line search (the direction no longer descends at
        # this precision) or a step that moved nothing: the optimum, as near as the arithmetic gets
        stepped = int(state.get("n_iter", 0)) > iterations and int(state.get("func_evals", 0)) > evaluations + 1
        if not stepped or not math.isfinite(objective) or self._stalled(state):
            self.converged = True
            return None
        with torch.no_grad():
            self.head.weight.copy_(self.weight)
            self.head.bias.copy_(self.bias)
        self.iterations += 1
        return self._start_loss

    @staticmethod
    def _stalled(state: dict[str, object]) -> bool:
        """The step just taken moved no weight by more than the tolerance (torch's own test, kept here
        because each call makes one iteration)."""
        d, t = state.get("d"), state.get("t")
        if not isinstance(d, torch.Tensor) or not isinstance(t, float | int):
            return False
        return bool(d.mul(t).abs().max() <= TOLERANCE_CHANGE)
