"""Batch prediction: every runnable format, CSV/NPZ/image inputs, --workers N identical to --workers 1."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.errors import UserError
from core.services.predict import BATCH_ROWS, chunk_bounds, predict, read_model_meta
from tests.core.services.test_export import make_run, raw_validation, run_cli


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A digits run and its exports: {"run": run_dir, ".safetensors": path, ".pt2": path, ".onnx": path}."""
    from core.services.export import export_run

    root = tmp_path_factory.mktemp("predict")
    run_dir = make_run(root / "runs")
    paths = {"run": run_dir}
    (root / "exports").mkdir()
    formats = ["safetensors", "torch-export", "state-dict"]
    try:
        import onnxruntime  # noqa: F401 — imported only to see that ONNX export can run here
        import onnxscript  # noqa: F401 — as above

        formats.append("onnx")
    except ModuleNotFoundError:
        pass
    for fmt in formats:
        result = export_run(run_dir, fmt, root / "exports")
        paths[result.path.suffix] = result.path
    return paths


@pytest.fixture(scope="module")
def inputs(exported: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The validation rows, raw, as a CSV (shuffled columns, an id column, the label) and as an NPZ."""
    root = tmp_path_factory.mktemp("inputs")
    raw, y, _ = raw_validation(exported["run"])
    x = raw.numpy().reshape(len(raw), -1)  # digits are (1, 8, 8) images; the CSV has one column per pixel
    features = read_model_meta(exported[".safetensors"])["input"]["features"]
    order = list(reversed(range(len(features))))  # columns out of training order: matched by name
    with (root / "val.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["label"] + [features[j] for j in order] + ["id"])
        for i, row in enumerate(x):
            w.writerow([int(y[i])] + [repr(float(row[j])) for j in order] + [f"row-{i}"])
    np.savez(root / "val.npz", x=x, y=y.numpy())
    return {"csv": root / "val.csv", "npz": root / "val.npz"}


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _formats(exported: dict[str, Path]) -> list[str]:
    return [s for s in (".safetensors", ".pt2", ".onnx") if s in exported]


def test_every_format_predicts_like_the_trained_model(exported: dict[str, Path], inputs: dict[str, Path]) -> None:
    _, y, want = raw_validation(exported["run"])
    for suffix in _formats(exported) + [".pt"]:
        for kind in ("csv", "npz"):
            res = predict(exported[suffix], inputs[kind])
            assert res.probs.shape == want.shape, (suffix, kind)
            assert np.abs(res.probs - want).max() <= 1e-4, (suffix, kind)
            assert res.predicted == [str(k) for k in want.argmax(1)]
    res = predict(exported[".safetensors"], inputs["csv"])
    rows = _rows(res.csv_text())
    assert rows[0] == ["id", "predicted"] + [f"prob_{k}" for k in range(10)]
    assert rows[1][0] == "row-0" and len(rows) == len(want) + 1
    assert abs(sum(float(v) for v in rows[1][2:]) - 1) < 1e-5
    written = np.array([[float(v) for v in row[2:]] for row in rows[1:]], dtype=np.float32)
    assert np.array_equal(written, res.probs)  # every probability reads back as the same float32
    assert [row[1] for row in rows[1:]] == res.predicted


def test_workers_2_equals_workers_1_row_for_row(
    exported: dict[str, Path], inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for suffix in _formats(exported):
        outs = []
        for workers in ("1", "2"):
            out = tmp_path / f"pred{suffix}-{workers}.csv"
            # small batches: the 360 rows make 6 batches, shared by two processes
            code, stdout, err = run_cli(
                capsys,
                "predict",
                str(exported[suffix]),
                str(inputs["csv"]),
                "--out",
                str(out),
                "--workers",
                workers,
                "--batch-rows",
                "64",
            )
            assert code == 0, err
            assert stdout.strip() == str(out) and f"{workers} worker(s)" in err
            outs.append(out.read_text())
        one, two = _rows(outs[0]), _rows(outs[1])
        assert len(one) == 361
        for a, b in zip(one, two):
            assert a == b, suffix


def test_model_json_or_its_folder_stand_for_the_model(exported: dict[str, Path], inputs: dict[str, Path]) -> None:
    folder = exported[".safetensors"].parent
    for model in (folder / "model.json", folder):
        res = predict(model, inputs["npz"])
        assert res.model_path == exported[".safetensors"]  # the first runnable file model.json lists


def test_stdout_when_no_out(
    exported: dict[str, Path], inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "predict", str(exported[".pt2"]), str(inputs["npz"]))
    assert code == 0, err
    rows = _rows(out)
    assert rows[0][:2] == ["id", "predicted"] and rows[1][0] == "0" and len(rows) == 361


def test_chunks_are_fixed_batches() -> None:
    assert chunk_bounds(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert chunk_bounds(0, 4) == []
    assert chunk_bounds(BATCH_ROWS + 1) == [(0, BATCH_ROWS), (BATCH_ROWS, BATCH_ROWS + 1)]


def test_any_worker_count_gives_the_same_bytes(exported: dict[str, Path], inputs: dict[str, Path]) -> None:
    model = exported[".onnx"] if ".onnx" in exported else exported[".safetensors"]
    texts = {w: predict(model, inputs["npz"], workers=w, batch_rows=50) for w in (1, 3, 8)}
    assert texts[3].workers == 3 and texts[8].workers == 8  # 360 rows: 8 batches of 50
    assert texts[1].csv_text() == texts[3].csv_text() == texts[8].csv_text()
    assert np.array_equal(texts[1].probs, texts[8].probs)
    packed = inputs["npz"].with_name("packed.npz")  # compressed: rows sent to the workers, not read in place
    with np.load(inputs["npz"]) as npz:
        np.savez_compressed(packed, x=npz["x"], y=npz["y"])
    assert predict(model, packed, workers=3, batch_rows=50).csv_text() == texts[1].csv_text()


def test_one_worker_uses_one_thread_and_gives_the_threads_back(
    exported: dict[str, Path], inputs: dict[str, Path]
) -> None:
    import torch

    before = torch.get_num_threads()
    one = predict(exported[".safetensors"], inputs["npz"], workers=1)
    assert torch.get_num_threads() == before
    auto = predict(exported[".safetensors"], inputs["npz"])  # a small input: this process, no pool
    assert auto.workers == 1 and auto.csv_text() == one.csv_text()


def test_csv_pieces_parsed_by_the_workers_give_the_same_bytes(
    exported: dict[str, Path], inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CSV of one line per record is cut into pieces that the workers parse; any other goes whole."""
    import core.services.predict.run

    model = exported[".safetensors"]
    whole_reads: list[Path] = []
    read_input = core.services.predict.run.read_input
    monkeypatch.setattr(
        core.services.predict.run,
        "read_input",
        lambda path, meta, *a: whole_reads.append(path) or read_input(path, meta, *a),
    )
    lines = inputs["csv"].read_text().splitlines()
    header = lines[0].split(",")
    no_ids = [",".join(c for c, h in zip(line.split(","), header) if h != "id") for line in lines]
    variants = {  # text, and whether it is cut into pieces
        "ids": ("\n".join(lines) + "\n", True),
        "numbered, crlf, trailing blank lines": ("\r\n".join(no_ids) + "\r\n\r\n", True),
        "a blank line": ("\n".join(lines[:100] + [""] + lines[100:]) + "\n", False),
        "a quoted id": ("\n".join(lines[:200] + [lines[200].replace("row-199", '"row,199"')] + lines[201:]), False),
    }
    for name, (text, cut) in variants.items():
        path = tmp_path / "in.csv"
        path.write_text(text)
        whole = predict(model, path)  # a small input: read whole, by this process
        assert len(whole.ids) == 360 and whole.labels is not None, name
        for workers in (1, 2, 3):
            whole_reads.clear()
            got = predict(model, path, workers=workers, batch_rows=16)  # 23 batches, pieces of 1 to 4
            assert got.csv_text() == whole.csv_text() and got.labels == whole.labels, (name, workers)
            assert got.workers == workers and whole_reads == ([] if cut else [path]), (name, workers)
    assert whole.ids[199] == "row,199" and whole.csv_text().splitlines()[200].startswith('"row,199",')
    lines[300] = lines[300].replace(lines[300].split(",")[7], "abc", 1)
    (tmp_path / "late.csv").write_text("\n".join(lines) + "\n")
    for workers in (1, 2):  # a piece the workers cannot parse: the whole read says what and where
        with pytest.raises(UserError, match=r"late\.csv column '.+' is not numeric \(line 301: 'abc'\)"):
            predict(model, tmp_path / "late.csv", workers=workers, batch_rows=16)


def test_no_more_processes_than_batches(
    exported: dict[str, Path], inputs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import core.services.predict.pool

    sizes: list[int] = []
    pool = core.services.predict.pool.open_pool
    monkeypatch.setattr(
        core.services.predict.pool, "open_pool", lambda model, n, fork=False: sizes.append(n) or pool(model, n, fork)
    )
    res = predict(exported[".safetensors"], inputs["csv"], workers=64, batch_rows=100)  # 360 rows: 4 batches
    assert res.workers == 4 and sizes and sizes[0] <= 7  # judged from the file's size before reading it
    one = predict(exported[".safetensors"], inputs["csv"], workers=1, batch_rows=100)
    assert res.csv_text() == one.csv_text()


def test_the_automatic_count_starts_a_pool_only_when_the_rows_left_repay_it(
    exported: dict[str, Path], inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import core.services.predict
    import core.services.predict.planning
    import core.services.predict.pool

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the measured start-up is kept there
    monkeypatch.setattr(core.services.predict.planning, "worker_limit", lambda: 2)
    monkeypatch.setattr(core.services.predict.planning, "AUTO_MEASURE_S", 0.0)  # judge after the first piece
    monkeypatch.setattr(core.services.predict.planning, "busy_cores", lambda: 1.0)  # this process alone
    started: list[int] = []
    pool = core.services.predict.pool.open_pool
    monkeypatch.setattr(
        core.services.predict.pool, "open_pool", lambda model, n, fork=False: started.append(n) or pool(model, n)
    )
    monkeypatch.setattr(core.services.predict.pool, "fork_allowed", lambda: False)  # a pool from the forkserver
    measured: list[tuple[str, float]] = []  # the start-ups a pool that took over measured
    remember = core.services.predict.planning.remember_pool_start
    monkeypatch.setattr(
        core.services.predict.runner,
        "remember_pool_start",
        lambda kind, seconds: measured.append((kind, seconds)) or remember(kind, seconds),
    )
    model = exported[".onnx"] if ".onnx" in exported else exported[".safetensors"]
    kind = core.services.predict.runtime(model)
    for name in ("csv", "npz"):  # 360 rows, 23 batches of 16: a pool is considered
        one = predict(model, inputs[name], workers=1, batch_rows=16)
        core.services.predict.remember_pool_start(kind, 1000.0)  # a pool slower to start than the input takes
        auto = predict(model, inputs[name], batch_rows=16)
        assert started == [] and auto.workers == 1 and auto.csv_text() == one.csv_text(), name
        core.services.predict.remember_pool_start(kind, 0.0)  # one that starts at no cost: it always repays
        monkeypatch.setattr(
            core.services.predict.planning, "busy_cores", lambda: 2.0
        )  # unless other work holds the other core
        assert predict(model, inputs[name], batch_rows=16).workers == 1 and started == [], name
        monkeypatch.setattr(core.services.predict.planning, "busy_cores", lambda: 1.0)
        auto = predict(model, inputs[name], batch_rows=16)
        assert started == [1] and auto.csv_text() == one.csv_text(), name  # this process and the pool: same rows
        started.clear()
    # each pool took over and kept the start-up it measured; the cache holds the last one
    assert [k for k, _s in measured] == [kind, kind] and all(seconds > 0 for _k, seconds in measured)
    kept = json.loads((tmp_path / "cache" / "traindesk" / "predict-pool.json").read_text())
    assert kept == {kind: round(measured[-1][1], 3)} and kept[kind] > 0


def test_an_onnx_model_predicts_without_torch(exported: dict[str, Path], inputs: dict[str, Path]) -> None:
    """An ONNX graph needs onnxruntime alone: neither the command nor its pool processes import torch."""
    import subprocess
    import sys

    from core.services.predict import predict_preload

    if ".onnx" not in exported:
        pytest.skip("the onnx extra is not installed")
    assert "torch" not in predict_preload(exported[".onnx"]) and "torch" in predict_preload(exported[".pt2"])
    in_process = (
        "import sys; from core.services.predict import predict; "
        f"r = predict({str(exported['.onnx'])!r}, {str(inputs['csv'])!r}, workers=1); "
        "assert len(r.ids) == 360; print('torch' in sys.modules)"
    )
    out = Path(exported[".onnx"]).parent / "command-out.csv"
    command = (  # the command as a user types it: what it imports up to its exit
        "import atexit, sys; atexit.register(lambda: print('torch' in sys.modules)); from core.cli import main; "
        f"code = main(['predict', {str(exported['.onnx'])!r}, {str(inputs['csv'])!r}, '--out', {str(out)!r}]); "
        "assert code == 0, code"
    )
    root = Path(__file__).resolve().parents[4]
    for code in (in_process, command):
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env={**__import__("os").environ, "PYTHONPATH": str(root)},
        )
        assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "False", (
            done.stdout[-500:] + done.stderr[-2000:]
        )


def _fresh_process(code: str) -> Any:
    """What ``code`` prints as JSON on its last line, run in a new process (no thread but its own, as a
    command's: this test process may hold threads other tests left)."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[4]
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


RECORD_POOLS = (
    "import json, core.services.predict.pool as pools, core.services.predict.planning as planning; "
    "from core.services.predict import predict; started = []; pool = pools.open_pool; "
    "pools.open_pool = lambda m, n, fork=False: started.append([n, fork]) or pool(m, n, fork); "
)


def test_a_command_forks_its_pool_and_a_threaded_caller_starts_it_from_the_forkserver(
    exported: dict[str, Path], inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process with no thread but its own (a command's) forks the other processes, with what they import
    shared; a caller with threads (the window) starts them from the forkserver. The same bytes either way."""
    import threading

    import core.services.predict.pool as pools

    model = exported[".onnx"] if ".onnx" in exported else exported[".safetensors"]
    one = predict(model, inputs["csv"], workers=1, batch_rows=50)
    out = tmp_path / "forked.csv"
    started, workers = _fresh_process(
        RECORD_POOLS + f"r = predict({str(model)!r}, {str(inputs['csv'])!r}, workers=3, batch_rows=50); "
        f"open({str(out)!r}, 'w').write(r.csv_text()); print(json.dumps([started, r.workers]))"
    )
    assert started == [[2, True]] and workers == 3 and out.read_text() == one.csv_text()
    forked: list[bool] = []
    pool = pools.open_pool
    monkeypatch.setattr(pools, "open_pool", lambda m, n, fork=False: forked.append(fork) or pool(m, n, fork))
    results: list[Any] = []
    caller = threading.Thread(target=lambda: results.append(predict(model, inputs["csv"], workers=3, batch_rows=50)))
    caller.start()
    caller.join(300)
    assert forked == [False] and len(results) == 1  # this process waits for that pool at its next piece
    assert results[0].csv_text() == one.csv_text() and results[0].workers == 3


def test_without_workers_a_command_forks_a_pool_at_once_for_a_large_input_only(
    exported: dict[str, Path], inputs: dict[str, Path], tmp_path: Path
) -> None:
    """Forked, a pool is up in milliseconds: without --workers a command starts one at once when the input
    looks large (and the other cores are free), and never for a small one."""
    model = exported[".onnx"] if ".onnx" in exported else exported[".safetensors"]
    one = predict(model, inputs["npz"], workers=1, batch_rows=16)
    out = tmp_path / "auto.csv"
    args = f"{str(model)!r}, {str(inputs['npz'])!r}"
    got = _fresh_process(
        RECORD_POOLS + "planning.worker_limit = lambda: 2; planning.busy_cores = lambda: 1.0; seen = []; "
        f"r = predict({args}, batch_rows=16); seen.append([started[:], r.workers]); started.clear(); "  # 23 batches
        f"open({str(out)!r}, 'w').write(r.csv_text()); "
        f"r = predict({args}, batch_rows=64); seen.append([started[:], r.workers]); "  # 6 batches: small
        "planning.busy_cores = lambda: 2.0; "  # other work holds the other core
        f"r = predict({args}, batch_rows=16); seen.append([started[:], r.workers]); print(json.dumps(seen))"
    )
    assert got == [[[[1, True]], 2], [[], 1], [[], 1]] and out.read_text() == one.csv_text()


def test_a_command_predicting_a_table_never_imports_pandas(tmp_path: Path) -> None:
    """pyarrow imports pandas, when installed, at its first conversion (0.2 s of a 1.1 s command here, again
    in each pool process): a prediction has pyarrow look for it while it is refused, and reads the same;
    pandas itself can still be imported after (a timm model's code does)."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("pandas") is None:
        pytest.skip("pandas is not installed: nothing to keep out")
    from core.host.machine import skip_pandas

    root = Path(__file__).resolve().parents[4]
    code = (
        "import sys, pyarrow as pa; from core.host.machine import skip_pandas; "
        "print(skip_pandas()); a = pa.array([1.5, None]); print(a.to_numpy(zero_copy_only=False)[0], "
        "'pandas' in sys.modules); import pandas; print(pa.array([2.5]).to_numpy()[0])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 0 and done.stdout.split() == ["True", "1.5", "False", "2.5"], done.stderr[-2000:]
    if "pandas" in sys.modules:  # imported here already: nothing is refused
        assert skip_pandas() is False


def test_the_automatic_worker_count_judges_the_input_without_reading_it(tmp_path: Path) -> None:
    from core.services.predict.planning import looks_large as _looks_large

    np.savez(tmp_path / "big.npz", x=np.zeros((16 * 100, 4), np.float32))
    np.savez_compressed(tmp_path / "small.npz", x=np.zeros((16 * 100 - 1, 4), np.float32))
    (tmp_path / "big.csv").write_text("a,b\n" + "1,2\n" * 16 * 100)
    (tmp_path / "small.csv").write_text("a,b\n" + "1,2\n" * 100)
    assert _looks_large(tmp_path / "big.npz", 100) and not _looks_large(tmp_path / "small.npz", 100)
    assert _looks_large(tmp_path / "big.csv", 100) and not _looks_large(tmp_path / "small.csv", 100)
    assert not _looks_large(tmp_path / "missing.npz", 100)  # reading it says what is wrong


def test_image_folder_input(tmp_path: Path) -> None:
    from PIL import Image

    from core.services.export import export_run

    rng = np.random.default_rng(1)
    for cls, level in (("dark", 40), ("light", 200)):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(10):
            arr = np.clip(rng.normal(level, 30, (8, 8)), 0, 255).astype(np.uint8)
            Image.fromarray(arr).save(tmp_path / "imgs" / cls / f"{i}.png")
    run_dir = make_run(tmp_path / "runs", source=f"images:{tmp_path / 'imgs'}", steps=40)
    model = export_run(run_dir, "safetensors", tmp_path / "m.safetensors").path
    res = predict(model, tmp_path / "imgs")
    assert res.ids[0] == "dark/0.png" and len(res.ids) == 20
    assert res.predicted.count("dark") == 10 and res.predicted.count("light") == 10
    (tmp_path / "imgs" / "dark" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(UserError, match="cannot decode image .*broken.png"):
        predict(model, tmp_path / "imgs", workers=2, batch_rows=4)  # the error comes from a worker process


def test_bad_inputs_exit_2_with_one_line(
    exported: dict[str, Path], inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = str(exported[".safetensors"])
    (tmp_path / "nofeat.csv").write_text("id,a,b\n1,2,3\n")
    (tmp_path / "text.csv").write_text(_corrupt_csv(inputs["csv"]))
    np.savez(tmp_path / "shape.npz", x=np.zeros((3, 5), np.float32))
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "bare.pt").write_bytes(exported[".pt"].read_bytes())
    cases = [
        ([model, str(tmp_path / "nofeat.csv")], "lacks 64 of the model's 64 feature columns"),
        ([model, str(tmp_path / "text.csv")], "is not numeric (line 4: 'abc')"),
        ([model, str(tmp_path / "shape.npz")], "the model takes (1, 8, 8)"),
        ([model, str(tmp_path / "missing.csv")], "input not found"),
        ([model, str(tmp_path / "notes.txt")], "not an input; give a CSV file (.csv), a Parquet file"),
        ([model, str(tmp_path)], "holds no images"),  # digits models take (1, 8, 8) images
        ([str(tmp_path / "notes.txt"), str(inputs["csv"])], "is not an exported model"),
        ([str(tmp_path / "bare.pt"), str(inputs["csv"])], "bare state dict"),
        ([model, str(inputs["csv"]), "--workers", "0"], "--workers must be from 1 to 256"),
        ([model, str(inputs["csv"]), "--out", str(tmp_path / "no" / "p.csv")], "does not exist"),
    ]
    for args, message in cases:
        code, out, err = run_cli(capsys, "predict", *args)
        assert code == 2, (args, err)
        assert len(err.strip().splitlines()) == 1 and message in err, (args, err)
        assert out == ""


def test_image_folder_for_a_tabular_model(tmp_path: Path) -> None:
    from core.errors import DataError
    from core.services.predict import read_input

    with pytest.raises(DataError, match="image folder but the model takes 4 tabular features"):
        read_input(tmp_path, {"input": {"shape": [4]}})


def _corrupt_csv(path: Path) -> str:
    lines = path.read_text().splitlines()
    cells = lines[3].split(",")
    cells[5] = "abc"
    lines[3] = ",".join(cells)
    return "\n".join(lines) + "\n"


def test_a_labelled_input_is_a_test_set(exported: dict[str, Path], inputs: dict[str, Path]) -> None:
    for kind in ("csv", "npz"):
        res = predict(exported[".safetensors"], inputs[kind])
        ev = res.evaluation()
        assert ev is not None and ev["n"] == len(res.ids)
        truth = res.labels
        assert ev["accuracy"] == pytest.approx(np.mean([p == t for p, t in zip(res.predicted, truth)]))
        assert len(ev["confusion"]) == 10 and sum(map(sum, ev["confusion"])) == len(res.ids)
        assert [c["class"] for c in ev["per_class"]][:3] == ["0", "1", "2"]


def test_cli_scores_a_labelled_input_as_the_predict_tab_does(
    exported: dict[str, Path], inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for kind in ("csv", "npz"):
        ev = predict(exported[".safetensors"], inputs[kind]).evaluation()
        assert ev is not None
        out = tmp_path / f"{kind}.csv"
        code, stdout, err = run_cli(
            capsys, "predict", str(exported[".safetensors"]), str(inputs[kind]), "--out", str(out)
        )
        assert code == 0 and stdout.strip() == str(out)
        assert (
            f"test set: accuracy {ev['accuracy']:.4f} on {ev['n']} labelled samples (macro F1 {ev['macro']['f1']:.4f}, "
            in err
        ), err
        assert "precision" in err and "confusion matrix (rows: true, columns: predicted)" in err
        for c in ev["per_class"]:  # the per-class table the tab shows
            assert f"{c['precision']:>9.4f} {c['recall']:>7.4f} {c['f1']:>7.4f} {c['support']:>8}" in err
    code, stdout, err = run_cli(capsys, "predict", str(exported[".safetensors"]), str(inputs["npz"]))
    assert code == 0 and stdout.startswith("id,predicted") and "test set: accuracy" in err  # rows on stdout
    data = np.load(inputs["npz"])
    np.savez(tmp_path / "unlabelled.npz", x=data["x"])
    code, _, err = run_cli(capsys, "predict", str(exported[".safetensors"]), str(tmp_path / "unlabelled.npz"))
    assert code == 0 and "test set" not in err


def test_a_model_trained_on_npz_images_takes_a_png_folder(tmp_path: Path) -> None:
    from PIL import Image

    from core.services.export import export_run

    rng = np.random.default_rng(2)
    x, y = [], []
    for cls, level in ((0, 40), (1, 200)):
        (tmp_path / "imgs" / str(cls)).mkdir(parents=True)
        for i in range(20):
            arr = np.clip(rng.normal(level, 30, (8, 8)), 0, 255).astype(np.uint8)
            x.append(arr)
            y.append(cls)
            if i < 5:
                Image.fromarray(arr).save(tmp_path / "imgs" / str(cls) / f"{i}.png")
    np.savez(tmp_path / "train.npz", x=np.stack(x), y=np.array(y))
    run_dir = make_run(tmp_path / "runs", source=f"npz:{tmp_path / 'train.npz'}", steps=40)
    model = export_run(run_dir, "safetensors", tmp_path / "m.safetensors").path
    res = predict(model, tmp_path / "imgs")
    assert len(res.ids) == 10
    assert res.labels == ["0"] * 5 + ["1"] * 5  # class folders are the truth
    assert res.evaluation()["accuracy"] == 1.0


# ----------------------------------------------------------------------------- a run directory or checkpoint as MODEL


@pytest.fixture(scope="module")
def run_with_best(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A digits run with last.pt and a different best.pt, and each checkpoint's safetensors export."""
    from core.services.export import export_run
    from tests.trained_run import add_best

    root = tmp_path_factory.mktemp("bestrun")
    run_dir = make_run(root / "runs")
    add_best(run_dir)
    paths = {"run": run_dir}
    for which in ("best", "last"):
        (root / which).mkdir()
        paths[which] = export_run(run_dir, "safetensors", root / which, checkpoint=which).path
    return paths


def test_a_run_directory_predicts_like_an_export_of_its_checkpoint(
    run_with_best: dict[str, Path], inputs: dict[str, Path]
) -> None:
    run_dir = run_with_best["run"]
    for which in ("best", "last"):
        want = predict(run_with_best[which], inputs["csv"]).csv_text()
        for workers in (1, 3):
            got = predict(run_dir, inputs["csv"], workers=workers, batch_rows=64, checkpoint=which)
            assert got.csv_text() == want, (which, workers)
            assert got.model_path == run_dir / "checkpoints" / f"{which}.pt"
        # the checkpoint file itself stands for the same model
        assert (
            predict(run_dir / "checkpoints" / f"{which}.pt", inputs["npz"]).csv_text()
            == predict(run_with_best[which], inputs["npz"]).csv_text()
        )
    assert (
        predict(run_with_best["best"], inputs["csv"]).csv_text()
        != predict(run_with_best["last"], inputs["csv"]).csv_text()
    )  # the two checkpoints do differ


def test_a_run_directory_defaults_to_best_once_it_exists(
    run_with_best: dict[str, Path], inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = run_with_best["run"]
    best = predict(run_with_best["best"], inputs["npz"]).csv_text()
    out = tmp_path / "p.csv"
    code, stdout, err = run_cli(
        capsys, "predict", str(run_dir), str(inputs["npz"]), "--out", str(out), "--workers", "2", "--batch-rows", "100"
    )
    assert code == 0, err
    assert out.read_text() == best and "checkpoints/best.pt" in err
    only_last = make_run(tmp_path / "runs")  # no best.pt: the last checkpoint
    assert predict(only_last, inputs["npz"]).model_path == only_last / "checkpoints" / "last.pt"


def test_checkpoint_errors_are_one_line(
    run_with_best: dict[str, Path], inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    only_last = make_run(tmp_path / "runs")
    empty_run = tmp_path / "empty-run"
    (empty_run / "checkpoints").mkdir(parents=True)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    cases = [
        ([str(only_last), "--checkpoint", "best"], "has no checkpoints/best.pt"),
        ([str(empty_run)], "has no checkpoints/last.pt"),
        ([str(run_with_best["best"]), "--checkpoint", "best"], "--checkpoint chooses the checkpoint of a run"),
        ([str(tmp_path / "junk.pt")], "checkpoint: " + str(tmp_path / "junk.pt")),
    ]
    for args, message in cases:
        code, out, err = run_cli(capsys, "predict", args[0], str(inputs["csv"]), *args[1:])
        assert code == 2, (args, err)
        assert len(err.strip().splitlines()) == 1 and message in err, (args, err)
        assert out == ""


@pytest.mark.parametrize("how", ["ctrl-c", "killed"])
def test_a_command_interrupted_or_killed_leaves_no_pool_process(
    exported: dict[str, Path], inputs: dict[str, Path], tmp_path: Path, how: str
) -> None:
    """The forked pool ends with its command: after a Ctrl-C (exit 130, the pool shut down) and after a
    SIGKILL of the command alone (each pool process dies with its parent). The command is held mid-way by
    its standard output, a pipe nobody reads."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    model = exported[".onnx"] if ".onnx" in exported else exported[".safetensors"]
    lines = inputs["csv"].read_text().splitlines(keepends=True)
    big = tmp_path / "big.csv"
    big.write_text(lines[0] + "".join(lines[1:]) * 10)  # 3,600 rows: far more output than a pipe holds
    root = Path(__file__).resolve().parents[4]
    cmd = [sys.executable, "-m", "core", "predict", str(model), str(big), "--workers", "2"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        # as a terminal's foreground command has it: a test run started in the background inherits it ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        command = psutil.Process(proc.pid)
        deadline = time.monotonic() + 120
        while not command.children() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # until the pool process exists (the command cannot end: its output is not read)
        pool = command.children()
        assert pool and proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C reaches the whole group
        else:
            proc.kill()
        _, err = proc.communicate(timeout=120)  # read now: what the command still has to write goes out
        assert proc.returncode == (130 if how == "ctrl-c" else -signal.SIGKILL), err.decode()[-2000:]
        _, alive = psutil.wait_procs(pool, timeout=120)
        assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()


def test_busy_cores_measures_what_other_processes_use_now_not_the_load_average(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import subprocess
    import sys

    from core.services.predict import planning

    monkeypatch.setattr("os.getloadavg", lambda: (64.0, 64.0, 64.0))  # a busy minute that is over
    spinner = subprocess.Popen(
        [sys.executable, "-c", "print('up', flush=True)\nwhile True: pass"], stdout=subprocess.PIPE
    )
    try:
        assert spinner.stdout is not None and spinner.stdout.readline() == b"up\n"
        busy = planning.busy_cores(0.3)
    finally:
        spinner.kill()
        spinner.wait()
    assert 1.5 <= busy < 64  # this process and the spinning one, whatever the load average said
