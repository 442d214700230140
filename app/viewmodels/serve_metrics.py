"""What the Serve tab reads from a server's ``/metrics`` (Prometheus text), and the figures it draws from it."""

from __future__ import annotations

import math
from typing import Any


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The q-quantile of a Prometheus histogram's cumulative (upper bound, count) buckets, interpolated
    linearly within a bucket, as PromQL's histogram_quantile does; None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            inside = count - prev_count
            frac = (rank - prev_count) / inside if inside > 0 else 1.0
            return prev_bound + (bound - prev_bound) * frac
        prev_bound, prev_count = bound, count
    return prev_bound


def parse_metrics(text: str) -> dict[str, Any]:
    """What the tab shows from /metrics: counters and histograms (cumulative buckets) by name."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {
        "ok": 0.0,
        "latency": [],
        "batch": [],
        "batches": 0.0,
        "restarts": 0.0,
        "queue": 0.0,
        "version": "",
    }
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "traindesk_serve_requests_total" and s.labels.get("endpoint") == "predict":
                if s.labels.get("status") == "200":
                    out["ok"] += s.value
            elif s.name == "traindesk_serve_latency_seconds_bucket":
                out["latency"].append((float(s.labels["le"]), s.value))
            elif s.name == "traindesk_serve_batch_rows_bucket":
                out["batch"].append((float(s.labels["le"]), s.value))
            elif s.name == "traindesk_serve_batch_rows_count":
                out["batches"] = s.value
            elif s.name == "traindesk_serve_worker_restarts_total":
                out["restarts"] = s.value
            elif s.name == "traindesk_serve_queue_rows":
                out["queue"] = s.value
            elif s.name == "traindesk_serve_model_info":
                out["version"] = s.labels.get("version", "")
    out["latency"].sort()
    out["batch"].sort()
    return out


def worker_state(state: str, batches_per_s: float, busy_share: float | None = None) -> str:
    """A worker's state as the table shows it: ``/ready`` says idle or busy at the instant it was read, which at
    hundreds of requests a second is mostly idle; a ready worker's share of the last interval spent computing
    (from its ``busy_s``) says how busy it is ("busy 45%"), else, while the server formed batches in the last
    second, it is serving."""
    if state not in ("idle", "busy"):
        return state
    if busy_share is not None and busy_share > 0.005:
        return f"busy {min(100.0, 100.0 * busy_share):.0f}%"
    return "serving" if batches_per_s > 0 else state
