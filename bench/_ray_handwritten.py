"""The Ray Serve deployment a Ray user writes by hand for one exported model, as Ray's batching guide shows it.

    python bench/_ray_handwritten.py MODEL ADDRESS PORT REPLICAS MAX_BATCH WAIT_S

One deployment, ``REPLICAS`` replicas of one CPU each, ``@serve.batch`` (``max_ongoing_requests`` at least
the batch size, as the guide asks), the model loaded as traindesk loads it (one compute thread), answers in
traindesk's format. It serves until SIGTERM, then deletes its application.
"""

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

APP = "handwritten"


def main() -> int:
    model, address, port, replicas, max_batch, wait_s = sys.argv[1:7]
    import numpy as np
    import ray
    from ray import serve
    from starlette.requests import Request

    @serve.deployment(
        num_replicas=int(replicas), ray_actor_options={"num_cpus": 1}, max_ongoing_requests=max(64, int(max_batch))
    )
    class Model:
        def __init__(self, path: str) -> None:
            import torch

            from core.services.predict import load_predictor

            torch.set_num_threads(1)
            self.predictor = load_predictor(Path(path), threads=1)
            self.shape = self.predictor.input_shape

        @serve.batch(max_batch_size=int(max_batch), batch_wait_timeout_s=float(wait_s))
        async def predict(self, xs: list[Any]) -> list[Any]:
            probs = self.predictor.probabilities(np.concatenate(xs))
            out, lo = [], 0
            for x in xs:
                out.append(probs[lo : lo + len(x)])
                lo += len(x)
            return out

        async def __call__(self, request: Request) -> dict[str, Any]:
            body = await request.json()
            x = np.asarray(body["inputs"], dtype=np.float32).reshape((-1, *self.shape))
            probs = await self.predict(x)
            classes = self.predictor.classes
            return {
                "predictions": [
                    {"class": classes[int(p.argmax())], "probabilities": dict(zip(classes, p.tolist()))} for p in probs
                ]
            }

    ray.init(address=address, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": int(port)})
    serve.run(Model.bind(model), name=APP, route_prefix="/")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"http://127.0.0.1:{port}", flush=True)
    stop.wait()
    serve.delete(APP)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    sys.exit(main())
