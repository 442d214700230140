"""What a process keeps of torch's CUDA libraries once it has imported torch and runs on the CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import core_env

ROOT = Path(__file__).resolve().parents[3]

DROP_SCRIPT = """
import re

import torch

from core.host.machine import drop_cuda_library_pages

CUDA = re.compile(r"/lib(cublasLt|nvJitLink|nvrtc|torch_cuda)[.]so")


def resident_kb():
    total, counting = 0, False
    for line in open("/proc/self/smaps"):
        head = line.split()
        if "-" in head[0] and not head[0].endswith(":"):
            counting = len(head) > 5 and bool(CUDA.search(head[5]))
        elif counting and head[0] == "Rss:":
            total += int(head[1])
    return total


before = resident_kb()
if before < 10_000:
    print("skip: no CUDA build")
    raise SystemExit
dropped = drop_cuda_library_pages()
after = resident_kb()
assert dropped > 0 and after < before / 2, (before, after)
model = torch.nn.Linear(4, 2)
model(torch.ones(3, 4)).sum().backward()  # the CPU's work still runs: nothing it needs was lost
assert model.weight.grad is not None
print("ok", before, after)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="smaps and madvise are Linux's")
def test_cuda_library_pages_only_their_loading_touched_are_let_go() -> None:
    done = subprocess.run(
        [sys.executable, "-c", DROP_SCRIPT], cwd=ROOT, env=core_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.startswith(("ok", "skip")), done.stderr
    print(done.stdout)
