"""Pretrained backbones on real-size photos, against the limits and a peer, in one run.

    .venv/bin/python bench/backbones.py [--dir /tmp/traindesk-photos] [--images 2000] [--feature-images 400]
                                        [--epochs 5] [--full-images 300]

The folder holds ``--images`` JPEGs at 1600x1200 in ten class folders (bench/_photos.py: crops of scikit-learn's
sample photographs), made once. Weights are random in timm's key layout (this machine has no internet): speed
does not depend on their values.

1. Feature extraction, images/s: the engine's (``core.training.features.compute``: decoding and the backbone
   in 1 or 2 processes) against one process's ``torch.inference_mode`` loop with every thread, for
   efficientnet_lite0 and resnet18 at 224.
2. From the folder to a trained head, start-up included (whole processes): ``traindesk train`` with
   ``model.finetune = "head"``, cold (no cached features) and warm (a second run), against a Lightning + timm
   script doing the same job (frozen backbone, linear head, the same epochs; bench/_lightning_timm.py).
3. Full fine-tuning samples/s at 128 px on ``--full-images`` photos: the engine's single and hogwild x2 (its
   summary's figure) against a bare loop over the same images decoded in memory.
4. A few-shot head at the defaults (``--fewshot`` photos a class to train on, as many held out): the run's
   validation accuracy against scikit-learn's ``LogisticRegression()`` fitted on the same cached features of the
   same split.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _photos import photo_folder, random_weights

from core.config import Config, apply_overrides, from_dict
from core.data import decode_image, load_data
from core.launchers.local import get_context
from core.training.backbones import image_input
from core.training.features import compute
from core.training.models import build_model_for

HERE = Path(__file__).resolve().parent
ENV = {**os.environ, "PYTHONPATH": str(HERE.parent), "HF_HUB_OFFLINE": "1"}


def _config(arch: str, folder: Path, *more: str) -> Config:
    return apply_overrides(
        Config(), [f"model.kind=timm:{arch}", "model.weights=none", f"data.source=images:{folder}", *more]
    )


def features(folder: Path, arch: str, n: int) -> None:
    cfg = _config(arch, folder)
    data = load_data(cfg.data, share=False, images=image_input(cfg))
    net = build_model_for(cfg.model, data.info).eval()
    paths = list(data.train.paths)[:n]  # type: ignore[union-attr]  # an image folder's split
    info = data.info
    rates = {}
    for procs in (1, 2):
        t0 = time.perf_counter()
        compute(net, cfg.model.kind, paths, info, procs, 0, get_context())  # type: ignore[arg-type]  # a BackboneNet
        rates[f"engine, {procs} process(es)"] = len(paths) / (time.perf_counter() - t0)
    torch.set_num_threads(os.cpu_count() or 1)
    mean = torch.tensor(info.mean).view(1, -1, 1, 1)
    std = torch.tensor(info.std).view(1, -1, 1, 1)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(paths), 32):
            x = torch.stack([torch.from_numpy(decode_image(p, info.input_shape)) for p in paths[i : i + 32]])
            net.features((x - mean) / std)
    bare = len(paths) / (time.perf_counter() - t0)
    for name, rate in rates.items():
        print(f"  {arch:18s} {name:24s} {rate:7.1f} images/s  {rate / bare:5.2f}x the bare loop")
    print(f"  {arch:18s} {'bare loop, every thread':24s} {bare:7.1f} images/s")


def _timed(cmd: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - t0, done.stdout.strip().splitlines()[-1]


def head(folder: Path, work: Path, epochs: int) -> None:
    arch = "resnet18.a1_in1k"
    weights = random_weights(arch, work)
    runs = work / "runs-head"
    shutil.rmtree(runs, ignore_errors=True)
    cmd = [sys.executable, "-m", "core", "train", "--runs-dir", str(runs), "--strategy", "single"]
    cmd += ["--epochs", str(epochs), "--set", f"model.kind=timm:{arch}", "--set", f"model.weights={weights}"]
    cmd += ["--set", f"data.source=images:{folder}", "--set", "optim.name=adam", "--set", "optim.lr=0.001"]
    cold, run = _timed(cmd)
    cold_acc = json.loads((Path(run) / "summary.json").read_text())["final"]["val_accuracy"]
    warm, run = _timed(cmd)
    peer, peer_acc = _timed(
        [sys.executable, str(HERE / "_lightning_timm.py"), str(folder), str(weights), arch, str(epochs)]
    )
    print(
        f"  traindesk, cold cache     {cold:7.1f} s  {cold / peer:5.2f}x the peer's time  (val accuracy {cold_acc:.3f})"
    )
    print(f"  traindesk, warm cache     {warm:7.1f} s  {warm / peer:5.2f}x")
    print(f"  Lightning + timm          {peer:7.1f} s  (val accuracy {float(peer_acc):.3f})")


def full(folder: Path, work: Path, n: int) -> None:
    arch = "resnet18.a1_in1k"
    subset = work / f"subset-{n}"
    if not subset.exists():
        files = sorted(folder.rglob("*.jpg"))[:n]
        for f in files:
            (subset / f.parent.name).mkdir(parents=True, exist_ok=True)
            (subset / f.parent.name / f.name).symlink_to(f)
    more = ("data.image_size=128", "model.finetune=full", "data.val_fraction=0.1", "train.batch_size=32")
    rates = {}
    for strategy, workers in (("single", 1), ("hogwild", 2)):
        runs = work / f"runs-full-{strategy}"
        shutil.rmtree(runs, ignore_errors=True)
        cmd = [sys.executable, "-m", "core", "train", "--runs-dir", str(runs), "--strategy", strategy]
        cmd += ["--workers", str(workers), "--epochs", "1", "--set", f"model.kind=timm:{arch}"]
        cmd += ["--set", "model.weights=none", "--set", f"data.source=images:{subset}"]
        for m in more:
            cmd += ["--set", m]
        _, run = _timed(cmd)
        rates[f"engine {strategy} x{workers}"] = json.loads((Path(run) / "summary.json").read_text())["samples_per_s"]
    cfg = _config(arch, subset, *more)
    data = load_data(cfg.data, share=False, images=image_input(cfg))
    net = build_model_for(cfg.model, data.info).train()
    split = data.train
    info = data.info
    mean, std = torch.tensor(info.mean).view(-1, 1, 1), torch.tensor(info.std).view(-1, 1, 1)
    x = torch.stack([(torch.from_numpy(decode_image(p, info.input_shape)) - mean) / std for p in split.paths])  # type: ignore[union-attr]
    y = torch.tensor(split.labels)  # type: ignore[union-attr]
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    torch.set_num_threads(os.cpu_count() or 1)
    t0 = time.perf_counter()
    for i in range(0, len(y), 32):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x[i : i + 32]), y[i : i + 32]).backward()
        opt.step()
    bare = len(y) / (time.perf_counter() - t0)
    for name, rate in rates.items():
        print(f"  {name:22s} {rate:7.1f} samples/s  {rate / bare:5.2f}x the bare loop")
    print(f"  {'bare loop (decoded)':22s} {bare:7.1f} samples/s")


def fewshot(work: Path, per_class: int) -> None:
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    from core.training.checkpoint import load_checkpoint
    from core.training.features import CACHE_FOLDER, FeatureStore

    arch = "efficientnet_lite0"
    folder = photo_folder(work / f"fewshot-{per_class}", 20 * per_class)  # ten classes, half held out
    weights = random_weights(arch, work)
    runs = work / "runs-fewshot"
    shutil.rmtree(runs, ignore_errors=True)
    cmd = [sys.executable, "-m", "core", "train", "--runs-dir", str(runs), "--set", f"model.kind=timm:{arch}"]
    cmd += ["--set", f"model.weights={weights}", "--set", f"data.source=images:{folder}"]
    cmd += ["--set", "data.val_fraction=0.5"]
    seconds, run_text = _timed(cmd)
    run = Path(run_text)
    acc = json.loads((run / "summary.json").read_text())["final"]["val_accuracy"]
    cfg = from_dict(load_checkpoint(run)["config"])
    data = load_data(cfg.data, seed=cfg.train.seed, share=False, task=cfg.train.task, images=image_input(cfg))
    (cache,) = (runs / CACHE_FOLDER).iterdir()
    store = FeatureStore.read(cache)
    by_path = {key.split("|")[0]: at for key, at in store.index.items()}

    def split(paths: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        x = np.empty((len(paths), store.dim), dtype=np.float32)
        store.gather(x, [by_path[os.path.abspath(p)] for p in paths])
        return x, np.asarray([int(Path(p).parent.name.removeprefix("class")) for p in paths])

    x_train, y_train = split(data.train.paths)  # type: ignore[union-attr]  # an image folder's splits
    x_val, y_val = split(data.val.paths)  # type: ignore[union-attr]
    reference = LogisticRegression(max_iter=1000).fit(x_train, y_train).score(x_val, y_val)
    print(
        f"  traindesk head at the defaults  {acc:.4f} val accuracy ({len(y_train)} training photos, "
        f"{len(y_val)} held out; {seconds:.1f} s, start-up and features included)"
    )
    print(f"  LogisticRegression() on the same cached features  {reference:.4f}  (difference {acc - reference:+.4f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/traindesk-photos"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--feature-images", type=int, default=400)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--full-images", type=int, default=300)
    ap.add_argument("--fewshot", type=int, default=30, help="photos a class to train the few-shot head on")
    ap.add_argument("--only", choices=("features", "head", "full", "fewshot"), default=None)
    args = ap.parse_args()
    folder = photo_folder(args.dir / "photos", args.images)
    print(f"{args.images} JPEGs at 1600x1200 in {folder}; {os.cpu_count()} cores; torch {torch.__version__}")
    if args.only in (None, "features"):
        print("Feature extraction at 224:")
        for arch in ("efficientnet_lite0", "resnet18"):
            features(folder, arch, args.feature_images)
    if args.only in (None, "head"):
        print(f"From the folder to a trained head ({args.epochs} epochs, start-up included):")
        head(folder, args.dir, args.epochs)
    if args.only in (None, "full"):
        print(f"Full fine-tuning, resnet18 at 128 px, {args.full_images} photos:")
        full(folder, args.dir, args.full_images)
    if args.only in (None, "fewshot"):
        print(f"A few-shot head at the defaults ({args.fewshot} photos a class), against a logistic regression:")
        fewshot(args.dir, args.fewshot)


if __name__ == "__main__":
    main()
