"""The pretrained-backbone service, offline: the suggested table against timm, the cached mark read from a cache
folder the test makes, a download's progress and cancel (a faked hub download, and huggingface_hub's own download
from a local server that plays the hub), and the engine's one line when the hub cannot be reached."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.config import ModelConfig
from core.errors import ModelError
from core.services import pretrained
from core.services.pretrained import DownloadCancelled, Progress
from tests.hub_cache import COMMIT, cache_weights

ARCH = "test_resnet.r160_in1k"
KIND = f"timm:{ARCH}"
REPO = f"timm/{ARCH}"
BLOB = bytes(range(256)) * 4096  # 1 MiB


def leftovers(cache: Path) -> list[Path]:
    """Files of weights in the cache, whole or partial."""
    return [p for p in cache.rglob("*") if p.is_file() and p.parent.name in ("blobs", COMMIT)]


def test_the_suggested_table_is_what_timm_says() -> None:
    import timm

    for b in pretrained.SUGGESTED:
        net = timm.create_model(b.name, pretrained=False, num_classes=0)
        cfg = timm.models.get_pretrained_cfg(b.name)
        assert b.params == sum(p.numel() for p in net.parameters()), b.name
        assert b.input_size == tuple(cfg.input_size), b.name
        assert b.repo == cfg.hf_hub_id, b.name
    assert pretrained.suggested("timm:resnet18.a1_in1k") is pretrained.SUGGESTED[0]
    assert "ResNet-18 · 11.2M · 224px" == pretrained.SUGGESTED[0].describe()


def test_the_cached_mark_reads_the_hub_cache(hub_cache: Path) -> None:
    first, second = pretrained.SUGGESTED[:2]
    path = cache_weights(hub_cache, first.repo)
    assert pretrained.cached_weights(first.kind) == path
    assert pretrained.cached_weights(second.kind) is None
    assert not pretrained.needs_download(ModelConfig(kind=first.kind))
    assert pretrained.needs_download(ModelConfig(kind=second.kind))
    assert not pretrained.needs_download(ModelConfig(kind=second.kind, weights="none"))
    assert not pretrained.needs_download(ModelConfig(kind="mlp"))
    assert pretrained.needs_download(ModelConfig(kind=KIND))  # a typed name: its repository from timm
    cache_weights(hub_cache, REPO)
    assert not pretrained.needs_download(ModelConfig(kind=KIND))
    assert not pretrained.needs_download(ModelConfig(kind="timm:resnt18"))  # the run says what is wrong


def fake_hub(cache: Path, chunks: int = 8, chunk: int = 1000) -> Any:
    """hf_hub_download as it behaves: the file written aside in chunks (each reported to tqdm_class), then
    renamed into the cache; an exception from the progress class leaves nothing behind."""

    def hf_hub_download(repo_id: str, filename: str, tqdm_class: Any = None, **_: Any) -> str:
        folder = cache / f"models--{repo_id.replace('/', '--')}"
        (folder / "blobs").mkdir(parents=True, exist_ok=True)
        aside = folder / "blobs" / "abc.incomplete"
        bar = tqdm_class(total=chunks * chunk, unit="B", unit_scale=True, desc=filename)
        with aside.open("wb") as fh:
            for _ in range(chunks):
                fh.write(b"x" * chunk)
                bar.update(chunk)
        bar.close()
        blob = folder / "blobs" / "abc"
        aside.rename(blob)
        snapshot = folder / "snapshots" / COMMIT
        snapshot.mkdir(parents=True)
        (snapshot / filename).symlink_to(blob)
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(COMMIT)
        return str(snapshot / filename)

    return hf_hub_download


def test_a_download_reports_its_bytes_and_rate_then_is_cached(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_hub(hub_cache))
    seen: list[Progress] = []
    path = pretrained.download(KIND, seen.append)
    assert path.read_bytes() == b"x" * 8000
    assert seen and seen[-1].done == seen[-1].total == 8000 and seen[-1].rate > 0
    assert seen[-1].describe().startswith("8 kB of 8 kB · ") and seen[-1].describe().endswith("B/s")
    assert Progress(1_500_000, 46_800_000, 5_100_000).describe() == "1.5 MB of 46.8 MB · 5.1 MB/s"
    assert pretrained.cached_weights(KIND) == path
    assert pretrained.download(KIND) == path  # cached: nothing downloaded again


def test_a_cancelled_download_leaves_nothing(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_hub(hub_cache, chunks=50))
    seen: list[Progress] = []
    with pytest.raises(DownloadCancelled):
        pretrained.download(KIND, seen.append, cancel=lambda: len(seen) > 0)
    assert leftovers(hub_cache) == []
    assert pretrained.cached_weights(KIND) is None


class _FakeHub(http.server.BaseHTTPRequestHandler):
    """The hub's resolve endpoint for one file, sent slowly enough to be cancelled half-way."""

    def _headers(self) -> None:
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", '"0f0f0f"')
        self.send_header("Content-Length", str(len(BLOB)))
        self.end_headers()

    def do_HEAD(self) -> None:
        if not self.path.endswith("/model.safetensors"):
            self.send_error(404)
            return
        self._headers()

    def do_GET(self) -> None:
        self._headers()
        step = 64 * 1024
        try:
            for i in range(0, len(BLOB), step):
                self.wfile.write(BLOB[i : i + step])
                self.wfile.flush()
                self.server.sent.wait(0.02)  # type: ignore[attr-defined]  # paces the body
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def local_hub(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from huggingface_hub import constants

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeHub)
    server.sent = threading.Event()  # type: ignore[attr-defined]  # never set: a pacing wait
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 * 1024)  # (10 MB: the whole file in one chunk)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_huggingface_hubs_own_download_reports_and_is_cancelled_with_nothing_left(
    local_hub: str, hub_cache: Path
) -> None:
    seen: list[Progress] = []
    with pytest.raises(DownloadCancelled):
        pretrained.download(KIND, seen.append, cancel=lambda: bool(seen) and seen[-1].done >= 128 * 1024)
    assert 0 < seen[-1].done < len(BLOB) and seen[-1].total == len(BLOB)
    assert leftovers(hub_cache) == []
    assert pretrained.cached_weights(KIND) is None

    seen.clear()
    path = pretrained.download(KIND, seen.append)
    assert path.read_bytes() == BLOB
    assert seen[-1].done == seen[-1].total == len(BLOB)
    assert pretrained.cached_weights(KIND) == path
    assert not list(hub_cache.rglob("*.incomplete"))


def test_without_the_hub_the_engines_one_line(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError) as info:
        pretrained.download(KIND)
    line = str(info.value)
    assert "\n" not in line and "HF_HUB_OFFLINE" in line and "model.weights = PATH" in line
    assert str(hub_cache) in line
