"""What this machine offers the process, from the standard library alone (no torch import)."""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Iterator
from typing import Any


def usable_cores() -> int:
    """The CPUs this process may run on: its affinity (a cgroup-pinned container), else the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


KEEP_HEAP_BYTES = 128 << 20  # freed memory a worker keeps for its next step before giving it back
HEAP_BLOCK_BYTES = 32 << 20  # blocks below this come from the heap (glibc's own upper bound)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def keep_freed_memory() -> bool:
    """Let this process reuse the memory each step frees (glibc; elsewhere nothing changes).

    glibc hands a freed block of 128 KiB or more back to the kernel (munmap,
    or a heap trim) and faults its pages in again on the next step: tensors
    of a few MiB each, made and freed on every batch, cost a predict worker
    4 ms per 2048-row batch of a small MLP (1.25 s against 0.85 s for 98
    batches). Blocks below 32 MiB now come from the heap, and up to 128 MiB
    of it stays mapped; larger blocks go back as before. True when set.
    """
    global _keeping
    libc = _glibc()
    if libc is None:
        return False
    _keeping = bool(libc.mallopt(M_MMAP_THRESHOLD, HEAP_BLOCK_BYTES)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, KEEP_HEAP_BYTES)
    )
    return _keeping


LOAD_MMAP_BYTES = 128 << 10  # while a large input loads, blocks of this size or more are mapped apart
_keeping = False  # keep_freed_memory() is in effect in this process


@contextlib.contextmanager
def freed_memory_given_back() -> Iterator[None]:
    """While it lasts, every block of ``LOAD_MMAP_BYTES`` or more this process frees goes back to the
    kernel at once (glibc; elsewhere nothing changes); at its end the heap is trimmed and the process's
    own setting comes back.

    glibc raises its mapping threshold each time a mapped block is freed (up to 32 MiB), after which the
    columns of a table being read come from the heap, whose freed holes stay in the process: a table read
    block by block then left the loading process hundreds of MiB it no longer used. A fixed threshold
    keeps large blocks mapped apart, so freeing one gives its pages back. Kept afterwards it would map
    and fault in every large tensor a process makes (an evaluation's batches): so it is not.
    """
    libc = _glibc()
    if libc is None:
        yield
        return
    libc.mallopt(M_MMAP_THRESHOLD, LOAD_MMAP_BYTES)
    try:
        yield
    finally:
        trim_freed_memory()
        if _keeping:
            keep_freed_memory()
        else:  # where glibc's own thresholds end up once large blocks come and go
            libc.mallopt(M_MMAP_THRESHOLD, HEAP_BLOCK_BYTES)
            libc.mallopt(M_TRIM_THRESHOLD, 2 * HEAP_BLOCK_BYTES)


@functools.cache
def _glibc() -> Any:
    """This process's C library when it is glibc on Linux (``mallopt``, ``malloc_trim``, ``madvise``), else None."""
    import sys

    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def trim_freed_memory() -> None:
    """Give the heap's free pages back to the kernel (glibc's ``malloc_trim``; elsewhere nothing), and
    pyarrow's pool its own when pyarrow is loaded."""
    import sys

    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def release_pages(array: object, rows: int) -> None:
    """Give the system back the whole pages holding the first ``rows`` rows of ``array`` (a 1-D numpy
    array that owns its memory), which are never read again: a column whose rows are consumed in order
    shrinks as they go (Linux ``madvise(MADV_DONTNEED)``; elsewhere, or for an array that shares its
    memory, nothing). Reading those rows afterwards gives zeros."""
    import numpy as np

    if not isinstance(array, np.ndarray) or not array.flags.owndata:
        return
    if array.ndim != 1 or not array.flags.c_contiguous or rows <= 0:
        return
    libc = _glibc()
    if libc is None:
        return
    import ctypes
    import mmap

    start = array.ctypes.data
    begin = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    end = (start + min(rows, len(array)) * array.itemsize) // mmap.PAGESIZE * mmap.PAGESIZE
    if end > begin:
        MADV_DONTNEED = 4
        libc.madvise(ctypes.c_void_p(begin), ctypes.c_size_t(end - begin), MADV_DONTNEED)


def skip_pandas() -> bool:
    """Let pyarrow find no pandas in this process, a process that never gives it a pandas object
    (prediction, training): pyarrow imports pandas, when it is installed (MLflow brings it), at its first
    conversion of any array, only to recognise pandas objects, and that import takes 0.2 s of a 1.1 s
    ``predict`` of 200,000 rows here, again in every pool process, and about 50 MB. pyarrow looks once and
    keeps the answer: it looks now, with pandas refused, and pandas stays importable for anything else
    (timm's models import it). True when pyarrow was told; False when pandas is imported already or
    pyarrow had looked."""
    import sys

    if "pandas" in sys.modules:
        return False
    with imports_refused("pandas"):
        import pyarrow as pa

        pa.array([0])  # pyarrow's first look for pandas
    return "pandas" not in sys.modules


@contextlib.contextmanager
def imports_refused(*names: str) -> Iterator[None]:
    """While it lasts, these packages are absent: importing one, or asking ``importlib.util.find_spec``
    for it, raises ModuleNotFoundError (what both say of a package that is not installed, and what torch
    and pyarrow catch); afterwards they import as usual."""
    import sys

    refused = _Refused(frozenset(names))
    sys.meta_path.insert(0, refused)
    try:
        yield
    finally:
        sys.meta_path.remove(refused)


class _Refused:
    """A meta path finder that answers an import of one of ``names`` with ModuleNotFoundError."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"{fullname} is not imported in this process", name=fullname)


# torch's CUDA libraries and its own CUDA part, by file name: a process that never starts CUDA runs no code
# of theirs after its import
_CUDA_LIBRARY = re.compile(
    r"/lib(?:cublas|cublasLt|nvJitLink|nvrtc|torch_cuda|c10_cuda|cusparse|cusparseLt|cufft|curand|cusolver"
    r"|cudnn\w*|nccl|nvshmem\w*|cupti|cufile|cudart)\.so[.\d]*$"
)


def drop_cuda_library_pages() -> int:
    """Let go of the resident pages of torch's CUDA libraries that only their loading touched (Linux;
    elsewhere nothing); the bytes of the ranges let go.

    ``import torch`` with its CUDA build loads cuBLASLt, nvJitLink, nvrtc and libtorch_cuda whether or not
    a GPU is there, and their start-up leaves about 140 MB of their files' pages in the process (in the
    command's process and, shared, in every process forked from it). Only mappings the process cannot write
    and where no page differs from the file are let go (``MADV_DONTNEED``: a page is read again from the
    file if it is touched), so nothing the libraries hold is lost, GPU or not.
    """
    libc = _glibc()
    if libc is None:
        return 0
    import ctypes

    vmas: list[tuple[list[str], int]] = []
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split(maxsplit=6)
            if "-" in head[0] and not head[0].endswith(":"):
                vmas.append((head, 0))
            elif head[0] in ("Private_Dirty:", "Shared_Dirty:") and vmas:
                vmas[-1] = (vmas[-1][0], vmas[-1][1] + int(head[1]))
    dropped = 0
    MADV_DONTNEED = 4
    for head, dirty in vmas:
        if dirty or len(head) < 6 or "w" in head[1] or not _CUDA_LIBRARY.search(head[5].strip()):
            continue
        begin, end = (int(x, 16) for x in head[0].split("-"))
        if libc.madvise(ctypes.c_void_p(begin), ctypes.c_size_t(end - begin), MADV_DONTNEED) == 0:
            dropped += end - begin
    return dropped
