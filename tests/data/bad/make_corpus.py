"""Write the bad-input corpus and its MANIFEST.toml (run from anywhere; rewrites in place).

    .venv/bin/python tests/data/bad/make_corpus.py

Every case is one entry of CASES below: the files it needs and a manifest
entry saying how the file is fed to TrainDesk and what the one-line error must
contain. tests/core/cli/test_bad_inputs.py reads MANIFEST.toml, runs every case
and checks that this script and the files on disk agree.

How a case is fed (``feed``), with the corpus folder as the working directory,
so that every path is relative to this folder:

- ``config``     ``traindesk train VALUE``
- ``source``     ``traindesk train --set data.source=VALUE`` (plus ``args``)
- ``model``      ``traindesk train --set data.source=builtin:iris --set model.kind=VALUE``
- ``checkpoint`` ``core.training.checkpoint.load_checkpoint(VALUE)`` (``stage = "load"`` fails there) and
                 ``model_from_checkpoint`` (``stage = "model"``); also ``train --resume VALUE``

Decisions recorded here:

- An empty config file is valid (every key has a default), so the "empty" config
  case is a config whose data source is an empty CSV.
- Image folders: files whose suffix is not an image suffix (notes.txt) are ignored;
  a file with an image suffix that is not a readable image is an error naming it.
  Mixed sizes and colour modes are fine: every image is converted and resized to
  data.image_size, or to the first image's size (see images/mixed_sizes, a
  *good* folder used by the image_size cases and by a positive test).
- Every image file is checked (header and, for PNG, each chunk's checksum) before
  training starts, so a truncated or corrupt PNG is exit 2 naming the file.

Everything written here is deterministic: PNGs use stored (uncompressed) deflate
blocks, .npz archives are written with a fixed timestamp, and "random" bytes
come from a seeded generator. Keep the whole corpus under 1 MB.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import struct
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
MANIFEST = "MANIFEST.toml"
KEEP = {"make_corpus.py", MANIFEST}
HUGE_FIELD = 140_000  # csv's default field limit is 131072 characters

# ----------------------------------------------------------------------------- writers


def _png_bytes(width: int, height: int, mode: str = "RGB", seed: int = 0) -> bytes:
    """A valid PNG with stored (uncompressed) deflate blocks: the same bytes on every machine."""
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    colour = {"L": 0, "RGB": 2, "RGBA": 6}[mode]
    rng = random.Random(seed)
    raw = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(width * channels)) for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0))
            + _chunk(b"IDAT", _stored_zlib(raw)) + _chunk(b"IEND", b""))


def _stored_zlib(raw: bytes) -> bytes:
    """A zlib stream of stored blocks: unlike zlib.compress, identical with every zlib build."""
    blocks = []
    for start in range(0, max(len(raw), 1), 65535):
        part = raw[start:start + 65535]
        final = 1 if start + 65535 >= len(raw) else 0
        blocks.append(struct.pack("<BHH", final, len(part), len(part) ^ 0xFFFF) + part)
    return b"\x78\x01" + b"".join(blocks) + struct.pack(">I", zlib.adler32(raw))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _npz_bytes(**arrays: Any) -> bytes:
    """An .npz (a zip of .npy files) with a fixed timestamp, like numpy.savez but reproducible."""
    import numpy as np

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(2020, 1, 1, 0, 0, 0))
            npy = io.BytesIO()
            np.lib.format.write_array(npy, np.asanyarray(arr), allow_pickle=True)  # pickle protocol 4
            zf.writestr(info, npy.getvalue())
    return buf.getvalue()


def _garbage(n: int, seed: int, prefix: bytes = b"\x89\xff\x00\xfe") -> bytes:
    """Seeded random bytes that are certainly not UTF-8 (the prefix sees to that)."""
    return prefix + random.Random(seed).randbytes(n)


class _Evil:
    """Pickles as a call to os.system: loading it with weights_only must refuse, never run it."""

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        return (os.system, ("echo pwned",))


def _pt_bytes(obj: Any) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _iris_checkpoint(hidden: list[int], weights_hidden: list[int], kind: str = "mlp", **changes: Any) -> dict[str, Any]:
    """A TrainDesk-shaped checkpoint for builtin:iris whose weights come from ``weights_hidden``.

    ``kind`` replaces model.kind in the saved config; a key given as None is left out.
    """
    import torch

    from core.config import Config, from_dict, to_dict
    from core.training.models import build_model

    cfg = to_dict(Config())
    cfg["data"]["source"] = "builtin:iris"
    cfg["model"]["hidden"] = hidden
    cfg["parallel"].update(strategy="single", workers=1)
    cfg["train"]["epochs"] = 2
    wcfg = from_dict({**cfg, "model": {**cfg["model"], "hidden": weights_hidden}})
    torch.manual_seed(0)
    model = build_model(wcfg.model, (4,), 3)
    payload: dict[str, Any] = {
        "format": "traindesk.checkpoint", "version": 1,
        "config": cfg,
        "info": {"name": "iris", "input_shape": [4], "num_classes": 3,
                 "class_names": ["setosa", "versicolor", "virginica"],
                 "feature_names": ["a", "b", "c", "d"], "image_shape": None,
                 "mean": [0.0] * 4, "std": [1.0] * 4},
        "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "models": None, "optimizers": None, "rng": None,
        "progress": [{"epoch": 1, "batch": 0, "step": 0, "samples": 0}],
        "epoch": 0, "steps": 0, "best_worker": 0, "worker_lrs": [0.05],
    }
    cfg["model"]["kind"] = kind
    for key, value in changes.items():
        if value is None:
            payload.pop(key, None)
        else:
            payload[key] = value
    return payload


# ----------------------------------------------------------------------------- the cases

FILES: dict[str, bytes | Callable[[], bytes]] = {}
CASES: list[dict[str, Any]] = []


def case(id: str, feed: str, value: str, expect: str, files: dict[str, Any] | None = None,
         names: str | None = None, why: str = "", **extra: Any) -> None:
    """Register a case: ``files`` maps corpus paths to bytes, text or a bytes factory."""
    listed = []
    for path, content in (files or {}).items():
        FILES[path] = content.encode("utf-8") if isinstance(content, str) else content
        listed.append(path)
    entry: dict[str, Any] = {"id": id, "feed": feed, "value": value, "files": listed, "expect": expect,
                             "names": names or (Path(listed[0]).name if listed else Path(value).name)}
    if why:
        entry["why"] = why
    entry.update(extra)
    CASES.append(entry)


def cfg(id: str, text: str | bytes, expect: str, why: str = "", **extra: Any) -> None:
    path = f"configs/{id}.toml"
    case(f"config-{id}", "config", path, expect, {path: text}, why=why, **extra)


# --- configs: wrong types, unknown keys, out of range, invalid TOML, not text
cfg("wrong_type_workers", '[parallel]\nworkers = "two"\n',
    'parallel.workers must be an integer from 1 to 256, got "two"')
cfg("wrong_type_lr", '[optim]\nlr = "fast"\n', 'optim.lr must be a number, got "fast"')
cfg("wrong_type_hidden", '[model]\nhidden = "256,256"\n', 'model.hidden must be a list of integers')
cfg("wrong_type_bool", '[data]\nstandardize = "yes"\n', 'data.standardize must be true or false, got "yes"')
cfg("wrong_type_datetime", "[train]\nseed = 1979-05-27T07:32:00Z\n",
    "train.seed must be an integer from 0 to 2147483647, got 1979-05-27T07:32:00+00:00")
cfg("array_of_tables", "[[train]]\nepochs = 2\n", "[train] must be a table, got [a table]")
cfg("section_not_table", 'data = "builtin:iris"\n', '[data] must be a table, got "builtin:iris"')
cfg("unknown_key", "[train]\nepochs = 2\nspeed = 3\n", "unknown key train.speed; known keys:")
cfg("unknown_section", "[trainer]\nepochs = 2\n", "unknown section [trainer]; known sections:")
cfg("unknown_key_newline", '[data]\n"col\\nour" = 1\n', 'unknown key data."col\\nour"',
    why="a quoted key holding a newline must not break the one-line error")
cfg("nested_table", "[train.schedule]\nwarmup = 5\n", "unknown key train.schedule")
cfg("epochs_zero", "[train]\nepochs = 0\n", "train.epochs must be an integer from 1 to 100000, got 0")
cfg("lr_inf", "[optim]\nlr = inf\n", "optim.lr must be a number greater than 0 and at most 100, got inf")
cfg("lr_nan", "[optim]\nlr = nan\n", "optim.lr must be a number greater than 0 and at most 100, got nan")
cfg("val_fraction_range", "[data]\nval_fraction = 1.5\n",
    "data.val_fraction must be a number at least 0 and at most 0.9, got 1.5")
cfg("batch_size_huge", "[train]\nbatch_size = 123456789012345678901234567890\n",
    "train.batch_size must be an integer from 1 to 1048576")
cfg("lr_int_beyond_float", "[optim]\nlr = 1" + "0" * 400 + "\n",
    "optim.lr must be a number greater than 0 and at most 100, got an integer of 401 digits",
    why="float() of this integer overflows")
cfg("int_too_many_digits", "[train]\nseed = " + "9" * 5000 + "\n", "invalid TOML: an integer has too many digits",
    why="tomllib raises a plain ValueError past Python's 4300-digit limit")
cfg("nested_too_deep", "[model]\nhidden = " + "[" * 1000 + "]" * 1000 + "\n",
    "invalid TOML: arrays or tables nested too deeply", why="tomllib recurses: RecursionError")
cfg("image_size_negative", '[data]\nsource = "images:images/mixed_sizes"\nimage_size = -8\n',
    "data.image_size must be an integer from 0 to 1024, got -8")
cfg("image_size_huge", '[data]\nsource = "images:images/mixed_sizes"\nimage_size = 5000\n',
    "data.image_size must be an integer from 0 to 1024, got 5000")
cfg("single_many_workers", '[parallel]\nstrategy = "single"\nworkers = 3\n',
    'parallel.workers must be 1 for strategy "single", got 3')
cfg("sweep_lr_count", '[parallel]\nstrategy = "sweep"\nworkers = 3\nsweep_lr = [0.1, 0.01]\n',
    "parallel.sweep_lr must have one learning rate per worker (3), got 2")
cfg("source_scheme", '[data]\nsource = "ftp://example.com/data.csv"\n',
    "data.source must be builtin:NAME, csv:PATH, npz:PATH or images:DIR")
cfg("custom_kind_no_function", '[model]\nkind = "custom:models/wrong_output.py"\n',
    "model.kind must be custom:PATH.py:FUNCTION")
cfg("device", '[parallel]\ndevice = "tpu"\n', 'parallel.device must be cpu, cuda, cuda:N or mps, got "tpu"')
cfg("invalid_toml", "[train\nepochs = 2\n", "invalid TOML")
cfg("duplicate_key", "[train]\nepochs = 2\nepochs = 3\n", "invalid TOML")
cfg("unterminated_string", '[data]\nsource = "csv:data.csv\n', "invalid TOML")
cfg("nul_byte", b"[train]\nepochs = 2\x00\n", "invalid TOML")
cfg("binary_garbage", _garbage(600, seed=1), "is not a UTF-8 text file")
cfg("utf16", '[train]\nepochs = 2\n'.encode("utf-16"), "is not a UTF-8 text file (it looks like UTF-16)")
cfg("latin1", '[data]\ntarget = "étiquette"\n'.encode("latin-1"), "is not a UTF-8 text file")
cfg("empty_csv_source", '[data]\nsource = "csv:csv/empty.csv"\n', "csv/empty.csv is empty", names="empty.csv",
    why="an empty config is valid (all defaults); 'empty' means a config pointing at an empty CSV")
case("config-directory", "config", "configs", "configs is a directory, not a TOML file", names="configs")
case("config-missing", "config", "configs/no_such_config.toml", "config: file not found: configs/no_such_config.toml")

# --- CSVs
CSV = "csv:csv/{}.csv"


def bad_csv(id: str, content: str | bytes, expect: str, why: str = "", args: list[str] | None = None) -> None:
    path = f"csv/{id}.csv"
    extra = {"args": args} if args else {}
    case(f"csv-{id}", "source", CSV.format(id), expect, {path: content}, why=why, **extra)


bad_csv("ragged_short", "a,b,label\n1,2,x\n3,4,y\n5,6\n", "line 4 has 2 fields, the header has 3")
bad_csv("ragged_long", "a,b,label\n1,2,x\n3,4,y,9\n", "line 3 has 4 fields, the header has 3")
bad_csv("ragged_after_blank_lines", "a,b,label\n\n1,2,x\n\n3,4\n", "line 5 has 2 fields, the header has 3",
        why="blank lines are skipped but still counted in the line number")
bad_csv("unclosed_quote", 'a,b,label\n1,2,x\n"3,4,y\n5,6,x\n', "line 4 has 1 fields, the header has 3 (an unclosed quote?)")
bad_csv("non_numeric", "a,b,label\n1,2,x\n3,abc,y\n", "column 'b' is not numeric (line 3: 'abc')")
bad_csv("missing_target_column", "a,b,c\n1,2,3\n4,5,6\n", "target column 'label' not found")
bad_csv("missing_target_other_name", "a,b,label\n1,2,x\n3,4,y\n", "target column 'species' not found",
        args=["--set", "data.target=species"])
bad_csv("missing_target_value", "a,b,label\n1,2,x\n3,4,\n5,6,x\n", "has only one class (x); need at least 2",
        why="rows without a target value are left out (and counted); here only class x remains")
bad_csv("all_missing_column", "a,b,label\n1,,x\n2,NA,y\n3,,x\n4,?,y\n", "column 'b' is all missing")
bad_csv("single_value_target", "a,price\n1,2.5\n2,2.5\n3,2.5\n", "target column 'price' has a single value (2.5)",
        args=["--set", "data.target=price"])
bad_csv("too_many_levels", "name,a,label\n" + "".join(f"n{i},{i % 5},{'xy'[i % 2]}\n" for i in range(60)),
        "category column 'name' has 48 levels in 48 training rows",
        args=["--set", 'data.columns={name = "category"}'])
bad_csv("no_usable_feature", "name,label\n" + "".join(f"person{i},{'xy'[i % 2]}\n" for i in range(30)),
        "has no usable feature column besides 'label' (ignored: name: an id")
case("parquet-not_parquet", "source", "parquet:parquet/not_parquet.parquet", "is not a readable Parquet file",
     {"parquet/not_parquet.parquet": "a,b,label\n1,2,x\n"}, names="not_parquet.parquet")
bad_csv("one_class", "a,b,label\n1,2,x\n3,4,x\n5,6,x\n", "has only one class (x); need at least 2")
bad_csv("empty", "", "csv/empty.csv is empty")
bad_csv("blank_lines_only", "\n\n  \n\n", "is empty")
bad_csv("header_only", "a,b,label\n", "has a header but no data rows")
bad_csv("only_target", "label\nx\ny\n", "has no feature columns besides 'label'")
bad_csv("huge_field", "a,b,label\n1,2,x\n3," + "7" * HUGE_FIELD + ",y\n", "malformed CSV: field larger than field limit")
bad_csv("utf16", "a,b,label\n1,2,x\n3,4,y\n".encode("utf-16"), "is not UTF-8 text (it looks like UTF-16")
bad_csv("latin1", "a,b,label\n1,2,café\n3,4,thé\n".encode("latin-1"), "is not UTF-8 text")
bad_csv("binary_garbage", _garbage(800, seed=2), "is not UTF-8 text")
bad_csv("nan", "a,b,label\n1,2,x\nnan,4,y\n", "column 'a' has a non-finite value (line 3: 'nan')")
bad_csv("inf", "a,b,label\n1,-inf,x\n3,4,y\n", "column 'b' has a non-finite value (line 2: '-inf')")
bad_csv("float32_overflow", "a,b,label\n1,2,x\n1e300,4,y\n", "column 'a' has a value too large for float32 (line 3",
        why="finite as a Python float, inf once stored as float32")


# --- NPZ archives
def bad_npz(id: str, content: Any, expect: str, why: str = "") -> None:
    path = f"npz/{id}.npz"
    case(f"npz-{id}", "source", f"npz:{path}", expect, {path: content}, why=why)


def _npz(**arrays: Any) -> Callable[[], bytes]:
    return lambda: _npz_bytes(**arrays)


def _npz_arrays() -> dict[str, Any]:
    import numpy as np

    x = (np.arange(30, dtype=np.float32) % 7).reshape(10, 3)
    return {"x": x, "y": np.arange(10) % 2, "np": np}


def _good_npz_truncated() -> bytes:
    a = _npz_arrays()
    data = _npz_bytes(x=a["x"], y=a["y"])
    return data[: len(data) // 2]


def _npz_case(make: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[], bytes]:
    return lambda: _npz_bytes(**make(_npz_arrays()))


bad_npz("truncated", _good_npz_truncated, "is not a readable .npz file")
bad_npz("not_a_zip", "x,y\n1,2\n", "is not a readable .npz file (not a zip archive)")
bad_npz("object_array", _npz_case(lambda a: {"x": a["np"].array([[1], [2], [3], [4]], dtype=object),
                                             "y": a["np"].array([0, 1, 0, 1])}),
        "holds object arrays (pickled Python objects), which are refused")
bad_npz("missing_y", _npz_case(lambda a: {"x": a["x"]}), "needs arrays 'x' and 'y', has: x")
bad_npz("length_mismatch", _npz_case(lambda a: {"x": a["x"], "y": a["y"][:9]}),
        "x must be (N, ...) and y (N,), got (10, 3) and (9,)")
bad_npz("nan", _npz_case(lambda a: {"x": a["np"].where(a["x"] == 3, a["np"].nan, a["x"]), "y": a["y"]}),
        "x has NaN or infinite values")
bad_npz("float64_overflow", _npz_case(lambda a: {"x": a["x"].astype("float64") * 1e300, "y": a["y"]}),
        "x has NaN or infinite values (or values too large for float32)",
        why="the cast to float32 used to print a numpy RuntimeWarning on stderr")
bad_npz("strings", _npz_case(lambda a: {"x": a["x"].astype(str), "y": a["y"]}), "x must be real numbers, got <U")
bad_npz("no_features", _npz_case(lambda a: {"x": a["np"].zeros((10, 0), "float32"), "y": a["y"]}),
        "x has no features, shape (10, 0)")
bad_npz("one_class", _npz_case(lambda a: {"x": a["x"], "y": a["y"] * 0}), "y has only one class (0)")
bad_npz("nan_labels", _npz_case(lambda a: {"x": a["x"], "y": a["np"].array([0.0, 1.0] * 4 + [a["np"].nan] * 2)}),
        "y has NaN or infinite labels")

# --- image folders (images/mixed_sizes is a good folder: see the module docstring)
GOOD_IMAGES = {
    "images/mixed_sizes/cat/0.png": lambda: _png_bytes(12, 12, "RGB", seed=1),
    "images/mixed_sizes/cat/1.png": lambda: _png_bytes(16, 10, "L", seed=2),
    "images/mixed_sizes/cat/2.png": lambda: _png_bytes(9, 14, "RGBA", seed=3),
    "images/mixed_sizes/dog/0.png": lambda: _png_bytes(20, 20, "RGB", seed=4),
    "images/mixed_sizes/dog/1.png": lambda: _png_bytes(7, 7, "L", seed=5),
    "images/mixed_sizes/dog/2.png": lambda: _png_bytes(12, 12, "RGB", seed=6),
    "images/mixed_sizes/dog/notes.txt": "not an image: ignored (no image suffix)\n",
}
FILES.update({k: (v.encode() if isinstance(v, str) else v) for k, v in GOOD_IMAGES.items()})


def _two_classes(root: str, extra: dict[str, Any]) -> dict[str, Any]:
    files: dict[str, Any] = {}
    for cls, seed in (("a", 10), ("b", 20)):
        for i in range(3):
            files[f"{root}/{cls}/{i}.png"] = (lambda s=seed + i: _png_bytes(8, 8, "RGB", seed=s))
    files.update(extra)
    return files


def _truncated_png() -> bytes:
    data = _png_bytes(8, 8, "RGB", seed=99)
    return data[: len(data) // 2]


def _corrupt_png() -> bytes:
    data = bytearray(_png_bytes(8, 8, "RGB", seed=98))
    data[data.index(b"IDAT") + 40] ^= 0xFF  # pixel bytes changed, checksum not
    return bytes(data)


def _bomb_png() -> bytes:
    """A 100-byte PNG claiming 30000x30000 pixels."""
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 30000, 30000, 8, 0, 0, 0, 0))
            + _chunk(b"IDAT", _stored_zlib(b"\x00" * 64)) + _chunk(b"IEND", b""))


def bad_images(id: str, files: dict[str, Any], expect: str, names: str, why: str = "") -> None:
    case(f"images-{id}", "source", f"images:images/{id}", expect, files, names=names, why=why)


bad_images("no_classes", {"images/no_classes/0.png": lambda: _png_bytes(8, 8, seed=30),
                          "images/no_classes/1.png": lambda: _png_bytes(8, 8, seed=31)},
           "images/no_classes needs one sub-folder per class (at least 2), found 0", names="no_classes")
bad_images("one_class", {f"images/one_class/cat/{i}.png": (lambda s=i: _png_bytes(8, 8, seed=40 + s)) for i in range(3)},
           "images/one_class needs one sub-folder per class (at least 2), found 1", names="one_class")
bad_images("empty_class", {"images/empty_class/a/0.png": lambda: _png_bytes(8, 8, seed=50),
                           "images/empty_class/a/1.png": lambda: _png_bytes(8, 8, seed=51),
                           "images/empty_class/b/notes.txt": "no images here\n"},
           "class folder images/empty_class/b holds no images", names="empty_class/b")
bad_images("truncated_png", _two_classes("images/truncated_png", {"images/truncated_png/b/broken.png": _truncated_png}),
           "cannot decode image images/truncated_png/b/broken.png", names="broken.png",
           why="half a PNG; checked before training, wherever the split puts it")
bad_images("truncated_png_end", _two_classes("images/truncated_png_end",
                                             {"images/truncated_png_end/a/cut.png": lambda: _png_bytes(8, 8, seed=97)[:-12]}),
           "cannot decode image images/truncated_png_end/a/cut.png: truncated PNG file", names="cut.png",
           why="every pixel present, the IEND chunk cut off")
bad_images("corrupt_png", _two_classes("images/corrupt_png", {"images/corrupt_png/a/corrupt.png": _corrupt_png}),
           "cannot decode image images/corrupt_png/a/corrupt.png: broken PNG file", names="corrupt.png")
bad_images("not_an_image", _two_classes("images/not_an_image", {"images/not_an_image/b/fake.png": "I am text, not a PNG\n"}),
           "cannot decode image images/not_an_image/b/fake.png: not an image file", names="fake.png",
           why="a non-image file with an image suffix; without one (notes.txt) it is ignored")
bad_images("zero_bytes", _two_classes("images/zero_bytes", {"images/zero_bytes/a/empty.png": b""}),
           "cannot decode image images/zero_bytes/a/empty.png: not an image file", names="empty.png")
bad_images("bomb", _two_classes("images/bomb", {"images/bomb/a/huge.png": _bomb_png}),
           "cannot decode image images/bomb/a/huge.png: too many pixels (possible decompression bomb)", names="huge.png",
           why="PIL raises DecompressionBombError, not an OSError")


# --- custom model files (fed with builtin:iris: 4 features, 3 classes)
def bad_model(id: str, source: str | bytes, expect: str, func: str = "make", why: str = "",
              suffix: str = ".py") -> None:
    path = f"models/{id}{suffix}"
    case(f"model-{id}", "model", f"custom:{path}:{func}", expect, {path: source}, why=why)


HEAD = "import math\n\nimport torch\nfrom torch import nn\n\n\n"
bad_model("syntax_error", HEAD + "def make(shape, n):\n    return nn.Linear(math.prod(shape), n\n",
          "syntax error in models/syntax_error.py line 8")
bad_model("no_function", HEAD + "def build(shape, n):\n    return nn.Linear(math.prod(shape), n)\n",
          "models/no_function.py has no function 'make'")
bad_model("not_callable", HEAD + "make = 42\n", "models/not_callable.py has no function 'make'")
bad_model("returns_non_module", HEAD + "def make(shape, n):\n    return {'weights': [1, 2, 3]}\n",
          "must return a torch.nn.Module, returned dict")
bad_model("wrong_output", HEAD + "def make(shape, n):\n    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), n + 2))\n",
          "output must have shape (batch, 3) for 3 classes, got (2, 5)")
bad_model("tuple_output", HEAD + "class Two(nn.Module):\n    def __init__(self, k, n):\n        super().__init__()\n"
          "        self.fc = nn.Linear(k, n)\n\n    def forward(self, x):\n        return self.fc(x), x\n\n\n"
          "def make(shape, n):\n    return Two(math.prod(shape), n)\n",
          "output must have shape (batch, 3) for 3 classes, got tuple")
bad_model("raises", HEAD + "def make(shape, n):\n    raise RuntimeError('boom: cannot build')\n",
          "calling it raised RuntimeError: boom: cannot build (line 8)")
bad_model("raises_multiline", HEAD + "def make(shape, n):\n    raise ValueError('first line\\nsecond line\\nthird')\n",
          "calling it raised ValueError: first line (line 8)", why="only the first line of the message is kept")
bad_model("wrong_signature", HEAD + "def make():\n    return nn.Linear(4, 3)\n",
          "calling it raised TypeError: make() takes 0 positional arguments but 2 were given")
bad_model("missing_import", HEAD + "import no_such_module_for_traindesk\n\n\ndef make(shape, n):\n    return nn.Linear(4, n)\n",
          "importing models/missing_import.py raised ModuleNotFoundError: No module named 'no_such_module_for_traindesk' (line 7)")
bad_model("sys_exit", HEAD + "import sys\n\nsys.exit('this file is a script, not a model')\n",
          "importing models/sys_exit.py raised SystemExit: this file is a script, not a model",
          why="SystemExit is not an Exception: it used to end the CLI with a traceback-free exit 1")
bad_model("forward_fails", HEAD + "def make(shape, n):\n    return nn.Linear(7, n)\n",
          "forward pass on input shape (4,) failed: RuntimeError: mat1 and mat2 shapes cannot be multiplied")
bad_model("no_parameters", HEAD + "class Take(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
          "        self.n = n\n\n    def forward(self, x):\n        return x[:, : self.n]\n\n\n"
          "def make(shape, n):\n    return Take(n)\n",
          "the model has no trainable parameters", why="the optimizer would fail in every worker")
bad_model("garbage", _garbage(300, seed=3, prefix=b"\x00\x89\xff"), "source code string cannot contain null bytes")
bad_model("not_python", "def make(shape, n):\n    pass\n", "a custom model must be a Python file ending in .py",
          suffix=".txt")
case("model-missing_file", "model", "custom:models/no_such_model.py:make",
     "model: custom:models/no_such_model.py:make: file not found")


# --- checkpoints
def bad_ckpt(id: str, content: Any, expect: str, stage: str, why: str = "", known_issue: str = "",
             resume_known_issue: str = "") -> None:
    path = f"checkpoints/{id}.pt"
    extra: dict[str, Any] = {"stage": stage}
    if known_issue:
        extra["known_issue"] = known_issue
    if resume_known_issue:
        extra["resume_known_issue"] = resume_known_issue
    case(f"checkpoint-{id}", "checkpoint", path, expect, {path: content}, why=why, **extra)


def _truncated_ckpt() -> bytes:
    data = _pt_bytes(_iris_checkpoint([8], [8]))
    return data[: len(data) // 2]


bad_ckpt("truncated", _truncated_ckpt, "is not a readable checkpoint", "load")
bad_ckpt("empty", b"", "is not a readable checkpoint", "load")
bad_ckpt("not_torch", "this is a text file, not a checkpoint\n", "is not a readable checkpoint", "load")
bad_ckpt("pickled_code", lambda: _pt_bytes({"format": "traindesk.checkpoint", "version": 1, "payload": _Evil()}),
         "was refused (weights_only)", "load", why="its pickle calls os.system('echo pwned'): must never run")
bad_ckpt("not_traindesk", lambda: _pt_bytes({"weights": __import__("torch").zeros(3)}),
         "is not a TrainDesk checkpoint", "load")
bad_ckpt("state_dict_only", lambda: _pt_bytes(_iris_checkpoint([8], [8])["model"]),
         "is not a TrainDesk checkpoint", "load", why="a bare state dict (an OrderedDict), not a checkpoint")
bad_ckpt("wrong_architecture", lambda: _pt_bytes(_iris_checkpoint([8], [5])),
         "weights do not fit the model", "model", why="config says hidden = [8], the weights are hidden = [5]")
bad_ckpt("bad_config", lambda: _pt_bytes(_iris_checkpoint([8], [8], config={"train": {"speed": 3}})),
         "its config is unusable: config: unknown key train.speed", "model")
bad_ckpt("config_not_table", lambda: _pt_bytes(_iris_checkpoint([8], [8], config="hidden = [8]")),
         "its config is unusable", "model")
bad_ckpt("missing_info", lambda: _pt_bytes(_iris_checkpoint([8], [8], info=None)),
         "has no 'info' table", "model")
bad_ckpt("missing_weights", lambda: _pt_bytes(_iris_checkpoint([8], [8], model=None)),
         "has no 'model' table", "model")
bad_ckpt("weights_not_dict", lambda: _pt_bytes(_iris_checkpoint([8], [8], model=[1, 2, 3])),
         "has no 'model' table", "model")
bad_ckpt("custom_model_missing", lambda: _pt_bytes(_iris_checkpoint([8], [8], kind="custom:models/gone.py:make")),
         "its model cannot be rebuilt", "model")


# ----------------------------------------------------------------------------- writing


def _toml_str(s: str) -> str:
    import json

    return json.dumps(s, ensure_ascii=False)


def manifest_text() -> str:
    out = [
        "# The bad-input corpus: one [[case]] per malformed input. Generated by make_corpus.py: edit it there.",
        "# feed: config | source | model | checkpoint (see make_corpus.py); value: what is passed; files: corpus",
        "# files the case needs; expect: a substring of the one-line error; names: the file name it must name.",
        "# known_issue / resume_known_issue: a bug outside the owned files (in-process / through train --resume),",
        "# tested as a strict xfail until it is fixed: then delete the line in make_corpus.py and regenerate.",
        "",
    ]
    for entry in CASES:
        out.append("[[case]]")
        for key in ("id", "feed", "value", "files", "expect", "names", "args", "stage", "why", "known_issue",
                    "resume_known_issue"):
            if key not in entry:
                continue
            v = entry[key]
            if isinstance(v, list):
                out.append(f"{key} = [" + ", ".join(_toml_str(x) for x in v) + "]")
            else:
                out.append(f"{key} = {_toml_str(v)}")
        out.append("")
    return "\n".join(out)


def build(root: Path) -> dict[str, bytes]:
    """Every corpus file's bytes by relative path, MANIFEST.toml included (nothing written)."""
    if str(HERE.parents[2]) not in sys.path:
        sys.path.insert(0, str(HERE.parents[2]))  # core, for the checkpoint cases
    out: dict[str, bytes] = {}
    for rel, content in FILES.items():
        out[rel] = content() if callable(content) else content
    out[MANIFEST] = manifest_text().encode("utf-8")
    return out


def write(root: Path = HERE) -> None:
    files = build(root)
    for child in root.iterdir():  # start clean: a case removed here leaves no file behind
        if child.name in KEEP or child.name.startswith("."):
            continue
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    total = sum(len(d) for d in files.values())
    print(f"{len(CASES)} cases, {len(files)} files, {total / 1024:.0f} KiB in {root}")


if __name__ == "__main__":
    write()
