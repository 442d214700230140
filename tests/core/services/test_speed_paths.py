"""Start-up paths and the advisor: behaviour only (speed is measured in bench/, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.config import Config, apply_overrides
from core.services.advisor import advise, candidates
from tests.cli_run import core_env, run_core

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_both_start_methods_train(method: str, tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from core.launchers import local as launcher\n"
        "from core.config import Config, apply_overrides\n"
        "from core.session import Session\n"
        "if __name__ == '__main__':\n"
        "    s = Session(apply_overrides(Config(), ['train.epochs=8']), runs_dir=sys.argv[1])\n"
        "    s.start(); s.wait(120)\n"
        "    print(launcher.get_context().get_start_method(), s.state, s.summary['final']['val_accuracy'])\n"
    )
    script = tmp_path / "run.py"
    script.write_text(code)
    res = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=240,
        env=core_env(TRAINDESK_START_METHOD=method),
    )
    assert res.returncode == 0, res.stderr
    started_with, state, accuracy = res.stdout.split()
    assert started_with == method and state == "finished" and float(accuracy) >= 0.9


def test_candidates_cover_each_strategy() -> None:
    assert candidates(2) == [("single", 1), ("hogwild", 1), ("hogwild", 2), ("ddp", 2)]
    assert candidates(3, ("hogwild",)) == [("hogwild", 1), ("hogwild", 2), ("hogwild", 3)]


def test_advisor_returns_a_suggestion_it_measured() -> None:
    cfg = apply_overrides(Config(), ["data.source=builtin:iris", "model.hidden=[16]", "train.batch_size=8"])
    result = advise(cfg, seconds=0.8, max_workers=2, strategies=("single", "hogwild"))
    probes = result["probes"]
    assert [(p["strategy"], p["workers"]) for p in probes] == [("single", 1), ("hogwild", 1), ("hogwild", 2)]
    assert all(p["samples_per_s"] > 0 for p in probes)
    best = result["suggestion"]
    chosen = next(p for p in probes if (p["strategy"], p["workers"]) == (best["strategy"], best["workers"]))
    assert chosen["samples_per_s"] == best["samples_per_s"]
    eligible = [p for p in probes if p["best_accuracy"] is not None and p["best_accuracy"] >= result["target_accuracy"]]
    assert best["samples_per_s"] == max(p["samples_per_s"] for p in eligible)
    json.dumps(result)


def test_bench_command_validates_and_suggests(tmp_path: Path) -> None:
    env = core_env()
    bad = run_core(
        "bench",
        "--strategies",
        "magic",
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert bad.returncode == 2 and "--strategies takes single, hogwild, ddp" in bad.stderr
    res = run_core(
        "bench",
        "--seconds",
        "0.6",
        "--strategies",
        "hogwild",
        "--max-workers",
        "2",
        "--set",
        "data.source=builtin:iris",
        "--json",
        "out.json",
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("suggestion: --strategy hogwild --workers ")
    assert len(json.loads((tmp_path / "out.json").read_text())["probes"]) == 2


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw"])
def test_optimizers_use_fused_kernels_where_torch_has_them(name: str) -> None:
    import torch

    from core.config import OptimConfig
    from core.training.optimizers import make_optimizer

    cpu = torch.nn.Linear(4, 3)
    opt = make_optimizer(cpu.parameters(), OptimConfig(name=name), 0.1)
    assert opt.defaults["fused"] is True
    before = cpu.weight.detach().clone()
    torch.nn.functional.cross_entropy(cpu(torch.randn(8, 4)), torch.randint(0, 3, (8,))).backward()
    opt.step()  # the fused kernel runs here on this machine's device
    assert not torch.equal(before, cpu.weight.detach())
    state = opt.state_dict()  # a checkpoint's optimizer state loads back into a fused optimizer
    again = make_optimizer(cpu.parameters(), OptimConfig(name=name), 0.1)
    again.load_state_dict(state)
    assert again.param_groups[0]["fused"] is True
    meta = torch.nn.Linear(4, 3, device="meta")  # a device without fused kernels: the plain loop
    assert not make_optimizer(meta.parameters(), OptimConfig(name=name), 0.1).defaults["fused"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_workers_keep_the_memory_each_step_frees() -> None:
    """Blocks of a few MiB made and freed on every step are not faulted in again each time."""
    code = (
        "import resource, sys\n"
        "import numpy as np\n"
        "from core.host.machine import keep_freed_memory\n"
        "if sys.argv[1] == 'keep':\n"
        "    assert keep_freed_memory()\n"
        "def steps():\n"
        "    for _ in range(50):  # a step's tensors: a few of 4 MiB each, all pages written, then freed\n"
        "        a = [np.ones(1 << 20, np.float32) for _ in range(3)]\n"
        "        del a\n"
        "steps()\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "steps()\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n"
    )
    faults = {}
    for mode in ("keep", "default"):
        res = subprocess.run(
            [sys.executable, "-c", code, mode],
            capture_output=True,
            text=True,
            timeout=120,
            env=core_env(),
        )
        assert res.returncode == 0, res.stderr
        faults[mode] = int(res.stdout)
    assert faults["default"] > 50 * 500  # glibc's default: the freed heap is trimmed, then faulted in again
    assert faults["keep"] < 500, faults
