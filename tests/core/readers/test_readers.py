"""core.readers: pyarrow's path and the line-precise path read the same values; errors fall back to the latter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core import readers
from core.errors import DataError
from core.readers import Columns, csv_file, csv_pieces
from core.readers import blocks as read_blocks


def _all_but_last(header: list[str]) -> Columns:
    last = len(header) - 1
    return Columns(numeric=list(range(last)), text=[last], required={last: "target column"})


def test_fast_and_exact_readers_agree(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1e3, (500, 4))
    path = tmp_path / "d.csv"
    lines = ["a, b ,c,d,label"] + [",".join(repr(float(v)) for v in row) + f",cls{i % 3}" for i, row in enumerate(x)]
    lines[5] = lines[5].replace("cls", " cls")  # spaces around a label are not part of it
    path.write_text("\n".join(lines) + "\n", encoding="utf-8-sig")
    fast = csv_file._read_fast(path, _all_but_last)
    exact = csv_file._read_exact(path, "data", _all_but_last)
    assert fast is not None
    assert fast.header == exact.header == ["a", "b", "c", "d", "label"]
    assert fast.x.dtype == np.float32 and fast.x.flags.c_contiguous
    assert np.array_equal(fast.x, exact.x) and np.array_equal(fast.x, x.astype(np.float32))
    assert fast.text[4].tolist() == exact.text[4].tolist() == [f"cls{i % 3}" for i in range(500)]


@pytest.mark.parametrize(
    "text",
    [
        "a,label\n1,x\n0x10,y\n",  # pyarrow would read hex in an inferred column; we never infer
        "a,label\n1,x\nnan,y\n",  # pyarrow reads nan as null
        "a,label\n1,x\n1e39,y\n",  # finite as float64, not as float32
        "a,label\n1,x\n2, \n",  # blank label
    ],
)
def test_what_pyarrow_would_accept_gets_the_exact_reader(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    assert csv_file._read_fast(path, _all_but_last) is None
    with pytest.raises(DataError, match=r"bad\.csv (column 'a'|line 3)"):
        readers.read_csv(path, "data", _all_but_last)


def test_quoted_line_breaks_and_python_only_syntax(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text('a,label\n1,"two\nlines"\n1_000,x\n')  # float() takes 1_000, pyarrow does not
    data = readers.read_csv(path, "data", _all_but_last)
    assert data.x[:, 0].tolist() == [1.0, 1000.0]
    assert data.text[1].tolist() == ["two\nlines", "x"]


def test_npz_reader(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", x=np.ones((4, 1, 2, 2), np.float64), y=np.arange(4), ids=np.array(list("abcd")))
    arrays = readers.read_npz(tmp_path / "d.npz", "predict", labels=False)
    assert arrays.x.dtype == np.float32 and arrays.x.shape == (4, 1, 2, 2) and arrays.y is None
    assert arrays.ids is not None and arrays.ids.tolist() == list("abcd")
    with pytest.raises(DataError, match="needs arrays 'x' and 'y'"):
        np.savez(tmp_path / "e.npz", x=np.ones((2, 2)))
        readers.read_npz(tmp_path / "e.npz", "data", labels=True)


def _cut(path: Path, rows: int) -> tuple[readers.CsvSplit, list[readers.CsvRows]]:
    split = readers.csv_split(path, _all_but_last)
    assert split is not None
    return split, list(split.pieces(rows))


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_pieces_read_what_the_whole_file_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, newline: str) -> None:
    monkeypatch.setattr(csv_pieces, "SCAN_BYTES", 64)  # many scan blocks, rows across their edges
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1e3, (101, 3))
    lines = ["a,b,c,label"] + [",".join(repr(float(v)) for v in row) + f", cls{i % 4}" for i, row in enumerate(x)]
    path = tmp_path / "d.csv"
    path.write_bytes((newline.join(lines) + newline * 3).encode("utf-8-sig"))  # trailing blank lines end nothing
    whole = readers.read_csv(path, "data", _all_but_last)
    split, pieces = _cut(path, 10)
    assert [p.count for p in pieces] == [10] * 10 + [1] and [p.first for p in pieces] == list(range(0, 101, 10))
    assert split.n_rows == 101 and not split.whole and split.header == ["a", "b", "c", "label"]
    parts = [readers.read_csv_rows(p) for p in pieces]
    assert all(p is not None for p in parts)
    assert np.array_equal(np.concatenate([p.x for p in parts if p]), whole.x)
    assert [v for p in parts if p for v in p.text[3].tolist()] == whole.text[3].tolist()
    row_bytes = (split.data_end - split.data_start) / 101
    tail = list(split.pieces(10, tail_rows=3, tail_bytes=int(row_bytes * 30)))  # the last ~30 rows: 3 at a time
    tail_from = split.data_end - int(row_bytes * 30)
    assert all(p.count == (3 if p.start >= tail_from else 10) for p in tail[:-1]) and tail[-1].count <= 3
    assert sum(p.count for p in tail) == 101 and sum(p.count == 3 for p in tail) >= 6
    assert [p.start for p in tail[1:]] == [p.stop for p in tail[:-1]] and tail[-1].stop == split.data_end


def test_what_pieces_cannot_take_goes_to_the_whole_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(csv_pieces, "SCAN_BYTES", 64)
    body = [f"{i},x{i}" for i in range(40)]
    path = tmp_path / "d.csv"
    path.write_text("a,label\n" + "\n".join(body[:30] + ['1,"two\nlines"'] + body[30:]) + "\n")
    split, pieces = _cut(path, 4)
    assert split.whole and pieces  # pieces before the quote came out, and are void
    path.write_text("a,label\n" + "\n".join(body[:20] + [""] + body[20:]) + "\n")  # a blank line
    split, pieces = _cut(path, 8)
    assert not split.whole and [readers.read_csv_rows(p) is None for p in pieces].count(True) == 1
    path.write_text("a,label\n" + "\n".join(body[:20] + ["nan,y"] + body[20:]) + "\n")
    assert [readers.read_csv_rows(p) is None for p in _cut(path, 8)[1]].count(True) == 1
    for text in ("\na,label\n1,x\n", "a,label\n", "a,a\n1,2\n"):  # blank first line, no rows, duplicate names
        path.write_text(text)
        assert readers.csv_split(path, _all_but_last) is None


def test_an_uncompressed_npz_x_is_read_in_place(tmp_path: Path) -> None:
    x = np.random.default_rng(2).normal(0, 1, (50, 1, 3, 3)).astype(np.float32)
    np.savez(tmp_path / "a.npz", ids=np.arange(50), features=x, y=np.zeros(50))
    stored = readers.stored_npz_x(tmp_path / "a.npz")
    assert stored is not None and stored.shape == (50, 1, 3, 3)
    assert np.array_equal(stored.rows(7, 19), x[7:19]) and np.array_equal(stored.rows(0, 50), x)
    np.savez_compressed(tmp_path / "b.npz", x=x)
    np.savez(tmp_path / "c.npz", x=x.astype(np.float64))
    np.savez(tmp_path / "d.npz", x=np.asfortranarray(x[:, 0, :, 0]))
    np.savez(tmp_path / "e.npz", y=np.zeros(3))
    (tmp_path / "f.npz").write_bytes(b"not a zip")
    for name in "bcdef":  # read by the caller and sent instead
        assert readers.stored_npz_x(tmp_path / f"{name}.npz") is None, name


def test_reads_go_by_blocks_and_stop_between_them_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.csv as pacsv

    monkeypatch.setattr(read_blocks, "READ_BLOCK_BYTES", 4096)
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(0, 10, (3000, 4)), 3)
    path = tmp_path / "d.csv"
    path.write_text(
        '"a","b","c","d",label\n'  # a quoted header still goes by blocks
        + "".join(",".join(map(str, row)) + f",c{i % 3}\n" for i, row in enumerate(x))
    )
    calls: list[int] = []

    def stop_after(n: int) -> object:
        calls.clear()
        return lambda: calls.append(1) is None and len(calls) > n

    assert csv_file._read_blocks(path, ["a", "b", "c", "d", "label"], _all_but_last(list("abcde"))) is not None
    blocks = readers.read_csv(path, "data", _all_but_last)
    whole = pacsv.read_csv(path)
    assert np.array_equal(blocks.x, np.column_stack([whole.column(k).to_numpy() for k in "abcd"]).astype(np.float32))
    assert blocks.text[4].tolist() == [f"c{i % 3}" for i in range(3000)]
    with readers.stop_reading_when(stop_after(3)), pytest.raises(readers.ReadStopped):
        readers.read_csv(path, "data", _all_but_last)
    assert len(calls) == 4  # asked once per block until it said stop
    np.savez(tmp_path / "d.npz", x=x.astype(np.float32), y=np.arange(3000) % 3)
    assert np.array_equal(readers.read_npz(tmp_path / "d.npz", "data", labels=True).x, x.astype(np.float32))
    with readers.stop_reading_when(stop_after(2)), pytest.raises(readers.ReadStopped):
        readers.read_npz(tmp_path / "d.npz", "data", labels=True)
    assert len(calls) == 3
    with readers.stop_reading_when(lambda: False):  # a read never asked to stop reads everything
        assert readers.read_npz(tmp_path / "d.npz", "data", labels=True).x.shape == (3000, 4)
