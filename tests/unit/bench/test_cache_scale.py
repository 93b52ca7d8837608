"""The cache-scale benchmark on a small cluster: every object listed in pages through the
operator's client and informers ends up in the cache (no figure is asserted)."""

from __future__ import annotations

import io

import pytest

from bench import cache_scale, report
from operators.api.common import KUBERNETES_GROUP
from operators.api.models import GROUP
from operators.api.podprotocol import protocol_for
from operators.kube import PODS, RESOURCE_CLAIMS


@pytest.mark.parametrize("group", [GROUP, KUBERNETES_GROUP])
def test_every_listed_object_is_held_once_synced(group: str) -> None:
    size = cache_scale.Size(nodes=60, devices_per_node=2, pods=1200, namespaces=3, api_group=group)
    result = cache_scale.measure(size)
    assert result.objects["pods"] == 1200  # three pages of 500
    assert result.objects["resourceclaims"] == 120
    assert result.objects["nodes"] == result.objects["resourceslices"] == 60
    assert result.objects["namespaces"] == 6
    assert result.rss_mib >= result.rss_before_mib > 0
    assert result.peak_rss_mib >= result.rss_mib
    assert f"pods={size.pods}" in result.render()
    assert result.to_json()["claimPods"] == 120


def test_the_cluster_holds_no_device_twice_and_names_every_pod_once() -> None:
    size = cache_scale.Size(nodes=7, devices_per_node=3, pods=200, namespaces=4)
    kinds = cache_scale.kinds(size, protocol_for(size.api_group))
    count, pod = kinds[PODS]
    names = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in map(pod, range(count))}
    assert len(names) == count == 200
    count, claim = kinds[RESOURCE_CLAIMS]
    devices = [
        tuple(r[f] for f in ("pool", "device"))
        for c in map(claim, range(count))
        for r in c["status"]["allocation"]["devices"]["results"]
    ]
    assert len(devices) == len(set(devices)) == size.claim_pods == 20


def test_more_claim_pods_than_devices_is_refused() -> None:
    with pytest.raises(ValueError, match="more claim pods than devices"):
        cache_scale.kinds(
            cache_scale.Size(nodes=1, devices_per_node=1, pods=20), protocol_for(GROUP)
        )


def test_the_report_has_a_row_per_mode_and_says_why_one_failed() -> None:
    size = cache_scale.Size(nodes=60, devices_per_node=2, pods=600, namespaces=2)
    measured = cache_scale.measure(size).to_json()
    text = report.markdown({"cacheScale": [measured, {"apiGroup": "x", "error": "killed"}]})
    assert f"| {GROUP} | 60 | 600 (60) |" in text
    assert "| x | failed: killed |" in text


def test_a_run_in_a_process_of_its_own_gives_its_figures() -> None:
    size = cache_scale.Size(nodes=20, devices_per_node=1, pods=100, namespaces=1)
    figures = cache_scale.run(size, log=io.StringIO())
    assert figures["objects"]["pods"] == 100 and figures["claimPods"] == 10
    assert figures["rssMiB"] > figures["rssBeforeMiB"] > 0
