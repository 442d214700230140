"""The servers bench/serve_load.py measures traindesk serve against, each written as its docs show.

    python bench/_serve_peers.py litserve MODEL PORT WORKERS   LitServe, batching 64 rows / 5 ms
    uvicorn bench._serve_peers:fastapi_app --workers N          FastAPI, no batching (model from $SERVE_MODEL)
    uvicorn bench._serve_peers:constant_app                     Starlette: parse the JSON, answer a constant

Every one loads the model as traindesk does (core.services.predict.load_predictor,
one compute thread per process) and answers in traindesk's format: the
class and every class's probability per row.
"""

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LITSERVE_BATCH, LITSERVE_TIMEOUT_S = 64, 0.005


def _predictor(path: str) -> Any:
    import torch

    from core.services.predict import load_predictor

    torch.set_num_threads(1)
    return load_predictor(Path(path), threads=1)


def _answers(predictor: Any, probs: Any) -> list[dict[str, Any]]:
    classes = predictor.classes
    return [{"class": classes[int(p.argmax())], "probabilities": dict(zip(classes, p.tolist()))} for p in probs]


# ----------------------------------------------------------------------------- LitServe


def _litserve_api() -> Any:
    import litserve as ls
    import numpy as np

    class Api(ls.LitAPI):  # type: ignore[misc]  # litserve ships no types: LitAPI is Any
        def setup(self, device: str) -> None:
            self.predictor = _predictor(os.environ["SERVE_MODEL"])
            self.shape = self.predictor.input_shape

        def decode_request(self, request):  # type: ignore[no-untyped-def]  # unannotated: LitServe reads the body
            return np.asarray(request["inputs"][0], dtype=np.float32).reshape(self.shape)

        def batch(self, inputs: list[Any]) -> Any:
            return np.stack(inputs)

        def predict(self, x: Any) -> Any:
            return self.predictor.probabilities(x)

        def unbatch(self, output: Any) -> list[Any]:
            return list(output)

        def encode_response(self, output: Any) -> dict[str, Any]:
            return {"predictions": _answers(self.predictor, [output])}

    Api.__qualname__ = Api.__name__ = "LitServeApi"  # pickled by the name it has at module level
    return Api


try:  # LitServe's worker processes are spawned: they import the API class by its module-level name
    LitServeApi = _litserve_api()
except ModuleNotFoundError:  # LitServe is in the bench extra only
    LitServeApi = None


def litserve_main(model: str, port: int, workers: int) -> None:
    import litserve as ls

    os.environ["SERVE_MODEL"] = model
    api = LitServeApi(max_batch_size=LITSERVE_BATCH, batch_timeout=LITSERVE_TIMEOUT_S)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=workers)
    server.run(host="127.0.0.1", port=port, generate_client_file=False, log_level="warning")


# ----------------------------------------------------------------------------- FastAPI, no batching


def _fastapi_app() -> Any:
    from fastapi import FastAPI
    from pydantic import BaseModel

    app = FastAPI()
    state: dict[str, Any] = {}

    class Body(BaseModel):
        inputs: list[list[float]]

    @app.post("/predict")
    async def predict(body: Body) -> dict[str, Any]:  # on the loop: faster here than a def on the thread pool
        import numpy as np

        predictor = state.get("p")
        if predictor is None:
            predictor = state["p"] = _predictor(os.environ["SERVE_MODEL"])
        x = np.asarray(body.inputs, dtype=np.float32).reshape((len(body.inputs), *predictor.input_shape))
        return {"predictions": _answers(predictor, predictor.probabilities(x))}

    return app


# ----------------------------------------------------------------------------- the HTTP stack's own ceiling


def _constant_app() -> Any:
    import orjson
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    classes = [str(c) for c in range(10)]
    answer = orjson.dumps({"predictions": [{"class": "0", "probabilities": {c: 0.1 for c in classes}}]})

    async def predict(request: Request) -> Response:
        orjson.loads(await request.body())
        return Response(answer, media_type="application/json")

    return Starlette(routes=[Route("/predict", predict, methods=["POST"])])


def __getattr__(name: str) -> Any:  # uvicorn imports the app by name: built on first use
    if name == "fastapi_app":
        return _fastapi_app()
    if name == "constant_app":
        return _constant_app()
    raise AttributeError(name)


if __name__ == "__main__":
    if sys.argv[1] == "litserve":
        litserve_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(f"unknown server {sys.argv[1]!r}")
