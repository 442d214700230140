"""The bad-input corpus (tests/data/bad, see make_corpus.py and MANIFEST.toml) through the CLI.

Every case must end with exit code 2 and exactly one line on stderr that
contains the manifest's expected text and names the file, no traceback, and no
run directory: an input error is caught before a run starts.

Most cases call ``core.cli.main`` in-process (a ``python -m core`` start costs
about a second); a handful run the real command in a subprocess, where stray
warnings or a late traceback would show on the real stderr. Checkpoint cases
call ``load_checkpoint``/``model_from_checkpoint`` directly, and go through
``train --resume``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomllib

from core import cli
from core.errors import RunError
from core.launchers import local as launcher
from core.session.machinery import recording as session_mod
from core.training.checkpoint import load_checkpoint, model_from_checkpoint
from tests.cli_run import core_env, run_core

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT / "tests" / "data" / "bad"
CASES: list[dict[str, Any]] = tomllib.loads((CORPUS / "MANIFEST.toml").read_text(encoding="utf-8"))["case"]
CLI_CASES = [c for c in CASES if c["feed"] != "checkpoint"]
CKPT_CASES = [c for c in CASES if c["feed"] == "checkpoint"]
InProcess = Callable[[dict[str, Any]], tuple[int, str, str, Path]]  # a case -> (rc, stdout, stderr, runs dir)
# Real subprocess runs: one per kind of input, and those where a warning or a late
# traceback would only show on the process's own stderr.
SUBPROCESS = {
    "config-binary_garbage": {},
    "csv-utf16": {},
    "npz-float64_overflow": {},  # numpy's overflow RuntimeWarning must not reach stderr
    "images-truncated_png": {"TRAINDESK_START_METHOD": ""},  # default start method: the forkserver warm-up
    "model-sys_exit": {},  # SystemExit from a model file
    "model-raises_multiline": {},
}
TIMEOUT_S = 120
MAX_CORPUS_BYTES = 1_000_000


def _param(case: dict[str, Any], issue_key: str = "known_issue") -> Any:
    marks = [pytest.mark.xfail(reason=case[issue_key], strict=True)] if case.get(issue_key) else []
    return pytest.param(case, id=case["id"], marks=marks)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the corpus: the working directory of every case (paths are relative)."""
    dst = tmp_path_factory.mktemp("corpus") / "bad"
    shutil.copytree(CORPUS, dst, ignore=shutil.ignore_patterns("__pycache__", "make_corpus.py"))
    return dst


def _train_args(case: dict[str, Any], runs_dir: Path) -> list[str]:
    feed, value = case["feed"], case["value"]
    if feed == "config":
        args = ["train", value]
    elif feed == "source":
        args = ["train", "--set", f"data.source={value}"]
    elif feed == "model":
        args = ["train", "--set", "data.source=builtin:iris", "--set", f"model.kind={value}"]
    elif feed == "checkpoint":
        args = ["train", "--resume", value]
    else:
        raise AssertionError(f"unknown feed {feed!r} in {case['id']}")
    return args + list(case.get("args", [])) + ["--runs-dir", str(runs_dir), "--quiet"]


def _started_runs(runs_dir: Path) -> list[str]:
    """Run directories (any folder) under runs_dir; a lock file alone is not a run."""
    if not runs_dir.exists():
        return []
    return sorted(p.name for p in runs_dir.iterdir() if p.is_dir())


def _check_one_line_error(
    case: dict[str, Any], rc: int, out: str, err: str, runs_dir: Path, expect: bool = True
) -> None:
    what = f"{case['id']}: rc={rc}\nstdout: {out!r}\nstderr: {err!r}"
    assert rc == 2, what
    assert "Traceback" not in err and "Traceback" not in out, what
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), f"not exactly one stderr line: {what}"
    if expect:
        assert case["expect"] in lines[0], f"expected {case['expect']!r}: {what}"
    assert case["names"] in lines[0], f"the error does not name {case['names']!r}: {what}"
    assert out == "", what
    assert not _started_runs(runs_dir), f"a run was started: {_started_runs(runs_dir)} ({what})"


@pytest.fixture
def in_process(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> InProcess:
    """Run a case through ``core.cli.main`` in the corpus folder: (rc, stdout, stderr, runs_dir).

    No forkserver is warmed up for a command that must fail, and the run directory
    is guarded: a case that gets as far as making one fails at once instead of training.
    """
    monkeypatch.chdir(corpus)
    monkeypatch.setattr(launcher, "warm_up", lambda block=False: None)

    def refuse(*args: Any, **kwargs: Any) -> Path:
        raise AssertionError("test guard: input accepted, a run directory was about to be made")

    monkeypatch.setattr(session_mod, "make_run_dir", refuse)
    runs_dir = tmp_path / "runs"

    def run(case: dict[str, Any]) -> tuple[int, str, str, Path]:
        capsys.readouterr()
        rc = cli.main(_train_args(case, runs_dir))
        out, err = capsys.readouterr()
        return rc, out, err, runs_dir

    return run


def _subprocess(args: list[str], cwd: Path, env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = core_env(**{"TRAINDESK_START_METHOD": "spawn", **env_extra})  # a case may choose its own method
    env = {k: v for k, v in env.items() if v}  # "" removes a variable
    return run_core(
        *args,
        cwd=cwd,
        timeout=TIMEOUT_S,
        env=env,
    )


# ----------------------------------------------------------------------------- the corpus itself


def test_manifest_and_corpus_agree() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    assert len(CASES) >= 40
    for c in CASES:
        assert c["feed"] in ("config", "source", "model", "checkpoint"), c
        assert c["expect"] and c["names"], c
        for rel in c["files"]:
            assert (CORPUS / rel).is_file(), f"{c['id']}: missing {rel}"
        if c["feed"] == "checkpoint":
            assert c.get("stage") in ("load", "model"), c
    on_disk = {
        p.relative_to(CORPUS).as_posix() for p in CORPUS.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }
    total = sum((CORPUS / rel).stat().st_size for rel in on_disk)
    assert total < MAX_CORPUS_BYTES, f"corpus is {total} bytes; keep it under 1 MB"
    sys.path.insert(0, str(CORPUS))
    dont_write, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in the corpus
    try:
        import make_corpus  # type: ignore[import-not-found]  # the corpus folder's own script, on sys.path here only
    finally:
        sys.path.remove(str(CORPUS))
        sys.dont_write_bytecode = dont_write
    expected = make_corpus.build(CORPUS)
    assert set(expected) | {"make_corpus.py"} == on_disk, "run tests/data/bad/make_corpus.py"
    # .pt and .npz bytes depend on the torch/numpy versions; everything else must match exactly
    stale = [
        rel
        for rel, data in expected.items()
        if not rel.endswith((".pt", ".npz")) and (CORPUS / rel).read_bytes() != data
    ]
    assert not stale, f"out of date, run tests/data/bad/make_corpus.py: {stale}"


# ----------------------------------------------------------------------------- config, data, model files


@pytest.mark.parametrize("case", [_param(c) for c in CLI_CASES])
def test_bad_input_exits_2_with_one_line(case: dict[str, Any], in_process: InProcess) -> None:
    rc, out, err, runs_dir = in_process(case)
    _check_one_line_error(case, rc, out, err, runs_dir)


@pytest.mark.parametrize("case", [_param(c) for c in CLI_CASES if c["id"] in SUBPROCESS])
def test_bad_input_real_command(case: dict[str, Any], corpus: Path, tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    res = _subprocess(_train_args(case, runs_dir), corpus, SUBPROCESS[case["id"]])
    _check_one_line_error(case, res.returncode, res.stdout, res.stderr, runs_dir)


def test_subprocess_cases_exist() -> None:
    assert set(SUBPROCESS) <= {c["id"] for c in CLI_CASES}


# ----------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("case", [_param(c) for c in CKPT_CASES])
def test_bad_checkpoint_is_a_one_line_run_error(
    case: dict[str, Any], corpus: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(corpus)
    path = Path(case["value"])
    if case["stage"] == "load":
        with pytest.raises(RunError) as err:
            load_checkpoint(path)
    else:
        data = load_checkpoint(path)  # readable: the problem is in what it holds
        with pytest.raises(RunError) as err:
            model_from_checkpoint(data, where=f"checkpoint: {path}")
    message = str(err.value)
    assert "\n" not in message and message.startswith("checkpoint"), message
    assert case["expect"] in message, message
    assert case["names"] in message, message
    out, errout = capfd.readouterr()
    assert "pwned" not in out + errout


def test_pickled_code_never_runs(
    corpus: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    import posix

    calls: list[Any] = []
    monkeypatch.setattr(posix, "system", lambda *a: calls.append(a) or 0)
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a) or 0)
    raw = (corpus / "checkpoints" / "pickled_code.pt").read_bytes()
    assert b"system" in raw, "the corpus file must really carry a call to os.system"
    with pytest.raises(RunError, match=r"refused \(weights_only\)"):
        load_checkpoint(corpus / "checkpoints" / "pickled_code.pt")
    assert calls == []
    assert "pwned" not in "".join(capfd.readouterr())


@pytest.mark.parametrize("case", [_param(c, "resume_known_issue") for c in CKPT_CASES])
def test_bad_checkpoint_resume_exits_2(case: dict[str, Any], in_process: InProcess) -> None:
    rc, out, err, runs_dir = in_process(case)
    # the loading stage's message is fixed; later stages may word it their own way but must name the file
    _check_one_line_error(case, rc, out, err, runs_dir, expect=case["stage"] == "load")


def test_pickled_checkpoint_resume_real_command(corpus: Path, tmp_path: Path) -> None:
    case = next(c for c in CKPT_CASES if c["id"] == "checkpoint-pickled_code")
    runs_dir = tmp_path / "runs"
    res = _subprocess(_train_args(case, runs_dir), corpus, {})
    assert "pwned" not in res.stdout + res.stderr
    _check_one_line_error(case, res.returncode, res.stdout, res.stderr, runs_dir)


# ----------------------------------------------------------------------------- what is accepted


def test_mixed_image_sizes_are_resized_to_one(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mixed sizes and modes (L, RGB, RGBA) load as one shape; notes.txt is ignored."""
    import torch

    from core.config import DataConfig, ModelConfig
    from core.data import load_data, make_batches
    from core.training.models import build_model

    monkeypatch.chdir(corpus)
    for size, shape in ((0, (3, 12, 12)), (8, (3, 8, 8))):  # 0: the first image's size (cat/0.png, RGB)
        data = load_data(DataConfig(source="images:images/mixed_sizes", image_size=size, val_fraction=0.0))
        assert data.info.n_samples == 6 and data.info.image_shape == shape
        xb, yb = next(iter(make_batches(data.train, data.info, 6, 0).epoch(torch.arange(6))))
        assert xb.shape == (6, *shape) and torch.isfinite(xb).all()
        model = build_model(ModelConfig(kind="cnn"), data.info.input_shape, 2, data.info.image_shape)
        torch.nn.functional.cross_entropy(model(xb), yb).backward()


@pytest.mark.slow
def test_mixed_image_sizes_train(corpus: Path, tmp_path: Path) -> None:
    res = _subprocess(
        [
            "train",
            "--set",
            "data.source=images:images/mixed_sizes",
            "--set",
            "model.kind=cnn",
            "--set",
            "data.val_fraction=0.34",
            "--strategy",
            "single",
            "--epochs",
            "1",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--quiet",
        ],
        corpus,
        {},
    )
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip().splitlines()[-1]).parent == tmp_path / "runs"


def test_config_with_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    from core.config import load_config

    path = tmp_path / "bom.toml"
    path.write_bytes("\ufeff[train]\nepochs = 3\n".encode("utf-8"))
    assert load_config(path).train.epochs == 3
