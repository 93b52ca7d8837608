"""Prometheus metrics, named as upstream's controllers name them where one exists.

Upstream names (reference §4.4, §5.4) let existing dashboards work unchanged; dralloc's own
figures are prefixed ``dralloc_``.
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

CLAIM_CREATES = Counter(
    "dynamic_resource_allocation_resourceclaim_creates_total",
    "ResourceClaims created from templates, by outcome.",
    ["status", "admin_access"],
)
EVICTION_DELETIONS = Counter(
    "device_taint_eviction_controller_pod_deletions_total",
    "Pods deleted by the device taint eviction controller.",
)
EVICTION_LATENCY = Histogram(
    "device_taint_eviction_controller_pod_deletion_duration_seconds",
    "Seconds from a taint becoming effective to the pod deletion call.",
    buckets=(0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 120, 180, 240),
)
ALLOCATIONS = Counter(
    "dralloc_pod_allocations_total",
    "Pod allocation attempts by the allocator loop, by result.",
    ["result"],
)
ALLOCATION_SECONDS = Histogram(
    "dralloc_pod_allocation_duration_seconds",
    "Seconds spent choosing node and devices for one pod (without API writes).",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
)
CACHE_SYNC_SECONDS = Gauge(
    "dralloc_cache_sync_seconds", "Seconds from start until every informer had listed."
)
LEADER = Gauge("dralloc_leader", "1 while this replica holds the leader Lease.")

ClaimLabels = tuple[str, str, str]  # allocated, admin_access, source


class ClaimsGauge(Collector):
    """``dynamic_resource_allocation_resource_claims``, counted on scrape from the cache."""

    def __init__(self, source: Callable[[], Iterable[ClaimLabels]]) -> None:
        self.source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "dynamic_resource_allocation_resource_claims",
            "Number of ResourceClaims, by allocation, admin access and origin.",
            labels=["allocated", "admin_access", "source"],
        )
        counts: dict[ClaimLabels, int] = {}
        for labels in self.source():
            counts[labels] = counts.get(labels, 0) + 1
        for labels, count in sorted(counts.items()):
            family.add_metric(list(labels), count)
        yield family


_claims_gauge: ClaimsGauge | None = None


def register_claims_gauge(source: Callable[[], Iterable[ClaimLabels]]) -> None:
    global _claims_gauge
    if _claims_gauge is None:
        _claims_gauge = ClaimsGauge(source)
        REGISTRY.register(_claims_gauge)
    else:
        _claims_gauge.source = source


LEADERSHIP_LOSSES = Counter(
    "dralloc_leadership_losses",
    "Times this replica lost the Lease (or the API server long enough to lose it) and stood by.",
)

FENCED = Counter(
    "dralloc_fenced",
    "Times this replica stopped allocating because another allocator's records appeared.",
)

DOUBLE_ALLOCATIONS = Counter(
    "dralloc_double_allocations",
    "Devices found allocated to two claims at once (another allocator, or a forged write), "
    "by what was done: deallocated, evicted, or reported (bare pods are not deleted).",
    ["outcome"],
)

_acting = threading.Event()


def set_acting(acting: bool) -> None:
    """Whether this replica's controllers run (it holds the Lease): ``/readyz`` and
    ``dralloc_leader`` say so."""
    LEADER.set(1 if acting else 0)
    if acting:
        _acting.set()
    else:
        _acting.clear()


def _readiness(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    if _acting.is_set():
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"acting\n"]
    start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
    return [b"standing by: this replica does not hold the Lease\n"]


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds are no news."""


def serve(port: int, addr: str = "0.0.0.0") -> None:
    """``/metrics`` for Prometheus and ``/readyz`` (200 while acting, 503 standing by)."""
    if not port:
        return
    metrics_app = make_wsgi_app()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/readyz":
            return _readiness(environ, start_response)
        return metrics_app(environ, start_response)  # type: ignore[no-any-return]

    server = make_server(addr, port, app, server_class=_Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
