"""The ddp worker under torchrun (env:// initialisation), two ranks on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Each rank writes its own result file (ranks printing to one stdout interleave).
SCRIPT = """
import json, sys
from pathlib import Path
from core.config import Config, apply_overrides
from core.data import load_data
from core.launchers.torchrun import local_channels, torchrun_spec, under_torchrun
from core.models import build_model
from core.workers import run_worker

assert under_torchrun()
cfg = apply_overrides(Config(), ["parallel.strategy=ddp", "train.epochs=8"])
data = load_data(cfg.data, seed=cfg.train.seed, share=False)
import torch
torch.manual_seed(0)
model = build_model(cfg.model, data.info.input_shape, data.info.num_classes, data.info.image_shape)
records = []
spec = torchrun_spec(cfg)
code = run_worker(spec, data, [model.state_dict()], local_channels(records.extend))
evals = [r for r in records if r["kind"] == "eval"]
steps = [r for r in records if r["kind"] == "step"]
result = {"rank": spec.rank, "code": code, "evals": len(evals),
          "acc": evals[-1]["val_accuracy"] if evals else None, "samples": steps[-1]["samples"]}
Path(sys.argv[1], f"rank{spec.rank}.json").write_text(json.dumps(result))
"""


def test_ddp_worker_runs_under_torchrun(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    out = tmp_path / "results"
    out.mkdir()
    res = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
         str(out)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["rank0.json", "rank1.json"]
    results = [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["code"] == 0 for r in results)
    assert results[0]["evals"] == 8 and results[1]["evals"] == 0  # rank 0 reports the all-reduced eval
    assert results[0]["acc"] >= 0.9
    assert results[0]["samples"] == results[1]["samples"]  # equal shards
