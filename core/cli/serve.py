"""``traindesk serve RUN_DIR|MODEL_FILE``: the command line over core.services.serve."""

from __future__ import annotations

import argparse
import sys

from core.errors import UserError


def configure_cli(p: argparse.ArgumentParser) -> None:
    """serve a trained model over HTTP with batching worker processes"""
    p.add_argument(
        "model",
        metavar="RUN_DIR|MODEL_FILE",
        help="a run directory (its best.pt, else last.pt) or an exported model / checkpoint file",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (0: a free one; default 8000)")
    p.add_argument("--workers", type=int, default=2, help="inference processes, one compute thread each (default 2)")
    p.add_argument("--max-batch", type=int, default=64, help="rows per batch at most (default 64)")
    p.add_argument(
        "--max-wait-ms",
        type=float,
        default=0.0,
        help="how long a batch may wait for more rows while another one computes (default 0: a "
        "free worker takes what is queued at once; rows gather while the workers are busy)",
    )
    p.add_argument("--queue", type=int, default=1024, help="rows waiting at most; more get 429 (default 1024)")
    p.add_argument(
        "--timeout-s",
        type=float,
        default=10.0,
        help="a request's deadline in seconds (504 after it); X-Request-Timeout may shorten it",
    )
    p.add_argument(
        "--token",
        default=None,
        help="require 'Authorization: Bearer TOKEN' on every endpoint but /health (also TRAINDESK_SERVE_TOKEN)",
    )
    p.add_argument("--watch", action="store_true", help="reload the run's best.pt whenever it changes")
    p.add_argument(
        "--on",
        choices=("local", "ray"),
        default="local",
        help="where the model processes run: this machine (default), or a Ray cluster as a Ray Serve "
        "application (--workers replicas; needs traindesk[ray])",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="the Ray cluster to deploy on (default: RAY_ADDRESS, else a Ray of this machine's own)",
    )
    p.add_argument(
        "--min-workers", type=int, default=None, help="--on ray: autoscale the replicas from this many (default: fixed)"
    )
    p.add_argument(
        "--max-workers",
        type=int,
        default=None,
        help="--on ray: autoscale the replicas up to this many (default: fixed)",
    )
    p.add_argument(
        "--die-with",
        type=int,
        default=None,
        metavar="PID",
        help="drain and stop when process PID ends, a crash included (the window passes its own)",
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from core.services.serve.app import ServeConfigError, ServeOptions, StartError
    from core.services.serve.server import serve

    options = ServeOptions(
        args.model,
        host=args.host,
        port=args.port,
        workers=args.workers,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        queue=args.queue,
        timeout_s=args.timeout_s,
        token=args.token,
        watch=args.watch,
        die_with=args.die_with,
    )

    def ready(url: str) -> None:
        sys.stderr.write(
            f"serving {args.model} with {args.workers} model {'replica(s) on Ray' if args.on == 'ray' else 'process(es)'}; "
            "POST /predict, GET /docs, Ctrl-C to stop\n"
        )
        print(url, flush=True)

    try:
        if args.on == "ray":
            from core.services.ray_cluster import require_ray

            require_ray("serve")
            from core.services.serve.on_ray import RayOptions
            from core.services.serve.ray_deploy import serve_on_ray

            ray_options = RayOptions(args.ray_address, args.min_workers, args.max_workers)
            serve_on_ray(options, ray_options, on_ready=ready)
            return 0
        if args.ray_address or args.min_workers is not None or args.max_workers is not None:
            raise UserError("serve: --ray-address, --min-workers and --max-workers go with --on ray")
        serve(options, on_ready=ready)
    except (ServeConfigError, StartError) as exc:
        raise UserError(str(exc) if str(exc).startswith("serve:") else f"serve: {exc}") from None
    return 0
