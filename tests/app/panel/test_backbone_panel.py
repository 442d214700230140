"""Pretrained backbones in the window, offline: the model choice lists the suggested backbones (marked when their
weights are in a cache folder the test makes), takes a typed timm name, a weights file and what trains; Start
downloads missing weights first (a faked hub download, written in chunks), then starts; Cancel starts nothing and
leaves no partial file."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from core.config import Config, apply_overrides
from core.services import pretrained
from tests.hub_cache import COMMIT, cache_weights
from tests.trained_run import noise_photos

RESNET, MOBILE = pretrained.SUGGESTED[0], pretrained.SUGGESTED[3]


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    return noise_photos(tmp_path / "photos", 4)


class SlowHub:
    """hf_hub_download, faked: the file written aside in chunks, each reported to the progress class; it goes
    on until ``release`` is set (then renamed into the cache) or the progress class raises (the aside file is
    left where it is, for the service to remove)."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, repo_id: str, filename: str, tqdm_class: Any = None, **_: Any) -> str:
        self.calls += 1
        folder = self.cache / f"models--{repo_id.replace('/', '--')}"
        (folder / "blobs").mkdir(parents=True, exist_ok=True)
        aside = folder / "blobs" / "f00d.incomplete"
        bar = tqdm_class(total=4_000_000, unit="B", unit_scale=True, desc=filename)
        with aside.open("wb") as fh:
            for _ in range(3000):  # about 30 s at most
                fh.write(b"x" * 1000)
                bar.update(1000)
                if self.release.wait(0.01):
                    break
        bar.close()
        blob = folder / "blobs" / "f00d"
        aside.rename(blob)
        snapshot = folder / "snapshots" / COMMIT
        snapshot.mkdir(parents=True)
        (snapshot / filename).symlink_to(blob)
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text(COMMIT)
        return str(snapshot / filename)


def weight_files(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.is_file() and p.parent.name in ("blobs", COMMIT)]


def test_the_model_choice_lists_backbones_marks_cached_weights_and_reads_back(
    make_window: Any, hub_cache: Path, tmp_path: Path
) -> None:
    cache_weights(hub_cache, RESNET.repo)
    window = make_window()
    panel, model = window.panel, window.panel.model
    combo = model.combo_model
    texts = {combo.itemData(i): combo.itemText(i) for i in range(combo.count())}
    assert texts[RESNET.kind] == "ResNet-18 · 11.2M · 224px  ✓"
    assert texts[MOBILE.kind] == "MobileNetV3-S · 1.5M · 224px"  # not cached: no mark
    assert "timm" in texts and "custom" in texts

    assert not model.combo_weights.isVisibleTo(panel) and not model.combo_finetune.isVisibleTo(panel)
    combo.setCurrentIndex(combo.findData(RESNET.kind))
    assert model.combo_weights.isVisibleTo(panel) and model.combo_finetune.isVisibleTo(panel)
    assert not model.edit_hidden.isVisibleTo(panel) and not model.spin_backbone_lr_mult.isVisibleTo(panel)
    assert "in the cache" in model.backbone.label_weights.text()
    model.combo_finetune.setCurrentIndex(model.combo_finetune.findData("full"))
    assert model.spin_backbone_lr_mult.isVisibleTo(panel)
    model.spin_backbone_lr_mult.setValue(0.25)
    cfg = panel.config()
    assert (cfg.model.kind, cfg.model.weights, cfg.model.finetune) == (RESNET.kind, "hub", "full")
    assert cfg.optim.backbone_lr_mult == 0.25

    combo.setCurrentIndex(combo.findData(MOBILE.kind))
    assert "downloads them first" in model.backbone.label_weights.text()

    # any timm name, typed; a weights file, chosen; both shown again as they were
    combo.setCurrentIndex(combo.findData("timm"))
    assert model.edit_timm_model.isVisibleTo(panel)
    model.edit_timm_model.setText("resnet34.a1_in1k")
    weights = tmp_path / "w.safetensors"
    model.choose_weights_file(str(weights))
    assert model.edit_weights_file.isVisibleTo(panel)
    cfg = panel.config()
    assert (cfg.model.kind, cfg.model.weights) == ("timm:resnet34.a1_in1k", str(weights))
    panel.set_config(Config())
    assert panel.config().model.kind == "mlp" and not model.combo_weights.isVisibleTo(panel)
    panel.set_config(cfg)
    assert combo.currentData() == "timm" and model.edit_timm_model.text() == "resnet34.a1_in1k"
    assert panel.config().model == cfg.model

    # the window's file picker for weights: .safetensors and .pth
    from app.panel import files

    assert "*.safetensors" in files.DATA_FILTERS["weights"] and "*.pth" in files.DATA_FILTERS["weights"]


def _backbone_window(make_window: Any, photos: Path, qtbot: Any, kind: str) -> tuple[Any, list[Config]]:
    window = make_window()
    window.panel.set_config(apply_overrides(Config(), [f"data.source=images:{photos}", f"model.kind={kind}"]))
    # the panel counts the backbone's parameters (timm builds it): Start is on once it has
    qtbot.waitUntil(lambda: window.action_start.isEnabled(), timeout=120_000)
    started: list[Config] = []
    window.controller.start = lambda cfg, runs_dir="runs", name=None: started.append(cfg)
    return window, started


def test_start_downloads_missing_weights_first_then_starts(
    make_window: Any, hub_cache: Path, photos: Path, qtbot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub

    hub = SlowHub(hub_cache)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hub)
    window, started = _backbone_window(make_window, photos, qtbot, MOBILE.kind)

    window.action_start.trigger()
    qtbot.waitUntil(lambda: " of 4.0 MB" in window.progress_download.format(), timeout=10_000)
    assert window.progress_download.isVisible() and window.button_cancel_download.isVisible()
    assert "/s" in window.progress_download.format() and "mobilenetv3_small_100" in window.progress_download.toolTip()
    assert not window.action_start.isEnabled() and started == []  # the run waits for its weights
    assert "Downloading" in window.label_state.text()

    hub.release.set()
    qtbot.waitUntil(lambda: len(started) == 1, timeout=10_000)
    assert started[0].model.kind == MOBILE.kind
    assert not window.progress_download.isVisible() and not window.state.downloading
    combo = window.panel.model.combo_model
    assert combo.itemText(combo.findData(MOBILE.kind)).endswith("✓")  # its weights are here now
    assert pretrained.cached_weights(MOBILE.kind) is not None

    # cached: Start starts at once, downloading nothing
    window.action_start.trigger()
    assert len(started) == 2 and hub.calls == 1


def test_cancel_starts_nothing_and_leaves_no_partial_file(
    make_window: Any, hub_cache: Path, photos: Path, qtbot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub

    hub = SlowHub(hub_cache)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hub)
    window, started = _backbone_window(make_window, photos, qtbot, MOBILE.kind)

    window.action_start.trigger()
    qtbot.waitUntil(lambda: " of 4.0 MB" in window.progress_download.format(), timeout=10_000)
    assert weight_files(hub_cache)  # half a file, written aside
    window.button_cancel_download.click()
    qtbot.waitUntil(lambda: not window.state.downloading, timeout=10_000)
    assert started == [] and weight_files(hub_cache) == []
    assert pretrained.cached_weights(MOBILE.kind) is None
    assert "cancelled" in window.log_pane.toPlainText()
    assert window.action_start.isEnabled() and not window.progress_download.isVisible()


def test_offline_start_says_the_engines_one_line_and_starts_nothing(
    make_window: Any, hub_cache: Path, photos: Path, qtbot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    window, started = _backbone_window(make_window, photos, qtbot, MOBILE.kind)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    window.action_start.trigger()
    qtbot.waitUntil(lambda: not window.state.downloading, timeout=10_000)
    line = window.panel.config_error()
    assert started == [] and "HF_HUB_OFFLINE" in line and "model.weights = PATH" in line and "\n" not in line


@pytest.mark.qt_log_ignore("does not support raise", "does not support grabbing", "propagateSizeHints")  # offscreen
def test_the_model_list_shows_every_backbone_whole_at_900x600(
    make_window: Any, qtbot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every backbone's weights in the cache (the longest lines, marked ✓): the combo, narrower than its
    line, has the chosen line whole in its tooltip, and its list opens as wide as its longest line."""
    monkeypatch.setattr(pretrained, "cached_weights", lambda kind: Path("/cache") / kind)
    window = make_window()
    window.resize(900, 600)
    qtbot.waitUntil(lambda: window.width() == 900, timeout=5_000)
    model = window.panel.model
    model.backbone.refresh_marks()
    combo = model.combo_model
    combo.setCurrentIndex(combo.findData(pretrained.SUGGESTED[2].kind))
    assert combo.toolTip() == combo.currentText() and combo.currentText().endswith("224px  ✓")
    combo.showPopup()
    try:
        view = combo.view()
        qtbot.waitUntil(view.isVisible, timeout=5_000)
        metrics = view.fontMetrics()
        widest = max(metrics.horizontalAdvance(combo.itemText(i)) for i in range(combo.count()))
        assert view.viewport().width() >= widest + 16, (view.viewport().width(), widest)
    finally:
        combo.hidePopup()
