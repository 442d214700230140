"""core.readers: pyarrow's path and the line-precise path read the same values; errors fall back to the latter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core import readers
from core.errors import DataError
from core.readers import Columns


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
    fast = readers._read_fast(path, _all_but_last)
    exact = readers._read_exact(path, "data", _all_but_last)
    assert fast is not None
    assert fast.header == exact.header == ["a", "b", "c", "d", "label"]
    assert fast.x.dtype == np.float32 and fast.x.flags.c_contiguous
    assert np.array_equal(fast.x, exact.x) and np.array_equal(fast.x, x.astype(np.float32))
    assert fast.text[4].tolist() == exact.text[4].tolist() == [f"cls{i % 3}" for i in range(500)]


@pytest.mark.parametrize("text", [
    "a,label\n1,x\n0x10,y\n",          # pyarrow would read hex in an inferred column; we never infer
    "a,label\n1,x\nnan,y\n",           # pyarrow reads nan as null
    "a,label\n1,x\n1e39,y\n",          # finite as float64, not as float32
    "a,label\n1,x\n2, \n",             # blank label
])
def test_what_pyarrow_would_accept_gets_the_exact_reader(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    assert readers._read_fast(path, _all_but_last) is None
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
