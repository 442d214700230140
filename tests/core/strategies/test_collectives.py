"""What ranks do together: a worker alone, a torch.distributed group of two, and the strategies' choice."""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from core.config import Config
from core.strategies import get_strategy, strategy_class
from core.strategies.base import Strategy
from core.strategies.collectives import Collectives, ProcessGroup, SingleProcess

CPU = torch.device("cpu")


def test_a_worker_alone_is_its_own_world() -> None:
    alone = SingleProcess()
    assert (alone.rank, alone.world) == (0, 1)
    t = torch.tensor([3.0, 4.0])
    reduced = alone.all_reduce(t, op="max")
    assert torch.equal(reduced, t) and reduced is not t
    assert alone.all_gather({"a": 1}) == [{"a": 1}] and alone.gather([1, 2]) == [[1, 2]]
    alone.barrier()
    assert alone.agree(2) == 2 and alone.publishes_weights()
    x, y = torch.arange(10).view(5, 2), torch.arange(5)
    xs, ys = alone.eval_split(x, y)
    assert xs is x and ys is y
    stats = torch.tensor([1.5, 2.0, 5.0])
    assert alone.reduce_eval(stats) and stats.tolist() == [1.5, 2.0, 5.0]


def test_a_worker_alone_trains_the_shared_weights_on_the_cpu() -> None:
    shared = torch.nn.Linear(2, 1)
    model, net = SingleProcess().wrap_model(shared, CPU)
    assert model is shared and net is shared


def _rank_main(rank: int, init: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2, timeout=timedelta(seconds=120))
    try:
        group = ProcessGroup(CPU)
        t = torch.tensor([float(rank + 1), float(10 * (rank + 1))])
        summed, largest = group.all_reduce(t), group.all_reduce(t, op="max")
        x, y = torch.arange(14).view(7, 2), torch.arange(7)
        stats = torch.tensor([float(rank), 1.0, 2.0])
        reports = group.reduce_eval(stats)
        shared = torch.nn.Linear(2, 1)
        model, net = group.wrap_model(shared, CPU)
        group.barrier()
        result: dict[str, Any] = {
            "rank": group.rank,
            "world": group.world,
            "joined": ProcessGroup.joined(),
            "summed": summed.tolist(),
            "largest": largest.tolist(),
            "t_after": t.tolist(),
            "gathered": group.gather({"rank": rank}),
            "agreed": group.agree(3 if rank == 1 else 1),
            "publishes": group.publishes_weights(),
            "split": group.eval_split(x, y)[1].tolist(),
            "stats": stats.tolist(),
            "reports": reports,
            "copy": model is not shared,
            "ddp": type(net).__name__,
        }
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()
    # As a worker does (core.worker.process): skip the interpreter's teardown, where gloo's threads may still
    # hold the DDP reducer's work and abort the process (SIGABRT, "terminate called without an active exception")
    os._exit(0)


def test_a_process_group_of_two_reduces_gathers_and_splits(tmp_path: Path) -> None:
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.start_processes(_rank_main, args=(init, str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    for r, result in ((0, r0), (1, r1)):
        assert (result["rank"], result["world"], result["joined"]) == (r, 2, True)
        assert result["summed"] == [3.0, 30.0] and result["largest"] == [2.0, 20.0]
        assert result["t_after"] == [float(r + 1), float(10 * (r + 1))]  # the input is left as it was
        assert result["gathered"] == [{"rank": 0}, {"rank": 1}]
        assert result["agreed"] == 3  # the max: a stop wins over a checkpoint
        assert result["stats"] == [1.0, 2.0, 4.0]  # summed in place
        assert result["copy"] and result["ddp"] == "DistributedDataParallel"
    assert (r0["publishes"], r1["publishes"]) == (True, False)
    assert (r0["reports"], r1["reports"]) == (True, False)
    assert r0["split"] == [0, 2, 4, 6] and r1["split"] == [1, 3, 5]


def test_outside_a_group_no_process_group_is_joined() -> None:
    assert not ProcessGroup.joined()
    assert isinstance(
        get_strategy(Config().replace("parallel", strategy="ddp", workers=2)).collectives(CPU), SingleProcess
    )


@pytest.mark.parametrize("name", ["single", "hogwild", "sweep", "search"])
def test_strategies_whose_workers_step_alone_choose_a_single_process(name: str) -> None:
    assert isinstance(strategy_class(name)(Config()).collectives(CPU), SingleProcess)


def test_a_strategy_must_choose_its_collectives() -> None:
    @dataclasses.dataclass(frozen=True)
    class Forgetful(Strategy):
        name = "forgetful"

    with pytest.raises(TypeError, match="collectives"):
        Forgetful(Config())  # type: ignore[abstract]  # the point: it cannot be made

    class Chosen(Forgetful):
        def collectives(self, device: torch.device) -> Collectives:
            return SingleProcess()

    assert isinstance(Chosen(Config()).collectives(CPU), SingleProcess)


def test_collectives_must_give_every_primitive() -> None:
    class Partial(Collectives):
        rank = 0
        world = 1

    with pytest.raises(TypeError, match="all_gather"):
        Partial()  # type: ignore[abstract]  # the point: it cannot be made
