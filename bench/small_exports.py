"""Small exports against the trained model: float ONNX, int8 ONNX and the ExecuTorch programs, same rows.

    .venv/bin/python bench/small_exports.py [--dir /tmp/traindesk-photos] [--images 400] [--epochs 3]

Two runs, trained here with the engine (``traindesk train``): the digits cnn (20 epochs) and a pretrained
backbone's head on photos (``timm:resnet18.a1_in1k``, head only on cached features, ``--images`` photos of
bench/_photos.py in ten classes; the weights are random in timm's key layout, as this machine has no internet:
speed and size do not depend on their values, and the head's accuracy is what those features allow). Each is
exported to every format with ``core.services.export.export_run``: each figure is the export's own cost,
measured in this process on the run's validation rows (the best of three passes over them, after one):
accuracy beside the trained model's, size, rows/s, and the ratios against the float ONNX file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

FORMATS = ("onnx", "onnx-int8", "executorch", "executorch-int8")
ENV = {**os.environ, "PYTHONPATH": str(HERE.parent), "HF_HUB_OFFLINE": "1"}


def train(runs: Path, *args: str) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "core", "train", "--runs-dir", str(runs), "--strategy", "single", *args],
        cwd=HERE.parent,
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip().splitlines()[-1])


def report(title: str, run: Path, out: Path) -> None:
    from core.services.export import export_run

    print(f"\n{title}")
    print(
        f"  {'format':<16} {'accuracy':>9} {'trained':>8} {'size MB':>8} {'rows/s':>10} {'x onnx rows/s':>14} {'x onnx size':>12}"
    )
    base: dict[str, float] = {}
    for fmt in FORMATS:
        folder = out / fmt
        folder.mkdir(parents=True)
        cost = export_run(run, fmt, folder, accept_loss=True).cost
        if fmt == "onnx":
            base = cost
        print(
            f"  {fmt:<16} {cost['file']:>9.4f} {cost['trained']:>8.4f} {cost['size_bytes'] / 1e6:>8.2f} "
            f"{cost['rows_per_s']:>10,.0f} {cost['rows_per_s'] / base['rows_per_s']:>14.2f} "
            f"{cost['size_bytes'] / base['size_bytes']:>12.2f}"
        )
    print(f"  trained model in torch: {base['trained_rows_per_s']:,.0f} rows/s on the same rows", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/traindesk-photos-small")
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    from _photos import photo_folder, random_weights

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cnn = train(work / "runs", "--epochs", "20", "--set", "model.kind=cnn", "--set", "data.source=builtin:digits")
        report("digits cnn (builtin:digits, 20 epochs)", cnn, work / "cnn")
        folder = photo_folder(Path(args.dir), args.images, (640, 480))
        arch = "resnet18.a1_in1k"
        weights = random_weights(arch, work)
        head = train(
            work / "runs",
            *("--epochs", str(args.epochs), "--set", f"model.kind=timm:{arch}", "--set", f"model.weights={weights}"),
            *("--set", f"data.source=images:{folder}", "--set", "optim.name=adam", "--set", "optim.lr=0.001"),
        )
        summary = json.loads((head / "summary.json").read_text())
        report(
            f"{arch} head on {args.images} photos (val accuracy {summary['final'].get('val_accuracy')})",
            head,
            work / "bb",
        )


if __name__ == "__main__":
    main()
