"""Serving a trained model over HTTP: ``serve(ServeOptions(...))``, with no command line of its own.

``core.serve.app`` is the HTTP app (its endpoints, metrics, auth, drain,
reload); ``core.serve.server`` the server's life (the socket, uvicorn, signals,
the ``--die-with`` lifeline); ``core.serve.batching`` the queue of requests and the
batching rule; ``core.serve.pool`` the inference processes it feeds, each
known by a handle (``core.serve.handles``); ``core.serve.worker`` what runs
in each of them; ``core.serve.schema`` the request and answer formats, from
the model's description (``core.serve.tables`` a table's raw rows,
``core.serve.openapi`` the description it gives). The command ``traindesk serve`` (core.cli.serve) and the
window's Serve tab are faces over ``serve``.
"""
