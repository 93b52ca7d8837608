"""The memory benchmark on a tiny cluster (no figure is asserted, only that every kind the
operator holds is measured and that the pods were allocated by the controller itself)."""

from __future__ import annotations

import pytest

from bench import memory
from operators.api.common import KUBERNETES_GROUP
from operators.api.models import GROUP

HELD = ("setup", "nodes", "slices", "claims", "pods", "allocator state", "controllers")


@pytest.mark.parametrize("group", [GROUP, KUBERNETES_GROUP])
def test_every_kind_holds_something(group: str) -> None:
    size = memory.Size(nodes=2, devices_per_node=2, pods=3, api_group=group)
    report = memory.measure(size, top=5)
    for kind in HELD:
        assert report.by_kind.get(kind, 0) > 0, kind
    assert report.total >= sum(report.by_kind[kind] for kind in HELD)
    assert report.allocated_pods == 3
    assert len(report.top) == 5
    text = report.render()
    assert "allocator state" in text and "total" in text


def test_pods_beyond_the_devices_stay_unallocated() -> None:
    report = memory.measure(memory.Size(nodes=1, devices_per_node=2, pods=3))
    assert report.allocated_pods == 2
    assert report.objects["pods"] == 3


def test_the_untraced_run_reports_the_resident_set() -> None:
    text = memory.measure_rss(memory.Size(nodes=1, devices_per_node=1, pods=1))
    assert "allocated 1" in text and "RSS" in text
