"""Prometheus metrics, named as upstream's controllers name them where one exists.

Upstream names (docs/design.md "Upstream references") let existing dashboards work unchanged; dralloc's own
figures are prefixed ``dralloc_``.
"""

from __future__ import annotations

import datetime
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
EVENTS_NOT_RECORDED = Counter(
    "dralloc_events_not_recorded_total",
    "Kubernetes Events given up on: refused, or the API server away for all their tries.",
)
PREEMPTIONS = Counter(
    "dralloc_preemptions_total",
    "Preemptions made for a pod's devices (each removes one or more lower-priority pods).",
)
PREEMPTION_VICTIMS = Counter(
    "dralloc_preemption_victims_total",
    "Pods removed by preemption for another pod's devices.",
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
GATED_SECONDS = Histogram(
    "dralloc_pod_gated_duration_seconds",
    "Seconds from a gated pod's creation to dralloc's allocation write that lets it go.",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
API_REQUESTS = Counter(
    "dralloc_api_requests",
    "Requests to the API server other than watches, by HTTP method and status code "
    "(`error`: no answer, e.g. a timeout or a refused connection).",
    ["method", "code"],
)

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


QuotaFigure = tuple[str, str, str, float, float]  # namespace, quota, resource, used, hard


class QuotaGauge(Collector):
    """``dralloc_device_quota_used`` and ``dralloc_device_quota_hard``: per DeviceQuota and
    limited resource (devices, claims, or a capacity name; capacity in its base unit)."""

    def __init__(self) -> None:
        self.figures: list[QuotaFigure] = []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["namespace", "quota", "resource"]
        used = GaugeMetricFamily(
            "dralloc_device_quota_used",
            "Usage the allocator counts against a DeviceQuota.",
            labels=labels,
        )
        hard = GaugeMetricFamily(
            "dralloc_device_quota_hard", "The limit of a DeviceQuota.", labels=labels
        )
        for namespace, quota, resource, amount, limit in self.figures:
            used.add_metric([namespace, quota, resource], amount)
            hard.add_metric([namespace, quota, resource], limit)
        yield used
        yield hard


_quota_gauge = QuotaGauge()
REGISTRY.register(_quota_gauge)


def set_quota_usage(figures: Iterable[QuotaFigure]) -> None:
    _quota_gauge.figures = sorted(figures)


class GatedPodsGauge(Collector):
    """``dralloc_gated_pods`` and ``dralloc_gated_pod_oldest_seconds``, on scrape from the
    cache: the pods that carry dralloc's gate now, and how long the oldest of them has
    (since its creation, when the webhook added the gate)."""

    def __init__(self, source: Callable[[], Iterable[str]]) -> None:
        self.source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = datetime.datetime.now(datetime.UTC)
        count, oldest = 0, 0.0
        for created in self.source():
            count += 1
            since = age_seconds(created, now)
            if since is not None:
                oldest = max(oldest, since)
        yield GaugeMetricFamily(
            "dralloc_gated_pods", "Pods that carry dralloc's scheduling gate.", value=count
        )
        yield GaugeMetricFamily(
            "dralloc_gated_pod_oldest_seconds",
            "Seconds since the oldest pod that still carries dralloc's gate was created "
            "(0 without one).",
            value=oldest,
        )


class QueueDepthGauge(Collector):
    """``dralloc_workqueue_depth{controller}``: each controller's keys waiting now or later
    (backoff), or being processed."""

    def __init__(self) -> None:
        self.sources: dict[str, Callable[[], int]] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "dralloc_workqueue_depth",
            "Keys a controller's work queue holds: ready, delayed (backoff) or in process.",
            labels=["controller"],
        )
        for name, pending in sorted(self.sources.items()):
            family.add_metric([name], pending())
        yield family


_gated_gauge: GatedPodsGauge | None = None
_queue_gauge = QueueDepthGauge()
REGISTRY.register(_queue_gauge)


def age_seconds(timestamp: str, now: datetime.datetime | None = None) -> float | None:
    """Seconds since an RFC 3339 timestamp of the API server (None if it is not one)."""
    try:
        then = datetime.datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=datetime.UTC)
    return max(0.0, ((now or datetime.datetime.now(datetime.UTC)) - then).total_seconds())


def register_gated_gauge(source: Callable[[], Iterable[str]]) -> None:
    global _gated_gauge
    if _gated_gauge is None:
        _gated_gauge = GatedPodsGauge(source)
        REGISTRY.register(_gated_gauge)
    else:
        _gated_gauge.source = source


def register_queue(controller: str, pending: Callable[[], int]) -> None:
    """Report a controller's queue depth from now on (a later one of that name replaces it)."""
    _queue_gauge.sources[controller] = pending


LEADERSHIP_LOSSES = Counter(
    "dralloc_leadership_losses",
    "Times this replica lost the Lease (or the API server long enough to lose it) and stood by.",
)

FENCED = Counter(
    "dralloc_fenced",
    "Times this replica stopped allocating because another allocator's records appeared, or "
    "the API server's fencing policy refused it (another replica holds the Lease).",
)

DEVICES_HELD_TWICE = Gauge(
    "dralloc_devices_held_twice",
    "Devices allocated to two claims at once now, as the leader's double-allocation "
    "checker sees them (0 on a replica that does not lead).",
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
