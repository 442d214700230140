"""The cache of a frozen backbone's features on disk: an update adds a chunk and leaves every file written before
as it was; a run that finds another computing the same features says so in one line and ends its wait on a
stop; an extraction process builds the network on the meta device and takes the session's weights."""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.readers import ReadStopped, stop_reading_when
from core.training import features
from core.training.features import cached_features

DIM = 5


def _photos(folder: Path, n: int, start: int = 0) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(start, start + n):
        path = folder / f"{i}.png"
        path.write_bytes(b"stands for an image %d" % i)
        paths.append(str(path))
    return paths


def _feature_of(path: str) -> np.ndarray:
    return np.full(DIM, float(Path(path).stem), dtype=np.float32)


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the backbone is asked to compute, each file's features its number DIM times."""
    asked: list[str] = []

    def compute(net: Any, kind: str, paths: list[str], *_: Any, **__: Any) -> np.ndarray:
        asked.extend(paths)
        return np.stack([_feature_of(p) for p in paths])

    monkeypatch.setattr(features, "compute", compute)
    return asked


def _features(paths: list[str], cache: Path, say: Any = None) -> tuple[np.ndarray, int]:
    told = {"say": say} if say is not None else {}
    return cached_features(None, "timm:x", paths, None, cache, 1, 0, None, **told)  # type: ignore[arg-type]


def test_an_update_adds_a_chunk_and_leaves_what_was_written_before(tmp_path: Path, computed: list[str]) -> None:
    cache = tmp_path / "cache"
    first = _photos(tmp_path / "photos", 3)
    feats, n = _features(first, cache)
    assert n == 3 and feats.tolist() == [_feature_of(p).tolist() for p in first]
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cache.iterdir() if p.name != "lock"}
    before.pop("index.json")  # the one file an update rewrites: it lists the chunks

    more = first + _photos(tmp_path / "photos", 2, start=3)
    feats, n = _features(more[::-1], cache)
    assert n == 2 and sorted(computed) == sorted(more)  # only the new files were computed
    assert feats.tolist() == [_feature_of(p).tolist() for p in more[::-1]]
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cache.iterdir()}
    assert before and all(after[name] == was for name, was in before.items())  # not rewritten, not replaced
    assert len(list(cache.glob("chunk-*.npy"))) == 2

    feats, n = _features(more, cache)  # all cached now
    assert n == 0 and feats.tolist() == [_feature_of(p).tolist() for p in more]


def test_a_chunk_the_index_does_not_list_is_not_read_and_a_broken_one_is_computed_again(
    tmp_path: Path, computed: list[str]
) -> None:
    cache = tmp_path / "cache"
    paths = _photos(tmp_path / "photos", 4)
    _features(paths[:2], cache)
    (cache / "chunk-000002.npy").write_bytes(b"half an update, killed before its index")
    _features(paths, cache)
    assert computed == paths  # the leftover chunk was written over, not read
    assert [len(np.load(p)) for p in sorted(cache.glob("chunk-*.npy"))] == [2, 2]

    (cache / "chunk-000001.npy").write_bytes(b"not an array")
    feats, n = _features(paths, cache)
    assert n == 2 and feats.tolist() == [_feature_of(p).tolist() for p in paths]


def test_a_run_waiting_for_another_says_so_once_and_a_stop_ends_the_wait(tmp_path: Path, computed: list[str]) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    paths = _photos(tmp_path / "photos", 2)
    said: list[str] = []
    stop = threading.Event()
    ended: list[BaseException | None] = []

    def second_run() -> None:
        try:
            with stop_reading_when(stop.is_set):
                _features(paths, cache, said.append)
            ended.append(None)
        except BaseException as exc:  # what ended it, for the test to see
            ended.append(exc)

    with open(cache / "lock", "w") as held:  # another run computing these features
        fcntl.flock(held, fcntl.LOCK_EX)
        thread = threading.Thread(target=second_run, name="second-run")
        thread.start()
        try:
            deadline = threading.Event()
            for _ in range(200):
                if said:
                    break
                deadline.wait(0.05)
            assert said == [f"waiting for another run computing the same backbone features (cache {cache})"]
            stop.set()
            thread.join(10)
            assert not thread.is_alive(), "the wait did not end on a stop"
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
            thread.join(10)
    assert len(ended) == 1 and isinstance(ended[0], ReadStopped) and computed == []
    assert len(said) == 1

    _features(paths, cache, said.append)  # nobody holds it now: no line
    assert len(said) == 1 and computed == paths


@pytest.mark.parametrize("arch", ["test_resnet.r160_in1k", "swin_tiny_patch4_window7_224"])  # swin: unsaved buffers
def test_an_extraction_process_builds_the_network_on_the_meta_device_with_the_sessions_weights(arch: str) -> None:
    from types import SimpleNamespace

    import torch

    from core.training.backbones import build_backbone_net
    from core.training.features import rebuilt, unsaved_buffers

    kind, shape = f"timm:{arch}", (3, 64, 64) if arch.startswith("test_") else (3, 224, 224)
    net = build_backbone_net(kind, True, shape, 3).eval()
    info = SimpleNamespace(input_shape=shape, num_classes=3)
    torch.manual_seed(0)
    again = rebuilt(kind, True, info, net.state_dict(), unsaved_buffers(net)).eval()  # type: ignore[arg-type]
    drawn = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(drawn, torch.rand(1))  # nothing was initialised at random: no number drawn
    mine, theirs = net.state_dict(), again.state_dict()
    assert all(theirs[k].data_ptr() == v.data_ptr() for k, v in mine.items())  # the weights themselves, no copy
    x = torch.rand(2, *shape)
    with torch.inference_mode():
        assert torch.equal(net.features(x), again.features(x))
