"""A head-only run of a pretrained backbone in the window: while its features are computed, the progress bar
counts the images (determinate), not "Starting…"; offline, on timm's tiny test network with weights the test
makes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.config import Config, apply_overrides
from tests.trained_run import noise_photos

pytestmark = pytest.mark.slow

ARCH = "test_resnet.r160_in1k"  # timm's own tiny test network


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    return noise_photos(tmp_path / "photos", 5)


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    import timm
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(1)
    path = tmp_path / f"{ARCH}.safetensors"
    save_file({k: v.contiguous() for k, v in timm.create_model(ARCH).state_dict().items()}, str(path))
    return path


def test_the_progress_bar_counts_the_backbone_features_while_they_are_computed(
    make_window: Any, photos: Path, weights: Path, qtbot: Any
) -> None:
    window = make_window()
    sets = [f"model.kind=timm:{ARCH}", f"model.weights={weights}", "model.finetune=head"]
    sets += [f"data.source=images:{photos}", "data.image_size=32", "parallel.strategy=single", "train.epochs=1"]
    window.panel.set_config(apply_overrides(Config(), sets))
    qtbot.waitUntil(lambda: window.action_start.isEnabled(), timeout=120_000)  # the panel has built the backbone

    shown: list[tuple[str, int]] = []  # what the bar showed, each time it changed
    show = window.run_status.show_progress

    def spy(text: str, fraction: float | None = None) -> None:
        show(text, fraction)
        shown.append((window.progress_run.format(), window.progress_run.value()))

    window.run_status.show_progress = spy
    window.action_start.trigger()
    qtbot.waitUntil(lambda: window.controller.ended, timeout=120_000)
    assert window.controller.state == "finished"

    counts = [(text, value) for text, value in shown if text.startswith("Backbone features")]
    assert counts and counts[0] == ("Backbone features 0 of 10 images", 0), shown
    last_text, last_value = counts[-1]
    assert last_text.startswith("Backbone features 10 of 10 images · ") and last_text.endswith(" images/s")
    assert last_value == window.progress_run.maximum()  # determinate: all of them done
    later = shown[shown.index(counts[-1]) + 1 :]
    assert later and not any(text.startswith("Backbone features") for text, _ in later)  # then the epochs
