"""Pretrained timm backbones, without any network: weights from a local file and from a Hugging Face cache
folder read with HF_HUB_OFFLINE=1; head-only training on cached features, full fine-tuning; every face agrees."""

from __future__ import annotations

import base64
import csv
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from core.config import Config, apply_overrides, from_dict
from core.runfiles.writing import read_metrics
from core.training.checkpoint import load_checkpoint
from tests.cli_run import core_env, run_core

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
ARCH = "test_resnet.r160_in1k"  # timm's own tiny test network (0.37 M parameters), pretrained config and all
KIND = f"timm:{ARCH}"
SIZE = 32


def _env(**extra: str) -> dict[str, str]:
    return core_env(**{"HF_HUB_OFFLINE": "1", **extra})


def traindesk(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return run_core(
        *args,
        timeout=600,
        env=env or _env(),
        cwd=cwd,
    )


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three classes of 16 small photos each (JPEG and PNG, sizes that differ from the model's), told apart by
    their colour."""
    from PIL import Image

    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for c in range(3):
        (root / f"class{c}").mkdir()
        for i in range(16):
            a = (rng.random((40 + i, 50, 3)) * 90).astype(np.uint8)
            a[..., c] += 140
            Image.fromarray(a).save(root / f"class{c}" / (f"{i}.jpg" if i % 2 else f"{i}.png"))
    return root


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A timm network's weights in timm's key layout (its ImageNet classifier included), as a user downloads."""
    import timm

    torch.manual_seed(1)
    net = timm.create_model(ARCH, pretrained=False)
    path = tmp_path_factory.mktemp("weights") / f"{ARCH}.safetensors"
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))
    return path


def _train(photos: Path, runs: Path, *sets: str, env: dict[str, str] | None = None) -> Path:
    args = ["train", "--runs-dir", str(runs), "--strategy", "single", "--set", f"model.kind={KIND}"]
    args += ["--set", f"data.source=images:{photos}", "--set", f"data.image_size={SIZE}"]
    for s in sets:
        args += ["--set", s]
    done = traindesk(*args, env=env)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


def _feature_line(run_dir: Path) -> str:
    lines = [r["message"] for r in read_metrics(run_dir / "metrics.jsonl") if r.get("kind") == "log"]
    return next(line for line in lines if "backbone features of" in line)


def _backbone(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k[len("backbone.") :]: v for k, v in state.items() if k.startswith("backbone.")}


def test_head_only_trains_on_cached_features_leaves_the_backbone_bit_identical_and_reuses_the_cache(
    photos: Path, weights: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    sets = (f"model.weights={weights}", "train.epochs=40", "optim.name=adam", "optim.lr=0.01")
    first = _train(photos, runs, *sets)
    assert "48 computed, 0 from the cache" in _feature_line(first)

    # the backbone is the file's, bit for bit (its classifier replaced by a head for 3 classes)
    file_state = load_file(str(weights))
    trained = load_checkpoint(first)["model"]
    backbone = _backbone(trained)
    assert backbone and all(torch.equal(v, file_state[k]) for k, v in backbone.items())
    assert tuple(trained["head.weight"].shape) == (3, int(file_state["fc.weight"].shape[1]))

    # the head reaches what scikit-learn's logistic regression reaches on the same cached features and split
    summary = json.loads((first / "summary.json").read_text())
    from sklearn.linear_model import LogisticRegression

    feats, labels, k = _cached_split(first)
    ref = LogisticRegression(max_iter=2000).fit(feats[:k], labels[:k]).score(feats[k:], labels[k:])
    assert summary["final"]["val_accuracy"] >= ref - 0.01, (summary["final"], ref)

    # a second run computes nothing; a touched file computes only itself
    second = _train(photos, runs, *sets[:1], "train.epochs=1")
    assert "0 computed, 48 from the cache" in _feature_line(second)
    touched = photos / "class1" / "3.jpg"
    st = touched.stat()
    os.utime(touched, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
    third = _train(photos, runs, *sets[:1], "train.epochs=1")
    assert "1 computed, 47 from the cache" in _feature_line(third)


def _cached_split(run_dir: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """The features and labels of the run's split, computed in this process by the run's own backbone."""
    from core.data import load_data
    from core.launchers.local import get_context
    from core.training.backbones import image_input
    from core.training.features import compute
    from core.training.models import build_model

    ckpt = load_checkpoint(run_dir)
    cfg = from_dict(ckpt["config"])
    data = load_data(cfg.data, seed=cfg.train.seed, share=False, task=cfg.train.task, images=image_input(cfg))
    info = data.info
    net = build_model(cfg.model, info.input_shape, info.num_classes, info.image_shape)
    net.load_state_dict(ckpt["model"])
    paths = list(data.train.paths) + list(data.val.paths)  # type: ignore[union-attr]  # an image folder's splits
    feats = compute(net, KIND, paths, info, 1, 0, get_context())  # type: ignore[arg-type]  # a BackboneNet
    labels = np.asarray(list(data.train.labels) + list(data.val.labels))  # type: ignore[union-attr]
    return feats, labels, len(data.train)


def test_full_fine_tuning_changes_the_backbone_at_its_own_rate(photos: Path, weights: Path, tmp_path: Path) -> None:
    run = _train(photos, tmp_path / "runs", f"model.weights={weights}", "model.finetune=full", "train.epochs=2")
    file_state = load_file(str(weights))
    backbone = _backbone(load_checkpoint(run)["model"])
    changed = [k for k, v in backbone.items() if v.is_floating_point() and not torch.equal(v, file_state[k])]
    assert changed, "full fine-tuning left every backbone weight as it was"
    from core.training.backbones import BackboneNet
    from core.training.models import build_model
    from core.training.optimizers import make_optimizer

    cfg = apply_overrides(
        Config(),
        [f"model.kind={KIND}", "model.finetune=full", "optim.lr=0.1", "optim.backbone_lr_mult=0.25"],
    )
    net = build_model(cfg.model, (3, SIZE, SIZE), 3, (3, SIZE, SIZE))
    assert isinstance(net, BackboneNet)
    opt = make_optimizer(net, cfg.optim, 0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, pytest.approx(0.025)]


def test_a_vit_trains_head_only_at_data_image_size_from_a_file_timm_loads(photos: Path, tmp_path: Path) -> None:
    import timm

    torch.manual_seed(2)
    weights = tmp_path / "test_vit.safetensors"  # at its pretrained 160 pixels: 10 x 10 patches
    save_file({k: v.contiguous() for k, v in timm.create_model("test_vit").state_dict().items()}, str(weights))
    run = _train(photos, tmp_path / "runs", "model.kind=timm:test_vit", f"model.weights={weights}", "train.epochs=1")
    assert "48 computed" in _feature_line(run)
    backbone = _backbone(load_checkpoint(run)["model"])
    own = timm.create_model(
        "test_vit", pretrained=True, pretrained_cfg_overlay={"file": str(weights)}, num_classes=0, img_size=SIZE
    ).state_dict()
    assert tuple(backbone["pos_embed"].shape) == (1, 5, 64)  # resampled to the 2 x 2 patches of 32 pixels
    assert all(torch.equal(v, own[k]) for k, v in backbone.items())


def _hub_cache(home: Path, weights: Path) -> Path:
    """A Hugging Face cache holding timm's repository for ARCH, laid out as huggingface_hub writes it."""
    repo = home / "hub" / f"models--timm--{ARCH}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").write_bytes(weights.read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return home


def test_hub_weights_come_from_the_hugging_face_cache_offline(photos: Path, weights: Path, tmp_path: Path) -> None:
    home = _hub_cache(tmp_path / "hf", weights)
    run = _train(photos, tmp_path / "runs", "train.epochs=1", env=_env(HF_HOME=str(home)))  # weights = "hub"
    file_state = load_file(str(weights))
    assert all(torch.equal(v, file_state[k]) for k, v in _backbone(load_checkpoint(run)["model"]).items())


def test_bad_backbones_and_weights_are_one_line_each(photos: Path, weights: Path, tmp_path: Path) -> None:
    base = ["train", "--runs-dir", str(tmp_path / "runs"), "--strategy", "single", "--epochs", "1"]
    base += ["--set", f"data.source=images:{photos}", "--set", f"data.image_size={SIZE}"]

    def error(*sets: str, env: dict[str, str] | None = None) -> str:
        args = list(base)
        for s in sets:
            args += ["--set", s]
        done = traindesk(*args, env=env)
        assert done.returncode == 2, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert "Traceback" not in done.stderr, done.stderr
        return lines[-1]

    assert "closest names timm knows: resnet18" in error("model.kind=timm:resnt18")
    empty = tmp_path / "empty-hf"
    line = error(f"model.kind={KIND}", env=_env(HF_HOME=str(empty)))
    assert "HF_HUB_OFFLINE" in line and "model.weights = PATH" in line and str(empty) in line
    assert not any(p.is_file() and p.stat().st_size > 0 for p in empty.rglob("*.safetensors"))  # nothing half-written

    import timm

    other = tmp_path / "other.safetensors"
    save_file(
        {k: v.contiguous() for k, v in timm.create_model("test_efficientnet.r160_in1k").state_dict().items()},
        str(other),
    )
    line = error(f"model.kind={KIND}", f"model.weights={other}")
    assert f"{other}: does not fit {ARCH}" in line
    line = error(f"model.kind={KIND}", f"model.weights={tmp_path / 'missing.safetensors'}")
    assert "file not found" in line


def test_exports_and_predict_agree_on_raw_image_files(photos: Path, weights: Path, tmp_path: Path) -> None:
    run = _train(photos, tmp_path / "runs", f"model.weights={weights}", "train.epochs=3")

    def predicted(model: Path, *more: str) -> list[list[str]]:
        out = tmp_path / f"{model.name}{len(more)}.csv"
        done = traindesk("predict", str(model), str(photos), "--out", str(out), *more)
        assert done.returncode == 0, done.stderr
        with out.open() as fh:
            return list(csv.reader(fh))

    reference = predicted(run, "--workers", "1")
    assert len(reference) == 49 and reference[0][:2] == ["id", "predicted"]
    assert predicted(run, "--workers", "2") == reference  # a pool process crops as this one does
    for fmt, suffix in (("onnx", "onnx"), ("torch-export", "pt2"), ("safetensors", "safetensors")):
        folder = tmp_path / fmt
        folder.mkdir()
        done = traindesk("export", str(run), "--format", fmt, "--out", str(folder / f"model.{suffix}"))
        assert done.returncode == 0, done.stderr
        rows = predicted(folder / f"model.{suffix}")
        assert [r[:2] for r in rows] == [r[:2] for r in reference], fmt
        probs = np.asarray([[float(v) for v in r[2:]] for r in rows[1:]])
        ref = np.asarray([[float(v) for v in r[2:]] for r in reference[1:]])
        assert np.abs(probs - ref).max() < 1e-4, fmt
    meta = json.loads((tmp_path / "onnx" / "model.json").read_text())
    assert meta["architecture"]["kind"] == KIND and meta["input"]["image_shape"] == [3, SIZE, SIZE]
    assert meta["input"]["image_prep"]["resize"] == "crop"  # the backbone's own eval transform travels with it

    # serve answers the raw files as predict does (base64 PNG and JPEG of their own sizes)
    from tests.core.services.serve.test_serve import serving

    picked = [r for r in reference[1:] if r[0].endswith(("0.png", "1.jpg", "5.jpg"))]
    images = [base64.b64encode((photos / r[0]).read_bytes()).decode() for r in picked]
    with serving(run, tmp_path) as server:
        server.wait_ready()
        answer = server.post("/predict", json={"images": images})
    assert answer.status_code == 200, answer.text
    classes = reference[0][2:]
    for row, got in zip(picked, answer.json()["predictions"]):
        assert got["class"] == row[1]
        served = [got["probabilities"][c.removeprefix("prob_")] for c in classes]
        assert np.abs(np.asarray(served) - np.asarray([float(v) for v in row[2:]])).max() < 1e-4


def test_a_race_of_a_head_only_run_computes_its_features_once_for_every_variant(
    photos: Path, weights: Path, tmp_path: Path
) -> None:
    import re
    import shutil

    from core.services.race.plan import plan_race
    from core.services.race.race import Race
    from core.session import Session
    from core.training.features import CACHE_FOLDER

    runs = tmp_path / "runs"
    sets = [f"model.kind={KIND}", f"model.weights={weights}", f"data.source=images:{photos}"]
    sets += [f"data.image_size={SIZE}", "parallel.strategy=single", "train.epochs=1"]
    session = Session(apply_overrides(Config(), sets), runs_dir=runs)
    session.start()
    assert session.wait(300) == "finished", session.error
    assert session.run_dir is not None
    shutil.rmtree(runs / CACHE_FOLDER)  # the race finds no features: its variants compute them

    record = Race(plan_race(session.run_dir, ["optim.lr=0.5x,2x"], rungs=[1])).run()
    assert record.state == "done"
    lines = [_feature_line(record_dir) for record_dir in _variant_runs(session.run_dir)]
    computed = [int(re.search(r"(\d+) computed", line).group(1)) for line in lines]  # type: ignore[union-attr]
    assert len(lines) == 2 and sum(computed) == 48, lines
    assert (runs / CACHE_FOLDER).is_dir() and not list(session.run_dir.rglob(CACHE_FOLDER))


def _variant_runs(run: Path) -> list[Path]:
    """The run folders of a race's variants (the winner's moved beside the raced run)."""
    found = [p.parent for p in run.rglob("metrics.jsonl") if p.parent != run]
    return found + [p for p in run.parent.iterdir() if p.is_dir() and p != run and (p / "metrics.jsonl").is_file()]


def test_the_head_at_the_defaults_reaches_what_a_logistic_regression_reaches_on_the_cached_features(
    weights: Path, tmp_path: Path
) -> None:
    """Few-shot features of a real backbone's scale (put in the feature cache in place of the tiny network's),
    a run at the defaults (hogwild, 2 workers): the head is within a point of scikit-learn's LogisticRegression
    fitted on the same features and split, and the run is still a run (curves, checkpoints, its log's account)."""
    from PIL import Image
    from sklearn.linear_model import LogisticRegression

    classes, per_class = 10, 40
    photos = tmp_path / "digits"
    for c in range(classes):
        (photos / f"c{c}").mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (8, 8), (c * 20, i * 5, 0)).save(photos / f"c{c}" / f"{i}.png")
    runs = tmp_path / "runs"
    sets = (f"model.weights={weights}", "data.val_fraction=0.75")  # 10 training images a class
    args = ["train", "--runs-dir", str(runs), "--set", f"model.kind={KIND}"]
    args += ["--set", f"data.source=images:{photos}", "--set", f"data.image_size={SIZE}"]
    for s in sets:
        args += ["--set", s]
    first = traindesk(*args, "--set", "train.epochs=1")
    assert first.returncode == 0, first.stderr

    # features as a pretrained network gives them (non-negative, norms in the tens): classes that overlap
    (cache,) = (runs / ".features").iterdir()
    (chunk,) = json.loads((cache / "index.json").read_text())["chunks"]  # one run, one chunk
    keys = json.loads((cache / f"{chunk['name']}.keys.json").read_text())
    dim = int(np.load(cache / f"{chunk['name']}.npy").shape[1])
    rng = np.random.default_rng(0)
    centres = rng.gamma(0.5, 1.0, (classes, dim))
    feats = np.zeros((len(keys), dim), dtype=np.float32)
    by_path: dict[str, np.ndarray] = {}
    for row, key in enumerate(keys):
        path = key.split("|")[0]
        c = int(Path(path).parent.name[1:])
        feats[row] = np.maximum(0.0, centres[c] + rng.normal(0.0, 1.5, dim)) * 2.0
        by_path[path] = feats[row]
    np.save(cache / f"{chunk['name']}.npy", feats)

    done = traindesk(*args)
    assert done.returncode == 0, done.stderr
    run = Path(done.stdout.strip().splitlines()[-1])
    assert "0 computed, 400 from the cache" in _feature_line(run)

    from core.data import load_data
    from core.training.backbones import image_input

    cfg = from_dict(load_checkpoint(run)["config"])
    data = load_data(cfg.data, seed=cfg.train.seed, share=False, task=cfg.train.task, images=image_input(cfg))

    def split(paths: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        x = np.stack([by_path[os.path.abspath(p)] for p in paths])
        return x, np.asarray([int(Path(p).parent.name[1:]) for p in paths])

    x_train, y_train = split(data.train.paths)  # type: ignore[union-attr]  # an image folder's splits
    x_val, y_val = split(data.val.paths)  # type: ignore[union-attr]
    assert len(y_train) == 100
    reference = LogisticRegression().fit(x_train, y_train).score(x_val, y_val)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["final"]["val_accuracy"] >= reference - 0.01, (summary["final"], reference)

    records = list(read_metrics(run / "metrics.jsonl"))
    steps = [r for r in records if r.get("kind") == "step"]
    evals = [r for r in records if r.get("kind") == "eval"]
    assert len(steps) > 1 and evals and evals[-1]["val_accuracy"] == summary["final"]["val_accuracy"]
    assert (run / "checkpoints" / "last.pt").exists() and (run / "checkpoints" / "best.pt").exists()
    logs = [r["message"] for r in records if r.get("kind") == "log"]
    assert any(line.startswith("head fitted by full-batch L-BFGS on 100 cached features") for line in logs), logs
