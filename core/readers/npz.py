"""Reading NPZ files: ``np.load`` without pickles, checked once, arrays read by blocks; where an uncompressed
NPZ keeps its ``x`` so that other processes read their rows from the file."""

from __future__ import annotations

import math
import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import DataError
from core.readers import blocks
from core.readers.blocks import ReadStopped, check_stop


@dataclass(frozen=True)
class NpzData:
    x: np.ndarray  # float32 (N, ...), finite
    y: np.ndarray | None = None  # labels as stored (N,), when asked for
    class_names: np.ndarray | None = None
    ids: np.ndarray | None = None


X_KEYS = ("x", "X", "features")
Y_KEYS = ("y", "Y", "labels", "target")
ID_KEYS = ("id", "ids")


def read_npz(path: Path, where: str, labels: bool) -> NpzData:
    """Array ``x`` (and ``y`` when ``labels``) from an NPZ, refusing pickles; raise :class:`DataError`."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{where}: file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            keys = set(npz.files)
            xk, yk = _member_names(keys, labels, path, where)
            x = _read_member(npz, xk)
            y, names, ids = _side_arrays(npz, keys, yk if labels else None)
    except (DataError, ReadStopped):
        raise
    except Exception as exc:  # numpy raises many types for a corrupt archive
        raise _unreadable(exc, path, where) from None
    ids = _checked(x.shape, x.dtype, y, ids, path, where)
    with np.errstate(over="ignore", invalid="ignore"):  # too large for float32 becomes inf: refused below
        x = np.ascontiguousarray(x, dtype=np.float32)
    if not np.isfinite(x).all():
        raise DataError(f"{where}: {path}: x has NaN or infinite values (or values too large for float32)")
    return NpzData(x, y, names, ids)


def _side_arrays(npz: Any, keys: set[str], yk: str | None) -> tuple[Any, Any, Any]:
    """An open NPZ's labels (member ``yk``; None: none read), class names (with the labels) and row ids."""
    y = np.asarray(npz[yk]) if yk is not None else None
    names = np.asarray(npz["class_names"]) if yk is not None and "class_names" in keys else None
    idk = next((k for k in ID_KEYS if k in keys), None)
    return y, names, (np.asarray(npz[idk]) if idk is not None else None)


def _checked(
    shape: tuple[int, ...], dtype: np.dtype[Any], y: np.ndarray | None, ids: Any, path: Path, where: str
) -> Any:
    """Check the features' shape and type (of an array read, or of its header) and the labels against them;
    the ids, or None when they do not name every row."""
    if y is not None and (len(shape) < 2 or y.ndim != 1 or shape[0] != y.shape[0]):
        raise DataError(f"{where}: {path}: x must be (N, ...) and y (N,), got {shape} and {y.shape}")
    if len(shape) < 1 or shape[0] == 0:
        raise DataError(f"{where}: {path} holds no samples")
    if not np.issubdtype(dtype, np.number) or np.issubdtype(dtype, np.complexfloating):
        raise DataError(f"{where}: {path}: x must be real numbers, got {dtype}")
    if math.prod(shape[1:]) == 0:
        raise DataError(f"{where}: {path}: x has no features, shape {shape}")
    if y is not None and np.issubdtype(y.dtype, np.floating) and not np.isfinite(y).all():
        raise DataError(f"{where}: {path}: y has NaN or infinite labels")
    return ids if ids is None or ids.shape[:1] == shape[:1] else None


def _member_names(keys: set[str], labels: bool, path: Path, where: str) -> tuple[str, str | None]:
    """The names of the features array and of the labels (when there are any) in an NPZ's ``keys``; both
    must be there when ``labels``."""
    xk = next((k for k in X_KEYS if k in keys), None)
    yk = next((k for k in Y_KEYS if k in keys), None)
    if xk is None or (labels and yk is None):
        need = "arrays 'x' and 'y'" if labels else "an array 'x'"
        raise DataError(f"{where}: {path} needs {need}, has: " + ", ".join(sorted(keys)))
    return xk, yk


def _unreadable(exc: Exception, path: Path, where: str) -> DataError:
    """The one-line error for an NPZ that numpy could not read (``exc``)."""
    if isinstance(exc, ValueError) and "allow_pickle" in str(exc) and zipfile.is_zipfile(path):
        return DataError(  # else numpy took it for a pickle
            f"{where}: {path} holds object arrays (pickled Python objects), which are refused; save numeric arrays"
        )
    if isinstance(exc, ValueError):
        why = type(exc).__name__ if zipfile.is_zipfile(path) else "not a zip archive"
        return DataError(f"{where}: {path} is not a readable .npz file ({why})")
    return DataError(f"{where}: {path} is not a readable .npz file ({type(exc).__name__})")


def _array_header(fh: Any) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    """An .npy member's (shape, fortran order, dtype), ``fh`` left at its first byte of data."""
    major, _ = np.lib.format.read_magic(fh)
    read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read_header(fh)
    return shape, fortran, dtype


def _read_member(npz: Any, key: str) -> np.ndarray:
    """Array ``key`` of an open NPZ, read in chunks of ``READ_BLOCK_BYTES`` (asking whether to stop between
    them); what is not a plain array of numbers goes to numpy's own reader, which says what is wrong."""
    try:
        with npz.zip.open(f"{key}.npy") as fh:
            shape, fortran, dtype = _array_header(fh)
            if dtype.hasobject:
                raise ValueError("object array")
            out = np.empty(shape[::-1] if fortran else shape, dtype=dtype)
            view = out.reshape(-1).view(np.uint8).data
            for lo in range(0, len(view), blocks.READ_BLOCK_BYTES):
                check_stop()
                part = view[lo : lo + blocks.READ_BLOCK_BYTES]
                if fh.readinto(part) != len(part):
                    raise ValueError("truncated array")
            check_stop()
            return out.T if fortran else out
    except (KeyError, ValueError, OSError, zipfile.BadZipFile, EOFError):
        return np.asarray(npz[key])


@dataclass(frozen=True)
class StoredArray:
    """A float32 array kept uncompressed inside a file (an NPZ written by ``np.savez``): processes that
    need some of its rows read them there (:meth:`rows`) instead of being sent them."""

    path: str
    offset: int  # where the array's bytes start in the file
    shape: tuple[int, ...]

    def rows(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo``..``hi`` (float32, C order), read from the file."""
        per_row = math.prod(self.shape[1:])
        with open(self.path, "rb") as fh:
            fh.seek(self.offset + lo * per_row * 4)
            data = np.fromfile(fh, np.dtype("<f4"), count=(hi - lo) * per_row)
        if data.size != (hi - lo) * per_row:
            raise DataError(f"predict: {self.path} changed while it was being read")
        return data.astype(np.float32, copy=False).reshape((hi - lo, *self.shape[1:]))


def stored_npz_x(path: Path) -> StoredArray | None:
    """Where an NPZ holds ``x`` (the array :func:`read_npz` reads) as little-endian float32 in C order,
    uncompressed; None for anything else (compressed with ``savez_compressed``, another dtype)."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            key = next((f"{k}.npy" for k in X_KEYS if f"{k}.npy" in names), None)
            if key is None:
                return None
            info = zf.getinfo(key)
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:  # compressed or encrypted
            return None
        with open(path, "rb") as fh:
            fh.seek(info.header_offset)
            local = fh.read(30)  # the entry's local header: its name and extra field lengths are its own
            if len(local) != 30 or local[:4] != b"PK\x03\x04":
                return None
            name_len, extra_len = struct.unpack("<HH", local[26:30])
            start = info.header_offset + 30 + name_len + extra_len
            fh.seek(start)
            major, _ = np.lib.format.read_magic(fh)
            if major not in (1, 2):
                return None
            read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(fh)
            offset = fh.tell()
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None
    if fortran or dtype != np.dtype("<f4") or not shape or offset + math.prod(shape) * 4 > start + info.file_size:
        return None
    return StoredArray(str(path), offset, tuple(int(s) for s in shape))


@dataclass(frozen=True)
class NpzRows:
    """An NPZ's ``x`` read a block of rows at a time (:meth:`blocks`), never whole; ``labels`` holds the
    rest of the file (``y``, class names, ids) with ``x`` empty."""

    path: Path
    where: str
    key: str
    shape: tuple[int, ...]
    labels: NpzData

    def blocks(self) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(lo, hi, rows lo..hi as float32 (hi - lo, ...))``, each block about ``READ_BLOCK_BYTES``, finite
        (else a :class:`DataError`); asks whether to stop between blocks."""
        with np.load(self.path, allow_pickle=False) as npz, npz.zip.open(f"{self.key}.npy") as fh:
            shape, fortran, dtype = _array_header(fh)
            if fortran or dtype.hasobject:  # read whole by numpy (it says what is wrong), then given by blocks
                whole = read_npz(self.path, self.where, labels=False).x
                step = max(1, blocks.READ_BLOCK_BYTES // max(1, whole[0].nbytes))
                for lo in range(0, len(whole), step):
                    yield lo, min(lo + step, len(whole)), whole[lo : lo + step]
                return
            per_row = math.prod(shape[1:]) * dtype.itemsize
            step = max(1, blocks.READ_BLOCK_BYTES // max(1, per_row))
            for lo in range(0, shape[0], step):
                check_stop()
                hi = min(lo + step, shape[0])
                data = fh.read((hi - lo) * per_row)
                if len(data) != (hi - lo) * per_row:
                    raise DataError(f"{self.where}: {self.path} is not a readable .npz file (x is cut short)")
                part = np.frombuffer(data, dtype=dtype).reshape((hi - lo, *shape[1:]))
                with np.errstate(over="ignore", invalid="ignore"):
                    part = part.astype(np.float32)
                if not np.isfinite(part).all():
                    raise DataError(
                        f"{self.where}: {self.path}: x has NaN or infinite values (or values too large for float32)"
                    )
                yield lo, hi, part


def open_npz_rows(path: Path, where: str) -> NpzRows:
    """An NPZ of ``x`` and ``y`` (for training), checked as :func:`read_npz` checks it, its ``x`` left in
    the file to be read by blocks; raise :class:`DataError`."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{where}: file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            keys = set(npz.files)
            xk, yk = _member_names(keys, True, path, where)
            with npz.zip.open(f"{xk}.npy") as fh:
                shape, _, dtype = _array_header(fh)
            y, names, ids = _side_arrays(npz, keys, yk)
    except (DataError, ReadStopped):
        raise
    except Exception as exc:
        raise _unreadable(exc, path, where) from None
    shape = tuple(int(s) for s in shape)
    if dtype.hasobject:
        raise DataError(
            f"{where}: {path} holds object arrays (pickled Python objects), which are refused; save numeric arrays"
        )
    ids = _checked(shape, dtype, y, ids, path, where)
    return NpzRows(path, where, xk, shape, NpzData(np.empty((0, *shape[1:]), np.float32), y, names, ids))
