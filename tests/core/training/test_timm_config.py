"""A timm backbone's images and weights are timm's own answer, in process and without any network: its eval
transform (size, crop and crop mode, interpolation, mean and std) through ``resolve_data_config``, a ViT built
for ``data.image_size``, a weights file loaded by timm (its position embeddings resampled), bad files refused
in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from core.config import Config, apply_overrides
from core.errors import ModelError


def _photo(w: int, h: int) -> Image.Image:
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    rgb = np.stack([127 + 120 * np.sin(x / 9), 127 + 120 * np.cos(y / 7), (x + y) % 256], axis=-1)
    return Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8))


@pytest.mark.parametrize(
    "name, crop_mode",
    [
        ("test_resnet.r160_in1k", "center"),
        ("convnext_small.fb_in22k_ft_in1k_384", "squash"),
        ("deepseek_vit_412m.deepseek_v4_flash_vision_exp", "border"),
    ],
)
def test_images_decode_as_the_backbones_own_eval_transform(tmp_path: Path, name: str, crop_mode: str) -> None:
    from timm.data import create_transform, resolve_data_config
    from timm.models import get_pretrained_cfg

    from core.readers.images import decode_image
    from core.training.backbones import image_input

    size = 40
    cfg = apply_overrides(Config(), [f"model.kind=timm:{name}", f"data.image_size={size}"])
    inp = image_input(cfg)
    assert inp is not None and inp.prep.crop_mode == crop_mode
    pretrained = get_pretrained_cfg(name)
    assert pretrained is not None
    timm_eval = create_transform(
        **resolve_data_config(args={"input_size": (3, size, size)}, pretrained_cfg=pretrained.to_dict())
    )
    mean, std = np.reshape(inp.mean, (3, 1, 1)), np.reshape(inp.std, (3, 1, 1))
    for w, h in ((71, 45), (30, 64)):
        path = tmp_path / f"{w}x{h}.png"
        _photo(w, h).save(path)
        want = timm_eval(Image.open(path).convert("RGB")).numpy()
        got = (decode_image(path, inp.prep) - mean) / std
        assert got.shape == want.shape == (3, size, size)
        assert np.abs(got - want).max() < 1e-4, (name, w, h)


def test_a_vit_of_fixed_size_is_built_for_data_image_size() -> None:
    from core.training.backbones import build_backbone_net

    net = build_backbone_net("timm:vit_tiny_patch16_224", True, (3, 64, 48), 2)  # random weights, no download
    with torch.no_grad():
        assert net(torch.zeros(2, 3, 64, 48)).shape == (2, 2)


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    for c in range(2):
        (tmp_path / "photos" / f"class{c}").mkdir(parents=True)
        for i in range(3):
            _photo(50 + 7 * i, 40 + 11 * c).save(tmp_path / "photos" / f"class{c}" / f"{i}.png")
    return tmp_path / "photos"


def _vit_file(path: Path, **kwargs: Any) -> Path:
    """A ViT's weights at its pretrained size (160: 10 x 10 patches), classifier included, as a user downloads."""
    import timm

    torch.manual_seed(3)
    save_file({k: v.contiguous() for k, v in timm.create_model("test_vit", **kwargs).state_dict().items()}, str(path))
    return path


def test_a_vit_takes_data_image_size_and_its_weights_file_through_timm(photos: Path, tmp_path: Path) -> None:
    import timm

    from core.data import load_data
    from core.data.batches import ImageDataset
    from core.training.backbones import BackboneNet, image_input, start_pretrained
    from core.training.models import build_model

    weights = _vit_file(tmp_path / "test_vit.safetensors")
    sets = ["model.kind=timm:test_vit", f"data.source=images:{photos}", "data.image_size=64", "model.finetune=full"]
    cfg = apply_overrides(Config(), [*sets, f"model.weights={weights}"])
    data = load_data(cfg.data, seed=0, share=False, task=cfg.train.task, images=image_input(cfg))
    info = data.info
    assert info.image_shape == (3, 64, 64)
    net = build_model(cfg.model, info.input_shape, info.num_classes, info.image_shape)
    assert isinstance(net, BackboneNet)
    start_pretrained(cfg.model, [net])

    # timm's own load: the 10 x 10 position embeddings resampled to the 4 x 4 patches of a 64-pixel image
    own = timm.create_model(
        "test_vit", pretrained=True, pretrained_cfg_overlay={"file": str(weights)}, num_classes=0, img_size=64
    ).state_dict()
    loaded = net.backbone.state_dict()
    assert tuple(loaded["pos_embed"].shape) == (1, 17, 64)
    assert loaded.keys() == own.keys() and all(torch.equal(loaded[k], own[k]) for k in own)

    # the first batch of a run goes through, forward and back
    dataset = ImageDataset(data.train, info)  # type: ignore[arg-type]  # an image folder's split
    x = torch.stack([dataset[i][0] for i in range(2)])  # type: ignore[index]  # decodable files: no BadImage
    out = net(x)
    assert out.shape == (2, 2)
    out.sum().backward()

    def error(path: Path) -> str:
        bad = apply_overrides(Config(), [*sets, f"model.weights={path}"])
        fresh = build_model(bad.model, info.input_shape, info.num_classes, info.image_shape)
        with pytest.raises(ModelError) as e:
            start_pretrained(bad.model, [fresh])
        assert "\n" not in str(e.value)
        return str(e.value)

    wider = _vit_file(tmp_path / "wider.safetensors", embed_dim=96)  # the same names, 96 wide, not 64
    assert f"{wider}: does not fit test_vit: " in error(wider) and "size mismatch for" in error(wider)
    other = tmp_path / "resnet.safetensors"
    save_file({k: v.contiguous() for k, v in timm.create_model("test_resnet").state_dict().items()}, str(other))
    assert f"{other}: does not fit test_vit: it has no " in error(other)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not weights at all" * 10)
    assert "is not a readable weights file" in error(junk)
    torch.save({"cls_token": torch.zeros(1), "code": print}, tmp_path / "pickled.pth")  # a function: refused
    assert "is not a readable weights file" in error(tmp_path / "pickled.pth")
    state = timm.create_model("test_vit").state_dict()
    torch.save({"state_dict": state}, tmp_path / "checkpoint.pth")  # a training checkpoint that holds it
    fine = build_model(cfg.model, info.input_shape, info.num_classes, info.image_shape)
    start_pretrained(apply_overrides(cfg, [f"model.weights={tmp_path / 'checkpoint.pth'}"]).model, [fine])
    assert isinstance(fine, BackboneNet) and tuple(fine.backbone.state_dict()["pos_embed"].shape) == (1, 17, 64)
