"""Restarted torchrun groups meet in a store that still holds the last rounds' keys."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist

from core.launchers.torchrun import round_store


def free_store() -> Any:
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))


def meet(master: Any, world: int, ranks: list[int] | None = None) -> dict[int, Any]:
    """Every rank of one round calls round_store on its own client, at once; the stores they got."""
    got: dict[int, Any] = {}
    errors: list[BaseException] = []

    def rank_main(rank: int) -> None:
        try:
            client = dist.TCPStore("127.0.0.1", master.port, is_master=False, timeout=timedelta(seconds=30))
            got[rank] = round_store(client, rank, world, 30)
        except BaseException as exc:  # shown by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in (ranks or range(world))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads), errors
    return got


def test_the_ranks_of_a_round_share_one_store_and_a_new_round_never_sees_the_last_ones_keys() -> None:
    master = free_store()
    first = meet(master, 3)
    first[0].set("group/address", "round one")
    assert {first[r].get("group/address") for r in range(3)} == {b"round one"}
    second = meet(master, 3)  # the hellos of the first round are still in the store
    assert not any(second[r].check(["group/address"]) for r in range(3)), "the new round read the last one's key"
    second[2].set("group/address", "round two")
    assert {second[r].get("group/address") for r in range(3)} == {b"round two"}
    assert first[1].get("group/address") == b"round one"


def test_a_round_with_fewer_ranks_ignores_the_hello_of_a_rank_that_is_gone() -> None:
    master = free_store()
    meet(master, 3)
    smaller = meet(master, 2)
    smaller[1].set("k", "v")
    assert smaller[0].get("k") == b"v"


def test_rank_zero_gives_up_in_one_line_when_a_rank_never_comes() -> None:
    master = free_store()
    client = dist.TCPStore("127.0.0.1", master.port, is_master=False, timeout=timedelta(seconds=30))
    with pytest.raises(TimeoutError, match="1 rank\\(s\\) never said hello"):
        round_store(client, 0, 2, 0.5)
