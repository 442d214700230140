"""Every benchmark, one after the other, on this machine: ``make bench``.

Prints each script's figures under a heading; docs/PERFORMANCE.md holds the
latest results with the machine they ran on.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    ("Engine vs a bare loop", ["engine_vs_bare.py", "--repeats", "5"]),
    ("TensorBoard and MLflow mirrors on and off", ["tracking_cost.py", "--repeats", "5"]),
    ("Cold start from the shell", ["cold_start.py", "--repeats", "5"]),
    ("Start, pause, stop and memory", ["latency_memory.py", "--repeats", "5"]),
    ("Against PyTorch Lightning", ["lightning_compare.py", "--repeats", "3"]),
    ("Live plots", ["gui_latency.py"]),
    ("CSV loading", ["csv_load.py"]),
    ("Memory as tables grow", ["memory_growth.py"]),
    ("Batch prediction", ["predict_throughput.py"]),
    ("Tuning on digits", ["tuning_digits.py"]),
    ("torchrun against the local launcher", ["torchrun_vs_local.py", "--repeats", "3"]),
    ("Optimizer step: fused kernels against torch's defaults", ["optimizer_step.py"]),
    ("Hogwild against hand-written loops", ["hogwild_reference.py", "--repeats", "5"]),
    ("Image-folder training against a bare DataLoader loop", ["image_folder.py", "--repeats", "3"]),
    ("Decoding real-size photos against Pillow alone", ["image_decode.py"]),
    ("Pretrained backbones on camera-size photos, against Lightning + timm", ["backbones.py"]),
    ("Serving under load against LitServe, FastAPI and a constant endpoint", ["serve_load.py"]),
]


def main() -> int:
    failed = 0
    for title, args in SCRIPTS:
        print(f"\n# {title}: {' '.join(['python bench/' + args[0], *args[1:]])}", flush=True)
        t0 = time.perf_counter()
        code = subprocess.call([sys.executable, str(HERE / args[0]), *args[1:]])
        print(f"({time.perf_counter() - t0:.0f} s, exit {code})", flush=True)
        failed += code != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
