"""A pretrained sentence encoder for a table's text (model.text_encoder), with a tiny encoder built here (random
weights, a WordPiece tokenizer trained on the test's texts): each text encoded once and cached, predict = serve
on raw rows, the ONNX export verified, and a folder that is no encoder or a hub name offline refused in one
line; fine-tuned (model.finetune = "full"): the run's own encoder, learning, a stop leaving no folder, and
"full" where it means nothing refused in one line."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.config import Config
from core.data.text_tuning import TextTuning, tune_encoder
from core.readers import ReadStopped, stop_reading_when
from core.schema import encode_columns, fit_schema, infer_kinds, read_table, sentences
from tests import journey_tables as jt
from tests.cli_run import core_env, run_core
from tests.core.services.serve.test_serve import serving

DIM = 16


def _build_encoder(folder: Path, texts: list[str]) -> Path:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, trainers
    from tokenizers import models as token_models
    from transformers import BertConfig, BertModel, BertTokenizer

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(token_models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials))
    bert = folder / "bert"  # a plain transformers model: not a sentence encoder by itself
    BertTokenizer(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    ).save_pretrained(bert)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=DIM,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(bert)
    st = SentenceTransformer(modules=[models.Transformer(str(bert)), models.Pooling(DIM)], device="cpu")
    st.save(str(folder / "encoder"))
    return folder / "encoder"


@pytest.fixture(scope="module")
def tickets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a tickets CSV, the tiny encoder's folder)."""
    folder = tmp_path_factory.mktemp("encoder")
    header, rows = jt.tickets(300)
    source = jt.write_csv(folder / "tickets.csv", header, rows)
    return source, _build_encoder(folder, [r[1] for r in rows])


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own embedding cache (and that of the processes it starts), hub offline."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(sentences, "_loaded", {})
    return tmp_path / "cache" / "traindesk" / "text-embeddings"


def test_each_text_is_encoded_once_and_its_embedding_cached(
    tickets: tuple[Path, Path], cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, encoder = tickets
    table = read_table(source, "csv", "data")
    kinds = infer_kinds(table, "urgent")
    schema = fit_schema(
        table, "urgent", kinds, "classification", ["no", "yes"], None, np.arange(200), text_encoder=str(encoder)
    )
    [spec] = schema.texts
    assert (spec.encoder, spec.dim, spec.width) == (str(encoder), DIM, DIM) and spec.fingerprint.startswith("sha256:")
    assert schema.text_slots == [] and schema.stats()[1][-DIM - 1 :] == [1.0] * (DIM + 1)
    first = encode_columns(schema, table.columns).x
    assert list(cache.glob("*/*.npz"))

    monkeypatch.setattr(sentences, "_loaded", {})  # as a new process: only the cache on disk is left
    loaded = sentences._load(str(encoder), spec.fingerprint)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a cached text was encoded again")

    monkeypatch.setattr(loaded.model, "encode", refused)
    again = encode_columns(schema, table.columns).x
    assert np.array_equal(first, again)
    names = schema.feature_names
    block = again[:, names.index("message_embedding0") : names.index(f"message_embedding{DIM - 1}") + 1]
    assert np.abs(block).sum(axis=1).min() == 0  # a missing message is all zeros
    assert np.unique(block, axis=0).shape[0] > 250  # and each text its own embedding


def _rows(source: Path) -> list[dict[str, Any]]:
    with source.open() as fh:
        rows = list(csv.DictReader(fh))
    return [{k: (v if v != "" else None) for k, v in r.items() if k != "urgent"} for r in rows[:40]]


def test_a_run_with_an_encoder_predicts_serves_and_exports_the_same(
    tickets: tuple[Path, Path], cache: Path, tmp_path: Path
) -> None:
    source, encoder = tickets
    runs = tmp_path / "runs"
    train = ["train", "--runs-dir", str(runs), "--strategy", "single", "--epochs", "2"]
    train += ["--set", f'data.source="csv:{source}"', "--set", "data.target=urgent"]
    done = run_core(*train, "--set", f"model.text_encoder={encoder}", timeout=300, env=core_env())
    assert done.returncode == 0, done.stderr
    run = Path(done.stdout.strip().splitlines()[-1])
    assert cache.is_dir() and list(cache.glob("*/*.npz"))

    rows, raw = _raw(source, tmp_path)
    predicted = _predicted(run, raw, tmp_path / "predicted.csv")
    served = _served(run, rows, tmp_path)
    assert np.allclose(predicted, served, atol=1e-6)

    model = tmp_path / "model.onnx"
    done = run_core("export", str(run), "--format", "onnx", "--out", str(model), timeout=300, env=core_env())
    assert done.returncode == 0, done.stderr
    described = json.loads((tmp_path / "model.json").read_text())
    [column] = [c for c in json.dumps(described).split("{") if '"encoder"' in c and '"width"' in c][:1]
    assert str(encoder) in column and f'"width": {DIM}' in column and "sha256:" in column


def _error(source: Path, runs: Path, encoder: str, *sets: str, **env: str) -> str:
    train = ["train", "--runs-dir", str(runs), "--strategy", "single", "--epochs", "1"]
    train += ["--set", f'data.source="csv:{source}"', "--set", "data.target=urgent"]
    train += [arg for item in sets for arg in ("--set", item)]
    done = run_core(*train, "--set", f"model.text_encoder={encoder}", timeout=300, env=core_env(**env))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert not runs.exists() or not any(runs.iterdir()), list(runs.iterdir())
    return lines[0]


def test_a_folder_that_is_no_sentence_encoder_and_a_hub_name_offline_are_one_line_each(
    tickets: tuple[Path, Path], cache: Path, tmp_path: Path
) -> None:
    source, encoder = tickets
    line = _error(source, tmp_path / "runs", str(encoder.parent / "bert"))
    assert "is not a sentence encoder" in line and "bert" in line
    empty = tmp_path / "hf"
    line = _error(source, tmp_path / "runs", "someone/tiny-encoder", HF_HOME=str(empty), HF_HUB_OFFLINE="1")
    assert "someone/tiny-encoder" in line and "HF_HUB_OFFLINE" in line and "HF_HUB_OFFLINE=0" in line
    assert not list(cache.glob("*/*.npz"))


@pytest.fixture(scope="module")
def tuned(tickets: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose encoder was fine-tuned (model.finetune = "full"), trained once for the tests that read it."""
    source, encoder = tickets
    folder = tmp_path_factory.mktemp("tuned")
    train = ["train", "--runs-dir", str(folder / "runs"), "--strategy", "single", "--epochs", "1"]
    train += ["--set", f'data.source="csv:{source}"', "--set", "data.target=urgent", "--set", "model.finetune=full"]
    env = core_env(XDG_CACHE_HOME=str(folder / "cache"), HF_HUB_OFFLINE="1")
    done = run_core(*train, "--set", f"model.text_encoder={encoder}", timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


def _predicted(model: Path, raw: Path, out: Path) -> np.ndarray:
    done = run_core("predict", str(model), str(raw), "--out", str(out), "--workers", "1", timeout=300, env=core_env())
    assert done.returncode == 0, done.stderr
    with out.open() as fh:
        return np.array([[float(r["prob_no"]), float(r["prob_yes"])] for r in csv.DictReader(fh)])


def _served(model: Path, rows: list[dict[str, Any]], tmp_path: Path) -> np.ndarray:
    with serving(model, tmp_path) as server:
        server.wait_ready()
        body = server.post("/predict", json={"rows": rows}).json()
    return np.array([[p["probabilities"]["no"], p["probabilities"]["yes"]] for p in body["predictions"]])


def _raw(source: Path, tmp_path: Path) -> tuple[list[dict[str, Any]], Path]:
    rows = _rows(source)
    return rows, jt.write_csv(tmp_path / "rows.csv", list(rows[0]), [[r[k] or "" for k in rows[0]] for r in rows])


@contextmanager
def _away(run: Path, to: Path) -> Iterator[Path]:
    """The run moved to ``to`` while the block runs (nothing left where it was), then moved back."""
    to.parent.mkdir(parents=True, exist_ok=True)
    run.rename(to)
    try:
        yield to
    finally:
        to.rename(run)


def test_a_fine_tuned_encoder_is_the_runs_own_and_predicts_serves_and_exports_the_same(
    tickets: tuple[Path, Path], tuned: Path, cache: Path, tmp_path: Path
) -> None:
    from safetensors.numpy import load_file

    source, encoder = tickets
    run = tuned
    folder = run / "text-encoder"
    assert (folder / "modules.json").is_file()
    assert not [p for p in run.parent.iterdir() if "text-encoder" in p.name]  # nothing left beside the run
    [before], [after] = list(encoder.rglob("*.safetensors")), list(folder.rglob("*.safetensors"))
    original, learned = load_file(before), load_file(after)
    assert original.keys() == learned.keys()
    assert any(not np.array_equal(original[k], learned[k]) for k in original)
    assert "text encoder: epoch 1/" in (run / "metrics.jsonl").read_text()

    rows, raw = _raw(source, tmp_path)
    predicted = _predicted(run, raw, tmp_path / "predicted.csv")
    served = _served(run, rows, tmp_path)
    assert np.allclose(predicted, served, atol=1e-6)

    model = tmp_path / "model.onnx"
    done = run_core("export", str(run), "--format", "onnx", "--out", str(model), timeout=300, env=core_env())
    assert done.returncode == 0, done.stderr
    described = json.loads((tmp_path / "model.json").read_text())
    [column] = [i for i in described["files"]["model.onnx"]["inputs"] if "encoder" in i]
    assert column["encoder"] == "text-encoder" and column["fingerprint"].startswith("sha256:")
    assert described["architecture"]["finetune"] == "full"  # the encoder configured, and fine-tuned


def test_a_run_with_a_fine_tuned_encoder_moved_elsewhere_predicts_the_same(
    tickets: tuple[Path, Path], tuned: Path, cache: Path, tmp_path: Path
) -> None:
    import torch

    _, raw = _raw(tickets[0], tmp_path)
    here = _predicted(tuned, raw, tmp_path / "here.csv")
    with _away(tuned, tmp_path / "elsewhere" / "moved") as moved:
        there = _predicted(moved, raw, tmp_path / "there.csv")
    assert np.allclose(here, there, atol=1e-6)
    schema = torch.load(tuned / "checkpoints" / "last.pt", weights_only=True)["info"]["schema"]
    [entry] = [c["encoder"] for c in schema["columns"] if "encoder" in c]
    assert entry["name"] == "text-encoder" and entry["relative"] is True  # named relative to the run


def test_an_export_copied_elsewhere_predicts_and_serves_without_its_run(
    tickets: tuple[Path, Path], tuned: Path, cache: Path, tmp_path: Path
) -> None:
    rows, raw = _raw(tickets[0], tmp_path)
    model = tmp_path / "export" / "model.onnx"
    model.parent.mkdir()
    done = run_core("export", str(tuned), "--format", "onnx", "--out", str(model), timeout=300, env=core_env())
    assert done.returncode == 0, done.stderr
    assert (model.parent / "text-encoder" / "modules.json").is_file()
    assert sorted(p.name for p in model.parent.iterdir()) == ["model.json", "model.onnx", "text-encoder"]
    described = json.loads((model.parent / "model.json").read_text())
    [entry] = [c["encoder"] for c in described["schema"]["columns"] if "encoder" in c]
    assert entry["name"] == "text-encoder" and entry["relative"] is True
    assert described["files"]["model.onnx"]["verified"]["max_abs_diff"] <= 1e-4

    trained = _predicted(tuned, raw, tmp_path / "trained.csv")
    copy = Path(shutil.copytree(model.parent, tmp_path / "another-machine" / "model"))
    shutil.rmtree(model.parent)
    with _away(tuned, tmp_path / "gone" / "run"):
        predicted = _predicted(copy, raw, tmp_path / "predicted.csv")
        served = _served(copy, rows, tmp_path)
    assert np.allclose(predicted, trained, atol=1e-5) and np.allclose(served, predicted, atol=1e-6)


def test_a_missing_fine_tuned_encoder_is_one_line(
    tickets: tuple[Path, Path], tuned: Path, cache: Path, tmp_path: Path
) -> None:
    _, raw = _raw(tickets[0], tmp_path)
    copy = Path(shutil.copytree(tuned, tmp_path / "copy"))
    shutil.rmtree(copy / "text-encoder")
    done = run_core("predict", str(copy), str(raw), "--workers", "1", timeout=300, env=core_env())
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(copy / "text-encoder") in lines[0] and "is missing" in lines[0], lines[0]
    assert "keep the text-encoder/ folder beside the model" in lines[0], lines[0]


def test_fine_tuning_learns_and_a_stop_leaves_no_folder(
    tickets: tuple[Path, Path], cache: Path, tmp_path: Path
) -> None:
    source, encoder = tickets
    with source.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["message"] and r["urgent"]]
    texts, y = [r["message"] for r in rows], np.array([r["urgent"] == "yes" for r in rows], dtype=np.int64)
    folder, losses = tune_encoder(str(encoder), texts, y, 2, TextTuning(tmp_path / "tuned"), seed=0)
    assert (folder / "modules.json").is_file() and losses[-1] < losses[0], losses

    asked = iter(range(3))  # a stop asked at the third batch
    with stop_reading_when(lambda: next(asked, None) is None), pytest.raises(ReadStopped):
        tune_encoder(str(encoder), texts, y, 2, TextTuning(tmp_path / "stopped"), seed=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tuned"]


def test_finetune_full_where_it_means_nothing_is_one_line(
    tickets: tuple[Path, Path], cache: Path, tmp_path: Path
) -> None:
    # a choice left from a timm: model the window's kind was switched away from (its row hidden): unused
    assert Config().replace("model", finetune="full").model.finetune == "full"
    _, encoder = tickets
    header, rows = jt.tickets(60)
    plain = jt.write_csv(tmp_path / "plain.csv", [h for h in header if h != "message"], [r[:1] + r[2:] for r in rows])
    line = _error(plain, tmp_path / "runs", str(encoder), "model.finetune=full")
    assert 'model.finetune = "full"' in line and "text column" in line
