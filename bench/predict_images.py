"""Predicting a folder of camera-size photos with a pretrained backbone: peak memory and images/s.

    .venv/bin/python bench/predict_images.py [--dir /tmp/traindesk-photos] [--counts 1000,5000]
                                             [--arch efficientnet_lite0] [--formats run,onnx] [--bare 1000]
                                             [--json PATH]

Folders of JPEGs at 1600x1200 (bench/_photos.py: crops of scikit-learn's sample photographs) are made once.
A head-only run of ``timm:ARCH`` is trained on 60 of them (weights random in timm's key layout: this machine has
no internet, and speed does not depend on their values) and exported to ONNX. Then, for each folder size and
each format (``run``: the run directory, predicted with torch; ``onnx``: its ONNX export), ``traindesk predict
MODEL FOLDER --out FILE`` runs as a command at its defaults, and this script samples the resident memory of the
command's whole process tree every 20 ms: its peak, and images/s over the command's wall time (start-up
included).

The bare loop beside it is one process with every thread: the same backbone from timm, the same decoding
(``core.readers.images.decode_image`` with the model's own ``image_prep``), batches of 32 under
``torch.inference_mode``, on the first ``--bare`` images, in this process.

The goals: the peak at the largest folder within 1.2x the peak at the smallest (memory flat in the number of
images), and images/s at least 0.8x the bare loop's.
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

from _photos import photo_folder, random_weights

HERE = Path(__file__).resolve().parent
ENV = {**os.environ, "PYTHONPATH": str(HERE.parent), "HF_HUB_OFFLINE": "1"}


def _run(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def trained_run(work: Path, arch: str) -> Path:
    """A head-only run of ``arch`` on 60 photos (1 epoch), and its ONNX export."""
    train = photo_folder(work / "train-60", 60)
    weights = random_weights(arch, work)
    runs = work / "runs-predict"
    shutil.rmtree(runs, ignore_errors=True)
    cmd = [sys.executable, "-m", "core", "train", "--runs-dir", str(runs), "--strategy", "single", "--epochs", "1"]
    cmd += ["--set", f"model.kind=timm:{arch}", "--set", f"model.weights={weights}"]
    cmd += ["--set", f"data.source=images:{train}", "--set", "model.finetune=head"]
    run = Path(_run(cmd))
    _run([sys.executable, "-m", "core", "export", str(run), "--format", "onnx"])
    return run


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants now (0 once it is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def predict(model: Path, folder: Path, out: Path) -> tuple[float, int]:
    """``traindesk predict MODEL FOLDER --out OUT`` at its defaults: (wall seconds, peak bytes of its tree)."""
    cmd = [sys.executable, "-m", "core", "predict", str(model), str(folder), "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        time.sleep(0.02)
    seconds = time.perf_counter() - t0
    err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return seconds, peak


def bare_loop(run: Path, folder: Path, arch: str, n: int) -> float:
    """images/s of a plain timm loop with every thread and the model's own decoding, on ``n`` images."""
    import numpy as np
    import timm
    import torch

    from core.readers.images import decode_image, prep_of

    meta = json.loads((run / "exports" / "model.json").read_text())
    shape = [int(s) for s in meta["input"]["shape"]]
    prep = prep_of(meta["input"].get("image_prep"), shape)
    pre = meta.get("preprocessing") or {}
    mean = torch.tensor(pre.get("mean") or [0.0] * shape[0]).view(1, -1, 1, 1)
    std = torch.tensor(pre.get("std") or [1.0] * shape[0]).view(1, -1, 1, 1)
    net = timm.create_model(arch, pretrained=False, num_classes=len(meta["classes"])).eval()
    torch.set_num_threads(os.cpu_count() or 1)
    paths = sorted(str(p) for p in folder.rglob("*.jpg"))[:n]
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(paths), 32):
            x = torch.from_numpy(np.stack([decode_image(p, prep) for p in paths[i : i + 32]]))
            net((x - mean) / std).softmax(-1)
    return len(paths) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/traindesk-photos"))
    ap.add_argument("--counts", default="1000,5000")
    ap.add_argument("--arch", default="efficientnet_lite0")
    ap.add_argument("--formats", default="run,onnx")
    ap.add_argument("--bare", type=int, default=1000)
    ap.add_argument("--json", type=Path, help="also write each format's ratios here (bench/check.py reads it)")
    args = ap.parse_args()
    figures: dict[str, dict[str, float]] = {}
    counts = [int(c) for c in args.counts.split(",")]
    args.dir.mkdir(parents=True, exist_ok=True)
    run = trained_run(args.dir, args.arch)
    models = {"run": run, "onnx": run / "exports" / "model.onnx"}
    print(f"timm:{args.arch} head-only run {run.name}; {os.cpu_count()} cores; JPEGs at 1600x1200")
    folders = {n: photo_folder(args.dir / f"predict-{n}", n) for n in counts}
    bare = bare_loop(run, folders[max(counts)], args.arch, min(args.bare, max(counts)))
    print(f"  bare timm loop, every thread       {bare:7.1f} images/s")
    for fmt in args.formats.split(","):
        peaks, rates = {}, {}
        for n in counts:
            seconds, peak = predict(models[fmt], folders[n], args.dir / f"predictions-{fmt}-{n}.csv")
            peaks[n] = peak
            rate = rates[n] = n / seconds
            print(
                f"  predict {fmt:4s} {n:6,} images  {seconds:7.1f} s  {rate:7.1f} images/s  "
                f"{rate / bare:5.2f}x the bare loop  peak {peak / 2**20:7,.0f} MB (process tree)"
            )
        lo, hi = min(counts), max(counts)
        print(f"  predict {fmt:4s} peak at {hi:,} / peak at {lo:,}: {peaks[hi] / max(peaks[lo], 1):.2f}x")
        figures[fmt] = {"vs_bare": rates[hi] / bare, "peak_growth": peaks[hi] / max(peaks[lo], 1)}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
