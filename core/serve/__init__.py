"""Serving a trained model over HTTP: ``serve(ServeOptions(...))``, with no command line of its own.

``core.serve.app`` is the HTTP app and the server's life (uvicorn, drain,
reload, metrics); ``core.serve.batching`` the queue of requests and the
batching rule; ``core.serve.pool`` the inference processes it feeds, each
known by a handle (``core.serve.handles``); ``core.serve.worker`` what runs
in each of them; ``core.serve.schema`` the request and answer formats, from
the model's description. The command ``traindesk serve`` (core.cli.serve) and the
window's Serve tab are faces over ``serve``.
"""
