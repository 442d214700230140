"""A frozen backbone's features of image files: computed once, by several processes, and cached on disk.

``model.finetune = "head"`` trains only a linear head; the backbone's output for an image never changes, so it
is computed once per file and kept under the runs folder (``<runs>/.features/<key>/``), the key naming the
backbone, its weights (their digest) and the preprocessing. A file is known by its path, size and
modification time: a second run on the same folder computes nothing, and a changed or added file computes only
itself. The cache is written aside and renamed under a lock, so it never holds half an update.

The images missing from the cache are cut into one shard per process; each process (from the launcher's
context, like a training worker) decodes its images in its own DataLoader processes and runs the backbone
(shared with the session, not copied) under ``torch.inference_mode``, writing into one shared tensor.

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
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
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
from core.training.backbones import BackboneNet, build_backbone_net, weights_digest
from core.training.shared_state import SharedState, share_flat

CACHE_FOLDER = ".features"
FORMAT = 1  # bumped when what a feature is computed from changes (the decoding, the layout)
BATCH = 32
PROGRESS_EVERY_S = 2.0
Progress = Callable[[int, int, float], None]  # (images done, images to do, seconds so far)


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
) -> tuple[PreparedData, FeatureCount]:
    """``data`` with both splits replaced by the backbone's features of their images (in shared memory), from
    the cache under ``runs_dir`` or computed."""
    if not isinstance(data.train, ImageSplit) or not isinstance(data.val, ImageSplit):
        raise DataError("data: a frozen backbone's features are computed from image files")
    t0 = time.perf_counter()
    cache = runs_dir / CACHE_FOLDER / cache_key(kind, net, data.info)
    paths = list(data.train.paths) + list(data.val.paths)
    feats, computed = cached_features(net, kind, paths, data.info, cache, processes, loader_workers, context, progress)
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
) -> tuple[np.ndarray, int]:
    """The features of ``paths`` (N, D) and how many had to be computed."""
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache):
        index, stored = _read(cache)
        keys = [_file_key(p) for p in paths]
        rows = [index.get(k) for k in keys]
        missing = [i for i, r in enumerate(rows) if r is None]
        todo = [paths[i] for i in missing]
        fresh = compute(net, kind, todo, info, processes, loader_workers, context, progress) if todo else None
        dim = int(fresh.shape[1]) if fresh is not None else int(stored.shape[1]) if stored is not None else 0
        out = np.empty((len(paths), dim), dtype=np.float32)
        if stored is not None:
            have = [(i, r) for i, r in enumerate(rows) if r is not None]
            if have:
                out[[i for i, _ in have]] = stored[[r for _, r in have]]
        if fresh is not None:
            out[missing] = fresh
            _append(cache, index, stored, [keys[i] for i in missing], fresh)
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
    ``progress(done, total, seconds)`` is called every few seconds meanwhile."""
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
    frozen = net.frozen
    for rank, shard in enumerate(shards):
        part = [paths[i] for i in shard]
        args = (kind, frozen, weights, part, int(shard[0]), info, out, done[rank : rank + 1], threads, loader_workers)
        p = context.Process(target=_extract, args=args, name="traindesk-features", daemon=False)
        p.start()
        procs.append(p)
    t0 = said = time.monotonic()
    try:
        while any(p.is_alive() for p in procs):
            check_stop()  # a Stop or Ctrl-C while features are computed
            for p in procs:
                p.join(0.1)
            if progress is not None and time.monotonic() - said >= PROGRESS_EVERY_S:
                said = time.monotonic()
                progress(int(done.sum()), len(paths), time.monotonic() - t0)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    if failed:
        raise RunError(f"computing the backbone's features failed: a process exited with code {failed[0]}")
    return out.numpy()


def _extract(
    kind: str,
    frozen: bool,
    weights: SharedState,
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
    net = build_backbone_net(kind, frozen, info.input_shape, info.num_classes)
    net.load_state_dict(weights.state_dict(), assign=True)
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
def _locked(folder: Path) -> Any:
    with open(folder / "lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # two runs on one folder update it in turn
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read(folder: Path) -> tuple[dict[str, int], np.ndarray | None]:
    index_file, array_file = folder / "index.json", folder / "features.npy"
    if not index_file.exists() or not array_file.exists():
        return {}, None
    try:
        index = json.loads(index_file.read_text())["files"]
        stored = np.load(array_file, mmap_mode="r")
    except (OSError, ValueError, KeyError, TypeError):  # unreadable: computed again and written anew
        return {}, None
    if any(not isinstance(r, int) or r >= len(stored) for r in index.values()):
        return {}, None
    return index, stored


def _append(folder: Path, index: dict[str, int], stored: np.ndarray | None, keys: list[str], fresh: np.ndarray) -> None:
    base = 0 if stored is None else len(stored)
    merged = fresh if stored is None else np.concatenate([np.asarray(stored), fresh])
    index = dict(index) | {k: base + i for i, k in enumerate(keys)}
    for name, write in (
        ("features.npy", lambda fh: np.save(fh, merged)),
        ("index.json", lambda fh: fh.write(json.dumps({"files": index}).encode())),
    ):  # the array first: the index never names a row the array lacks
        tmp = folder / f".{name}.tmp"
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, folder / name)


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
