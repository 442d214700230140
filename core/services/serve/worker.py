"""An inference process of ``traindesk serve``: the model loaded once, batches in and answers out on one pipe.

Messages are bytes, the first one saying what they are:

    to the worker    B id n rows   a batch (float32, C order)       H t   a heartbeat
                     L path        load a model beside the current  S     serve the one just loaded
                     D             drop the one just loaded         Q     exit
    from the worker  R id n k probs   answers of batch id          E id text   batch id failed (one line)
                     M json        a model loaded: its description  F text      loading failed (one line)
                     H t           the heartbeat back               S           now serving the loaded model

The model is loaded as ``traindesk predict`` loads it (core.services.predict), with one
compute thread. Nothing is imported at module level but the standard library:
the forkserver preloads torch and core.services.predict.
"""

from __future__ import annotations

import json
import signal
import struct
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

BATCH_HEAD = struct.Struct("<QI")  # batch id, rows
RESULT_HEAD = struct.Struct("<QII")  # batch id, rows, classes
CANARY_ID = 0  # the batch id of a canary (real batches count from 1)
SERVE_PRELOAD = [
    "torch",
    "core.services.predict",
    "core.training.models",
    "core.services.serve.worker",
    "safetensors.torch",
    "numpy",
    "onnxruntime",
]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def _description(predictor: Any) -> bytes:
    meta = {k: v for k, v in predictor.meta.items() if k != "export"}
    return json.dumps(meta).encode()


def worker_main(conn: Connection, model_path: str, parent_pid: int) -> None:
    """The inference loop: load, say what was loaded, then answer messages until told to stop or orphaned."""
    from core.host.lifeline import die_with_parent
    from core.host.machine import keep_freed_memory

    die_with_parent(parent_pid)
    keep_freed_memory()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group: the server stops us itself
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # so is a SIGTERM sent to the group: the server drains first
    import numpy as np

    from core.services.predict import load_predictor

    try:
        predictor = load_predictor(Path(model_path), threads=1)
    except BaseException as exc:  # said to the server, which reports it
        conn.send_bytes(b"F" + _one_line(exc).encode())
        return
    conn.send_bytes(b"M" + _description(predictor))
    pending: Any = None
    shape = predictor.input_shape
    buf = bytearray(1 << 20)
    while True:
        try:
            size = conn.recv_bytes_into(buf)
            msg = memoryview(buf)[:size]
        except EOFError:
            return
        except Exception as exc:  # BufferTooShort: a batch larger than the buffer, kept whole in its args
            data = exc.args[0] if exc.args and isinstance(exc.args[0], (bytes, bytearray)) else None
            if data is None:
                raise
            buf = bytearray(len(data) * 2)
            buf[: len(data)] = data
            size = len(data)
            msg = memoryview(buf)[:size]
        kind = bytes(msg[:1])
        if kind == b"B":
            batch_id, n = BATCH_HEAD.unpack_from(msg, 1)
            try:
                x = np.frombuffer(buf, dtype=np.float32, count=n * _prod(shape), offset=1 + BATCH_HEAD.size).reshape(
                    (n, *shape)
                )
                probs = _probabilities(predictor, x)
            except Exception as exc:
                conn.send_bytes(b"E" + struct.pack("<Q", batch_id) + _one_line(exc).encode())
                continue
            conn.send_bytes(b"R" + RESULT_HEAD.pack(batch_id, n, probs.shape[1]) + probs.tobytes())
        elif kind == b"H":
            conn.send_bytes(bytes(msg))
        elif kind == b"L":
            try:
                pending = load_predictor(Path(bytes(msg[1:]).decode()), threads=1)
            except BaseException as exc:
                pending = None
                conn.send_bytes(b"F" + _one_line(exc).encode())
                continue
            conn.send_bytes(b"M" + _description(pending))
        elif kind == b"S":
            if pending is not None:
                predictor, pending = pending, None
                shape = predictor.input_shape
            conn.send_bytes(b"S")
        elif kind == b"D":
            pending = None
        elif kind == b"Q":
            return


def _probabilities(predictor: Any, x: Any) -> Any:
    """The batch's probabilities, float32; images a small batch at a time (``predict``'s), so a worker's
    activations stay those of a few images however many a batch gathers."""
    import numpy as np

    from core.services.predict import IMAGE_BATCH_ROWS

    step = IMAGE_BATCH_ROWS if len(x.shape) == 4 else len(x)
    if len(x) <= step:
        return np.ascontiguousarray(predictor.probabilities(x), dtype=np.float32)
    return np.concatenate([predictor.probabilities(x[i : i + step]) for i in range(0, len(x), step)]).astype(
        np.float32, copy=False
    )


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out
