"""Serving a trained model over HTTP: ``serve(ServeOptions(...))``, with no command line of its own.

``core.services.serve.app`` is the HTTP app (its endpoints, metrics, auth, drain,
reload); ``core.services.serve.server`` the server's life (the socket, uvicorn, signals,
the ``--die-with`` lifeline); ``core.services.serve.batching`` the queue of requests and the
batching rule; ``core.services.serve.pool`` the inference processes it feeds, each
known by a handle (``core.services.serve.handles``); ``core.services.serve.worker`` what runs
in each of them; ``core.services.serve.schema`` the request and answer formats, from
the model's description (``core.services.serve.tables`` a table's raw rows,
``core.services.serve.openapi`` the description it gives). The command ``traindesk serve`` (core.cli.serve) and the
window's Serve tab are faces over ``serve``.
"""
