"""Export: each format reloads with its own loader and predicts like the trained model; errors leave nothing."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from core import cli
from core.data import full_tensors, load_data
from core.errors import RunError, UserError
from core.runfiles.writing import make_run_dir
from core.training.checkpoint import load_checkpoint, model_from_checkpoint
from tests.trained_run import make_run


def raw_validation(run_dir: Path) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Raw (unscaled) validation features, labels, and the trained model's probabilities on them."""
    ckpt = load_checkpoint(run_dir)
    model = model_from_checkpoint(ckpt)
    from core.config import from_dict

    cfg = from_dict(ckpt["config"])
    data = load_data(cfg.data, seed=cfg.train.seed, share=False)
    x, y = full_tensors(data.val, data.info)
    shape = tuple(data.info.input_shape)
    n = len(data.info.mean)
    sshape = shape if n == int(np.prod(shape)) else (n, 1, 1)
    mean = torch.tensor(data.info.mean).reshape(sshape)
    std = torch.tensor(data.info.std).reshape(sshape)
    with torch.no_grad():
        probs = torch.softmax(model(x), dim=1).numpy()
    return x * std + mean, y, probs


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("runs"))


# ----------------------------------------------------------------------------- each format, its own loader


def _reload_own_loader(fmt: str, path: Path, raw: torch.Tensor) -> np.ndarray:
    """Probabilities from the exported file, loaded the way a user elsewhere would."""
    if fmt == "safetensors":
        from safetensors.torch import load_file

        from core.services.formats.module import rebuild_module, standardized

        meta = json.loads((path.parent / "model.json").read_text())
        module = standardized(rebuild_module(meta, load_file(str(path)), "test"), meta, "probabilities")
        with torch.no_grad():
            return module(raw).numpy()
    if fmt == "state-dict":
        from core.services.formats.module import rebuild_module, standardized

        meta = json.loads((path.parent / "model.json").read_text())
        state = torch.load(path, weights_only=True)
        module = standardized(rebuild_module(meta, state, "test"), meta, "probabilities")
        with torch.no_grad():
            return module(raw).numpy()
    if fmt == "torch-export":
        program = torch.export.load(str(path)).module()  # no TrainDesk code involved
        with torch.no_grad():
            return program(raw).numpy()
    ort = pytest.importorskip("onnxruntime", reason="the optional extra 'onnx' is not installed")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: raw.numpy()})[0]


@pytest.mark.parametrize("fmt", ["safetensors", "state-dict", "torch-export", "onnx"])
def test_each_format_reloads_and_predicts_like_the_trained_model(fmt: str, digits_run: Path, tmp_path: Path) -> None:
    if fmt == "onnx":
        pytest.importorskip("onnxscript", reason="the optional extra 'onnx' is not installed")
    from core.services.export import FORMATS, export_run

    out = tmp_path / f"digits{FORMATS[fmt]}"
    result = export_run(digits_run, fmt, out)
    assert result.path == out and out.is_file() and (tmp_path / "model.json").is_file()
    assert result.max_abs_diff <= 1e-4 and result.rows_checked > 100 and result.agree == result.rows_checked
    assert "validation rows" in result.checked_on

    raw, y, want = raw_validation(digits_run)
    got = _reload_own_loader(fmt, out, raw)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4
    assert (got.argmax(1) == want.argmax(1)).all()
    if fmt in ("torch-export", "onnx"):  # any batch size: 1 and an odd one
        for n in (1, 7):
            assert np.abs(_reload_own_loader(fmt, out, raw[:n]) - want[:n]).max() <= 1e-4
    sidecar = json.loads((tmp_path / "model.json").read_text())
    entry = sidecar["files"][out.name]
    assert entry["format"] == fmt and entry["verified"]["max_abs_diff"] == result.max_abs_diff
    assert sidecar["classes"] == [str(i) for i in range(10)] and sidecar["input"]["shape"] == [1, 8, 8]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging or temp file left


def test_torch_export_program_runs_without_traindesk(digits_run: Path, tmp_path: Path) -> None:
    import subprocess

    from core.services.export import export_run

    path = export_run(digits_run, "torch-export", tmp_path / "m.pt2").path
    script = (
        "import sys; sys.modules['core'] = None; sys.modules['app'] = None\n"  # any import of ours fails
        "import torch\n"
        f"m = torch.export.load({str(path)!r}).module()\n"
        "p = m(torch.full((5, 1, 8, 8), 4.0))\n"  # digits are images: (N, C, H, W)
        "print(tuple(p.shape), round(float(p.sum()), 4))\n"
    )
    res = subprocess.run(
        [sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[-3:] == ["(5,", "10)", "5.0"]  # 5 rows of probabilities


def test_graph_can_return_logits(digits_run: Path, tmp_path: Path) -> None:
    from core.services.export import export_run

    result = export_run(digits_run, "torch-export", tmp_path / "m.pt2", output="logits")
    raw, _, want = raw_validation(digits_run)
    with torch.no_grad():
        logits = torch.export.load(str(result.path)).module()(raw)
    assert np.abs(torch.softmax(logits, 1).numpy() - want).max() <= 1e-4
    assert json.loads((tmp_path / "model.json").read_text())["files"]["m.pt2"]["output"] == "logits"


def test_model_json_keeps_every_format_of_the_same_model(digits_run: Path, tmp_path: Path) -> None:
    from core.services.export import export_run

    export_run(digits_run, "safetensors", tmp_path)
    export_run(digits_run, "state-dict", tmp_path)
    files = json.loads((tmp_path / "model.json").read_text())["files"]
    assert set(files) == {"model.safetensors", "model.pt"}


def test_image_folder_cnn_exports_with_per_channel_statistics(tmp_path: Path) -> None:
    from PIL import Image

    from core.services.export import export_run

    rng = np.random.default_rng(0)
    for cls, level in (("dark", 40), ("light", 200)):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(12):
            arr = np.clip(rng.normal(level, 30, (10, 10, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(arr).save(tmp_path / "imgs" / cls / f"{i}.png")
    run_dir = make_run(tmp_path / "runs", source=f"images:{tmp_path / 'imgs'}", kind="cnn", steps=20)
    result = export_run(run_dir, "torch-export", tmp_path / "cnn.pt2")
    meta = json.loads((tmp_path / "model.json").read_text())
    assert meta["preprocessing"]["axis"] == "channel" and meta["input"]["shape"] == [3, 10, 10]
    raw, _, want = raw_validation(run_dir)
    with torch.no_grad():
        got = torch.export.load(str(result.path)).module()(raw).numpy()
    assert np.abs(got - want).max() <= 1e-4


# ----------------------------------------------------------------------------- errors: exit 2, one line, no file


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_unknown_format_exits_2(digits_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "export", str(digits_run), "--format", "keras", "--out", str(tmp_path / "m.h5"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "invalid choice: 'keras'" in err
    assert _left(tmp_path) == []
    with pytest.raises(UserError, match="unknown format 'keras'"):
        from core.services.export import export_run

        export_run(digits_run, "keras", tmp_path / "m.h5")


def test_unwritable_path_exits_2_and_leaves_nothing(
    digits_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where a folder should be")
    targets = [blocker / "model.safetensors", tmp_path / "missing" / "model.pt"]
    if os.geteuid() != 0:  # root writes through permission bits
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        targets.append(locked / "model.pt2")
    for target in targets:
        fmt = {".safetensors": "safetensors", ".pt": "state-dict", ".pt2": "torch-export"}[target.suffix]
        code, out, err = run_cli(capsys, "export", str(digits_run), "--format", fmt, "--out", str(target))
        assert code == 2, (target, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert str(target.parent) in err and out == ""
    assert _left(tmp_path) == sorted(["not-a-folder"] + (["locked"] if os.geteuid() != 0 else []))
    if os.geteuid() != 0:
        assert _left(tmp_path / "locked") == []


def test_run_without_checkpoint_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = make_run_dir(tmp_path / "runs", "nothing")  # a run that died before its first checkpoint
    code, out, err = run_cli(
        capsys, "export", str(empty), "--format", "safetensors", "--out", str(tmp_path / "m.safetensors")
    )
    assert code == 2 and err.strip().count("\n") == 0 and "has no checkpoint" in err
    code, out, err = run_cli(capsys, "export", str(tmp_path / "nope"), "--format", "onnx")
    assert code == 2 and err.strip().count("\n") == 0 and "not found" in err
    assert _left(empty / "exports") == [] and not (tmp_path / "m.safetensors").exists()


def test_failed_verification_leaves_no_file(digits_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.services import export

    real = export.verify

    def off_by_a_lot(*args: Any, **kwargs: Any) -> export.Check:
        check = real(*args, **kwargs)
        return export.Check(0.5, check.rows, check.agree, check.verifier, 0.5, check.got, check.want)

    monkeypatch.setattr(export, "verify", off_by_a_lot)
    with pytest.raises(RunError, match="differs from the trained model by 0.5 .*nothing was written"):
        export.export_run(digits_run, "safetensors", tmp_path / "m.safetensors")
    assert _left(tmp_path) == []


def test_failed_write_leaves_no_file(digits_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.services import export
    from core.services.formats import STATE_DICT

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(STATE_DICT, "write", broken)
    with pytest.raises(RunError, match="No space left on device"):
        export.export_run(digits_run, "state-dict", tmp_path / "m.pt")
    assert _left(tmp_path) == []


def test_onnx_without_the_extra_says_what_to_install(
    digits_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # import onnxscript -> ModuleNotFoundError
    code, out, err = run_cli(capsys, "export", str(digits_run), "--format", "onnx", "--out", str(tmp_path / "m.onnx"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "optional extra 'onnx'" in err and "pip install 'traindesk[onnx]'" in err and "is missing" in err
    assert _left(tmp_path) == []


def test_cli_export_reports_the_figure(digits_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "export", str(digits_run), "--format", "safetensors", "--out", str(tmp_path))
    assert code == 0, err
    assert out.splitlines() == [str(tmp_path / "model.safetensors"), str(tmp_path / "model.json")]
    assert "max abs difference 0" in err and "predictions agree" in err


# ----------------------------------------------------------------------------- no pickled code, ever


class _Payload:
    """Unpickling this runs ``open(marker, 'w')``: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def test_pickled_callable_is_refused_never_run(
    digits_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from core.services.export import export_run
    from core.services.formats.module import load_state_dict_file

    export_run(digits_run, "state-dict", tmp_path / "model.pt")
    marker = tmp_path / "code-ran"
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    evil = dict(state, hook=_Payload(marker))
    torch.save(evil, tmp_path / "model.pt")  # same name: model.json beside still lists it

    with pytest.raises(RunError, match="refused \\(weights_only\\)"):
        load_state_dict_file(tmp_path / "model.pt")
    code, out, err = run_cli(capsys, "predict", str(tmp_path / "model.pt"), "/dev/null")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "refused" in err and out == ""

    # the same payload inside a checkpoint
    ckpt_dir = make_run_dir(tmp_path / "runs", "evil")
    data = torch.load(digits_run / "checkpoints" / "last.pt", weights_only=True)
    torch.save({**data, "extra": _Payload(marker)}, ckpt_dir / "checkpoints" / "last.pt")
    with pytest.raises(RunError, match="refused"):
        load_checkpoint(ckpt_dir)
    code, out, err = run_cli(capsys, "export", str(ckpt_dir), "--format", "safetensors")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "refused" in err
    assert not marker.exists()
    assert _left(ckpt_dir / "exports") == []


def test_onnx_export_keeps_the_exporters_info_lines_quiet(
    digits_run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """The window logs at INFO to the terminal it was started from: onnx_ir's pass reports must not reach it."""
    pytest.importorskip("onnxscript")
    import logging

    from core.services.export import export_run

    terminal = logging.StreamHandler(sys.stderr)  # what app.main's logging.basicConfig(level=INFO) installs
    logging.getLogger().addHandler(terminal)
    caplog.set_level(logging.INFO)
    try:
        export_run(digits_run, "onnx", tmp_path / "m.onnx")
    finally:
        logging.getLogger().removeHandler(terminal)
    chatter = [f"{r.name}: {r.getMessage()}" for r in caplog.records if not r.name.startswith("core")]
    assert chatter == []
    assert "onnx_ir" not in capfd.readouterr().err
    assert logging.getLogger("onnx_ir").level == logging.NOTSET  # left as it was after the export
