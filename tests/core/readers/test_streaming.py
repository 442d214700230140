"""The block-by-block paths give what one block gives: a table read in pieces (CSV) or batches (Parquet),
training data encoded and standardised a block of rows at a time into its one tensor, an NPZ read by rows,
the split without scikit-learn's lists, and prediction read, encoded, predicted and written a block at a
time (to a file or a pipe). Small files, tiny blocks."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.config import Config, apply_overrides
from core.data import load_data
from core.readers import blocks as read_blocks
from core.readers import csv_typed
from core.schema import encode as encoding
from core.schema import read_table, table_blocks
from core.schema import table as tables
from core.schema.coded import Coded
from core.services.predict import predict
from core.services.predict.output import CsvStream
from tests.predict_pools import take_the_pool_once_up
from tests.trained_run import table_run

N_ROWS = 3000


def _rows(n: int = N_ROWS, seed: int = 0) -> list[list[Any]]:
    """Numbers with gaps, integers, a text column whose last level appears only late, an integer column
    beyond float32's exact range, and a label of three classes."""
    rng = np.random.default_rng(seed)
    colors = ["red", "green", "blue"]
    rows = []
    for i in range(n):
        a = "" if i % 17 == 0 else f"{rng.normal():.4f}"
        color = "violet" if i > n * 0.8 and i % 5 == 0 else ("" if i % 23 == 0 else colors[i % 3])
        rows.append([a, int(rng.integers(0, 1000)), color, 2**25 + i, "xyz"[(i + (i % 7 == 0)) % 3]])
    return rows


HEADER = ["a", "b", "color", "big", "label"]


def _write_csv(path: Path, rows: list[list[Any]], header: list[str] = HEADER) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


@pytest.fixture(autouse=True)
def _pool_once_up(monkeypatch: pytest.MonkeyPatch) -> None:
    take_the_pool_once_up(monkeypatch)


@pytest.fixture
def tiny_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every block-by-block path a few kilobytes or rows at a time."""
    monkeypatch.setattr(read_blocks, "READ_BLOCK_BYTES", 2048)
    monkeypatch.setattr(csv_typed, "PIECES_PER_BLOCK", 1)
    monkeypatch.setattr(tables, "PARQUET_BATCH_ROWS", 97)
    monkeypatch.setattr(encoding, "ENCODE_ROWS", 101)
    import core.data.prepare as prepare

    monkeypatch.setattr(prepare, "STATS_ROWS", 89)


def _same_columns(a: Any, b: Any) -> None:
    assert a.names == b.names and a.n_rows == b.n_rows
    for name in a.names:
        x, y = a.columns[name], b.columns[name]
        assert isinstance(x, Coded) == isinstance(y, Coded), name
        if isinstance(x, Coded):
            assert np.asarray(x).tolist() == np.asarray(y).tolist(), name
        else:
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), name


def _read_both(request: pytest.FixtureRequest, path: Path, scheme: str) -> tuple[Any, Any, list[Any]]:
    whole = read_table(path, scheme, "data", exact=("label",))
    request.getfixturevalue("tiny_blocks")
    pieces = read_table(path, scheme, "data", exact=("label",))
    return whole, pieces, list(table_blocks(path, scheme, "data", exact=("label",)))


@pytest.mark.parametrize("quoted_header", [False, True])
def test_a_csv_read_in_pieces_is_the_csv_read_whole(
    tmp_path: Path, request: pytest.FixtureRequest, quoted_header: bool
) -> None:
    """Also with its header quoted (as pyarrow and many databases write it): its rows are still cut into
    pieces, not streamed."""
    from core.readers import has_quotes

    path = _write_csv(tmp_path / "t.csv", _rows())
    if quoted_header:
        text = path.read_text()
        path.write_text(",".join(f'"{h}"' for h in HEADER) + text[text.index("\n") :])
    assert has_quotes(path) == quoted_header and not has_quotes(path, after_header=True)
    whole, pieces, parts = _read_both(request, path, "csv")
    assert len(parts) > 20  # the tiny blocks are in use
    _same_columns(whole, pieces)
    assert whole.columns["a"].dtype == np.float32 and whole.columns["big"].dtype == np.float64
    assert isinstance(pieces.columns["color"], Coded) and "violet" in set(pieces.columns["color"].distinct())
    assert sum(p.n_rows for p in parts) == N_ROWS
    assert np.array_equal(np.concatenate([p.columns["b"] for p in parts]), whole.columns["b"])


def test_a_parquet_file_read_in_batches_is_the_file_read_whole(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _rows()
    columns = list(zip(*rows))
    table = pa.table(
        {
            "a": pa.array([float(v) if v != "" else None for v in columns[0]], pa.float64()),
            "b": pa.array(columns[1], pa.int64()),
            "color": pa.array([v or None for v in columns[2]], pa.string()),
            "big": pa.array(columns[3], pa.int64()),
            "label": pa.array(columns[4], pa.string()),
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=1000)
    whole, pieces, parts = _read_both(request, path, "parquet")
    assert len(parts) > 20 and max(p.n_rows for p in parts) <= 97  # row groups of 1000, given out by 97
    _same_columns(whole, pieces)


def _prepared(path: Path, *sets: str) -> Any:
    cfg = apply_overrides(Config(), [f'data.source="{path.suffix[1:]}:{path}"', *sets])
    return load_data(cfg.data, seed=3, share=False)


def _same_data(a: Any, b: Any) -> None:
    for part in ("train", "val"):
        x, y = getattr(a, part), getattr(b, part)
        assert np.array_equal(x.x.numpy(), y.x.numpy()) and np.array_equal(x.y.numpy(), y.y.numpy()), part
    assert a.info.as_dict() == b.info.as_dict()


def test_training_data_encoded_by_blocks_is_encoded_whole(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    path = _write_csv(tmp_path / "t.csv", _rows())
    whole = _prepared(path)
    request.getfixturevalue("tiny_blocks")
    blocks = _prepared(path)
    _same_data(whole, blocks)
    # training rows first, then validation: both views of one tensor of every sample
    assert blocks.train.x.untyped_storage().data_ptr() == blocks.val.x.untyped_storage().data_ptr()
    assert len(blocks.train.x) + len(blocks.val.x) == N_ROWS
    assert abs(float(blocks.train.x[:, 0].mean())) < 0.05  # "a" standardised on the training rows


def test_an_npz_read_by_rows_is_the_array_read_whole(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(2500, 6)) * [1, 10, 100, 0, 1, 1] + [0, 5, -3, 7, 0, 0]).astype(np.float64)
    y = rng.integers(0, 4, size=2500)
    path = tmp_path / "a.npz"
    np.savez(path, x=x, y=y)
    whole = _prepared(path)
    request.getfixturevalue("tiny_blocks")
    blocks = _prepared(path)
    _same_data(whole, blocks)
    train = blocks.train.x.numpy().astype(np.float64)
    assert np.allclose(train.mean(axis=0), 0, atol=1e-4)
    assert np.allclose(train[:, [0, 1, 2, 4, 5]].std(axis=0), 1, atol=1e-3)
    assert np.all(train[:, 3] == 0)  # a constant feature stays 0 (its std taken as 1)
    # the statistics are numpy's over the rows of x that training got (found back by their first value)
    mean, std = np.asarray(blocks.info.mean), np.asarray(blocks.info.std)
    raw = train * std + mean
    first = np.sort(x[:, 0])
    at = np.clip(np.searchsorted(first, raw[:, 0]), 1, len(x) - 1)
    at -= np.abs(first[at - 1] - raw[:, 0]) < np.abs(first[at] - raw[:, 0])  # the nearer neighbour
    rows = np.argsort(x[:, 0])[at]
    assert len(set(rows.tolist())) == len(rows) and np.allclose(x[rows], raw, atol=1e-3)
    picked = x[rows].astype(np.float32).astype(np.float64)
    assert np.allclose(mean, picked.mean(axis=0), rtol=1e-5, atol=1e-5)
    assert np.allclose(std[[0, 1, 2, 4, 5]], picked.std(axis=0)[[0, 1, 2, 4, 5]], rtol=1e-5)


@pytest.mark.parametrize(
    ("counts", "n_test", "seed"),
    [
        ([50, 30, 20], 25, 0),
        ([1000, 3, 7], 101, 5),
        ([2, 2, 2, 2], 4, 1),
        ([400], 37, 9),
        ([13, 900, 87], 333, 42),
        ([5, 5, 5, 5, 5, 5, 5], 10, 3),  # every remainder ties: the seats left are drawn
        ([7, 7, 7, 2], 5, 11),
    ],
)
def test_the_stratified_split_draws_what_scikit_learn_draws(counts: list[int], n_test: int, seed: int) -> None:
    from sklearn.model_selection import train_test_split

    from core.data.split import _stratified_shuffle

    rng = np.random.default_rng(seed)
    y = rng.permutation(np.repeat(np.arange(len(counts)), counts))
    rows = np.arange(len(y)) * 3 + 1  # not the positions themselves
    want_train, want_test = train_test_split(rows, test_size=n_test, random_state=seed, stratify=y)
    train, test = _stratified_shuffle(rows, y, n_test, seed)
    assert train.tolist() == want_train.tolist() and test.tolist() == want_test.tolist()


# ----------------------------------------------------------------------------- prediction, a block at a time


@pytest.fixture(scope="module")
def table_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run trained on the table, and that table without its label (the input to predict)."""
    root = tmp_path_factory.mktemp("stream")
    rows = _rows()
    train = _write_csv(root / "train.csv", rows)
    run = table_run(train, root / "runs", epochs=1)
    features = _write_csv(
        root / "features.csv", [[i, *r[:4]] for i, r in enumerate(_rows(seed=7))], ["id", *HEADER[:4]]
    )
    return run, features


class Pipe(io.StringIO):
    """Standard output as a pipe: it cannot be rewound."""

    def seekable(self) -> bool:
        return False

    def seek(self, *args: Any) -> int:
        raise io.UnsupportedOperation("not seekable")

    def truncate(self, *args: Any) -> int:
        raise io.UnsupportedOperation("not seekable")


def test_a_table_predicted_a_block_at_a_time_writes_the_whole_prediction(
    table_model: tuple[Path, Path], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    run, features = table_model
    whole = predict(run, features, workers=1, batch_rows=64)
    assert whole.n_rows == N_ROWS and whole.ids[:2] == ["0", "1"]
    request.getfixturevalue("tiny_blocks")
    kept = predict(run, features, workers=1, batch_rows=64)
    assert kept.csv_text() == whole.csv_text() and kept.ids == whole.ids
    out = io.StringIO()
    streamed = predict(run, features, workers=1, batch_rows=64, out=out)
    assert out.getvalue() == whole.csv_text()
    assert streamed.written == N_ROWS and streamed.n_rows == N_ROWS and streamed.chunks == []
    parquet = tmp_path / "features.parquet"
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    pq.write_table(pacsv.read_csv(features), parquet)
    out = io.StringIO()
    predict(run, parquet, workers=1, batch_rows=64, out=out)
    assert out.getvalue() == whole.csv_text()


def test_a_pool_predicts_a_table_block_by_block_in_input_order(
    table_model: tuple[Path, Path], request: pytest.FixtureRequest
) -> None:
    run, features = table_model
    whole = predict(run, features, workers=1, batch_rows=64)
    request.getfixturevalue("tiny_blocks")
    out = io.StringIO()
    pooled = predict(run, features, workers=2, batch_rows=64, out=out)
    assert out.getvalue() == whole.csv_text() and pooled.workers == 2


def test_a_file_only_the_line_reader_takes_is_predicted_again_from_its_start(
    table_model: tuple[Path, Path], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A column empty in the first piece and text later breaks the first piece's types after rows were
    written: a file is emptied and written again, a pipe skips the rows it has (same bytes either way)."""
    run, _ = table_model
    rows = [[i, *r[:4], "" if i < 2000 else "a note"] for i, r in enumerate(_rows(seed=7))]
    path = _write_csv(tmp_path / "late.csv", rows, ["id", *HEADER[:4], "note"])
    whole = predict(run, path, workers=1, batch_rows=64)
    request.getfixturevalue("tiny_blocks")
    with pytest.raises(tables.WholeRead):  # the typed pieces give up after a few blocks
        for _ in table_blocks(path, "csv", "predict"):
            pass
    for sink in (io.StringIO(), Pipe()):
        predict(run, path, workers=1, batch_rows=64, out=sink)
        assert sink.getvalue() == whole.csv_text(), type(sink).__name__


def test_a_stream_restarted_on_a_pipe_writes_each_row_once() -> None:
    probs = np.zeros((2, 2), np.float32)
    pipe = Pipe()
    stream = CsvStream(pipe, ["p", "q"])
    stream.add(probs, "0,p,0,0\n1,p,0,0\n", ["0", "1"], None)
    stream.restart()
    for k in range(3):
        stream.add(probs, f"{2 * k},p,0,0\n{2 * k + 1},p,0,0\n", [], None)
    assert pipe.getvalue() == "id,predicted,prob_p,prob_q\n" + "".join(f"{i},p,0,0\n" for i in range(6))
    assert stream.rows == 6
    with pytest.raises(RuntimeError, match="batch boundary"):  # a second read cut elsewhere is refused
        stream.restart()
        stream.add(np.zeros((7, 2), np.float32), "x\n" * 7, [], None)


def test_a_bad_value_late_in_the_file_leaves_no_output_file(
    table_model: tuple[Path, Path], tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    from core import cli

    run, _ = table_model
    rows = [[i, *r[:4]] for i, r in enumerate(_rows(seed=7))]
    rows[2500][1] = "abc"  # "a" is a number column
    path = _write_csv(tmp_path / "bad.csv", rows, ["id", *HEADER[:4]])
    request.getfixturevalue("tiny_blocks")
    out = tmp_path / "p.csv"
    for workers in ("1", "2"):  # the pool's processes give the piece up: the whole read says what and where
        code = cli.main(["predict", str(run), str(path), "--workers", workers, "--out", str(out)])
        _, err = capsys.readouterr()
        assert code == 2 and len(err.strip().splitlines()) == 1 and "'a'" in err and "abc" in err, err
        assert not out.exists() and list(tmp_path.glob(".p.csv*")) == []


def _parent_reads_no_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """No process reads the table by blocks: each reads and encodes the pieces it predicts."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the table was read by blocks")

    monkeypatch.setattr(tables, "table_blocks", refused)


def test_the_pools_processes_read_and_encode_their_own_rows(
    table_model: tuple[Path, Path], tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same bytes, notes and scores as one process, to a file or a pipe, with ids or row numbers and
    with true labels (a test set), every process reading and encoding its own pieces."""
    import core.services.predict.run as runs

    run, features = table_model
    rows = [[*r[:2], "indigo" if i > 2500 and i % 7 == 0 else r[2], *r[3:]] for i, r in enumerate(_rows(seed=3))]
    labelled = _write_csv(tmp_path / "labelled.csv", rows)  # no id column, the target column, a late level
    request.getfixturevalue("tiny_blocks")
    for path in (features, labelled):
        one = predict(run, path, workers=1, batch_rows=64)
        with monkeypatch.context() as patched:
            _parent_reads_no_block(patched)
            patched.setattr(runs, "_predict_table_blocks", lambda *a: pytest.fail("read by blocks"))
            for sink in (io.StringIO(), Pipe()):
                pooled = predict(run, path, workers=2, batch_rows=64, out=sink)
                assert sink.getvalue() == one.csv_text() and pooled.workers == 2, path.name
                assert pooled.notes == one.notes and pooled.evaluation() == one.evaluation()
            kept = predict(run, path, workers=2, batch_rows=64)
        assert kept.csv_text() == one.csv_text() and kept.ids == one.ids and kept.labels == one.labels
    assert one.labels is not None and one.evaluation() is not None and "color: 71" in one.notes[0]


@pytest.mark.parametrize("case", ["late text", "quotes"])
def test_a_table_the_pieces_cannot_take_is_read_by_blocks(
    table_model: tuple[Path, Path], tmp_path: Path, request: pytest.FixtureRequest, case: str
) -> None:
    """A column empty in the first piece and text later (the pieces' types do not fit), or a quoted value
    (a value may span lines): read by blocks from the first row, the same bytes as one process."""
    run, _ = table_model
    rows = [[i, *r[:4], "" if i < 2000 else "a note"] for i, r in enumerate(_rows(seed=7))]
    if case == "quotes":
        rows = [[i, *r[:4], "x, y" if i == 1500 else "x"] for i, r in enumerate(_rows(seed=7))]
    path = _write_csv(tmp_path / "other.csv", rows, ["id", *HEADER[:4], "note"])
    whole = predict(run, path, workers=1, batch_rows=64)
    request.getfixturevalue("tiny_blocks")
    for sink in (io.StringIO(), Pipe()):
        pooled = predict(run, path, workers=2, batch_rows=64, out=sink)
        assert sink.getvalue() == whole.csv_text() and pooled.written == N_ROWS, type(sink).__name__


def test_the_default_pools_a_large_table_and_not_a_small_one(
    table_model: tuple[Path, Path], tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The automatic count weighs the work a pool would take over, reading and encoding the rows included:
    on a clock that only reading moves (1 ms a cell), the rows left of a large table repay a pool whose
    start-up was measured at 0.5 s; a small one never considers one, a mid-size one's rows left do not."""
    import types

    import core.services.predict
    import core.services.predict.pool
    import core.services.predict.runner
    from core.services.predict import planning

    run, features = table_model
    one = predict(run, features, workers=1, batch_rows=16)
    request.getfixturevalue("tiny_blocks")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    kind = core.services.predict.runtime(run / "checkpoints" / "last.pt")
    core.services.predict.remember_pool_start(kind, 0.5)
    monkeypatch.setattr(planning, "worker_limit", lambda: 2)
    monkeypatch.setattr(planning, "busy_cores", lambda: 1.0)  # this process alone
    clock = [0.0]
    column = tables._column

    def read_column(col: Any, *args: Any) -> Any:
        clock[0] += len(col) * 1e-3
        return column(col, *args)

    monkeypatch.setattr(tables, "_column", read_column)
    monkeypatch.setattr(core.services.predict.runner, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    started: list[int] = []
    pool = core.services.predict.pool.open_pool
    monkeypatch.setattr(
        core.services.predict.pool, "open_pool", lambda model, n, fork=False: started.append(n) or pool(model, n)
    )
    monkeypatch.setattr(core.services.predict.pool, "fork_allowed", lambda: False)  # a pool from the forkserver
    auto = predict(run, features, batch_rows=16)  # 3000 rows, 5 columns: 15 s of reading on that clock
    assert started == [1] and auto.workers == 2 and auto.csv_text() == one.csv_text()
    core.services.predict.remember_pool_start(kind, 0.5)  # not the start-up that pool measured
    lines = features.read_text().splitlines(keepends=True)
    for rows in (200, 300):  # fewer than AUTO_POOL_BATCHES batches; 1.2 s of reading left after the first piece
        path = tmp_path / f"rows{rows}.csv"
        path.write_text("".join(lines[:1] + lines[1000 : 1000 + rows]))  # rows of the usual length: sized right
        started.clear()
        auto = predict(run, path, batch_rows=16)
        assert started == [] and auto.workers == 1 and auto.n_rows == rows


def test_one_worker_reads_a_table_on_one_thread(
    table_model: tuple[Path, Path], request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--workers 1`` is one thread, the table's reader included: pyarrow parses on this thread and the
    columns are converted here; the automatic count's single process reads on every core. Same bytes."""
    import pyarrow.csv as pacsv

    run, features = table_model
    request.getfixturevalue("tiny_blocks")
    threads: list[bool] = []
    read_csv = pacsv.read_csv

    def recorded(data: Any, read_options: Any = None, **kwargs: Any) -> Any:
        threads.append(True if read_options is None else bool(read_options.use_threads))
        return read_csv(data, read_options=read_options, **kwargs)

    monkeypatch.setattr(pacsv, "read_csv", recorded)
    one = predict(run, features, workers=1, batch_rows=64)
    assert threads and not any(threads)
    threads.clear()
    assert read_blocks.reading_threads()  # the one thread was this call's alone
    auto = predict(run, features, batch_rows=4096)  # one batch: this process alone
    assert auto.workers == 1 and threads and all(threads) and auto.csv_text() == one.csv_text()
