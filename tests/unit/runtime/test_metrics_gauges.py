"""The scrape-time gauges of operators.metrics: gated pods and work-queue depth."""

from __future__ import annotations

import datetime

from prometheus_client.registry import Collector

from operators import metrics


def _samples(collector: Collector) -> dict[tuple[str, tuple[str, ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.values()))): sample.value
        for family in collector.collect()
        for sample in family.samples
    }


def test_gated_pods_count_and_oldest_age() -> None:
    now = datetime.datetime.now(datetime.UTC)
    ten_minutes_ago = (now - datetime.timedelta(minutes=10)).isoformat()
    a_minute_ago = (now - datetime.timedelta(minutes=1)).isoformat()
    gauge = metrics.GatedPodsGauge(lambda: [a_minute_ago, ten_minutes_ago, ""])
    samples = _samples(gauge)
    assert samples[("dralloc_gated_pods", ())] == 3
    assert 599 <= samples[("dralloc_gated_pod_oldest_seconds", ())] < 700


def test_no_gated_pods_reads_zero() -> None:
    samples = _samples(metrics.GatedPodsGauge(list))
    assert samples == {("dralloc_gated_pods", ()): 0, ("dralloc_gated_pod_oldest_seconds", ()): 0}


def test_age_of_api_server_timestamps() -> None:
    now = datetime.datetime(2026, 1, 1, 0, 1, tzinfo=datetime.UTC)
    assert metrics.age_seconds("2026-01-01T00:00:00Z", now) == 60
    assert metrics.age_seconds("2026-01-01T00:02:00Z", now) == 0  # clock skew: not negative
    assert metrics.age_seconds("", now) is None


def test_queue_depth_per_controller() -> None:
    gauge = metrics.QueueDepthGauge()
    gauge.sources["allocation"] = lambda: 4
    gauge.sources["claims"] = lambda: 0
    assert _samples(gauge) == {
        ("dralloc_workqueue_depth", ("allocation",)): 4,
        ("dralloc_workqueue_depth", ("claims",)): 0,
    }
