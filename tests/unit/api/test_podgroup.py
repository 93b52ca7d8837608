"""Upstream's Workload API PodGroup (scheduling.k8s.io/v1beta1), as far as gangs need it."""

from __future__ import annotations

from typing import Any

import pytest

from operators.api import podgroup
from operators.api.annotations import GANG_SIZE_MAX, GangRef, GangTopology


def raw_group(spec: dict[str, Any], name: str = "workers") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns", "uid": "u", "resourceVersion": "7"},
        "spec": spec,
        "status": {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "False"}]},
    }


def test_the_api_is_upstreams_v1beta1() -> None:
    assert (podgroup.GROUP, podgroup.VERSION) == ("scheduling.k8s.io", "v1beta1")


def test_a_gang_policy_names_a_gang_of_min_count_members() -> None:
    group = podgroup.parse_pod_group(raw_group({"schedulingPolicy": {"gang": {"minCount": 3}}}))
    assert (group.namespace, group.name, group.min_count, group.problem) == ("ns", "workers", 3, "")
    gang = group.gang()
    assert gang is not None
    assert (gang.name, gang.size, gang.topology, gang.pod_group) == ("workers", 3, None, True)
    assert gang.label == 'PodGroup "workers"'


def test_a_basic_policy_is_no_gang() -> None:
    group = podgroup.parse_pod_group(raw_group({"schedulingPolicy": {"basic": {}}}))
    assert group.min_count is None and group.gang() is None and group.problem == ""


def test_the_topology_constraint_is_the_gangs_topology() -> None:
    spec = {
        "schedulingPolicy": {"gang": {"minCount": 2}},
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
    }
    gang = podgroup.parse_pod_group(raw_group(spec)).gang()
    assert gang is not None and gang.topology == GangTopology("topology.kubernetes.io/rack")


def test_the_view_ignores_status_and_versions() -> None:
    """Only what makes the gang counts: a status update changes nothing (no wake-ups)."""
    first = raw_group({"schedulingPolicy": {"gang": {"minCount": 3}}})
    second = raw_group({"schedulingPolicy": {"gang": {"minCount": 3}}})
    second["metadata"]["resourceVersion"] = "8"
    second["status"] = {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True"}]}
    assert podgroup.parse_pod_group(first) == podgroup.parse_pod_group(second)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"schedulingPolicy": {"gang": {}}}, "minCount"),
        ({"schedulingPolicy": {"gang": {"minCount": 0}}}, "minCount"),
        ({"schedulingPolicy": {"gang": {"minCount": "3"}}}, "minCount"),
        ({"schedulingPolicy": {"gang": {"minCount": True}}}, "minCount"),
        ({"schedulingPolicy": {"gang": {"minCount": GANG_SIZE_MAX + 1}}}, str(GANG_SIZE_MAX)),
        (
            {
                "schedulingPolicy": {"gang": {"minCount": 2}},
                "schedulingConstraints": {"topology": [{"key": "not a label"}]},
            },
            "topology",
        ),
    ],
)
def test_a_gang_policy_dralloc_cannot_follow_is_a_problem_not_an_error(
    spec: dict[str, Any], problem: str
) -> None:
    group = podgroup.parse_pod_group(raw_group(spec))
    assert problem in group.problem and group.problem.startswith('PodGroup "workers": ')
    assert group.gang() is None


def test_pod_group_of_a_pod() -> None:
    assert podgroup.pod_group_name({"schedulingGroup": {"podGroupName": "workers"}}) == "workers"
    assert podgroup.pod_group_name({"schedulingGroup": {}}) == ""
    assert podgroup.pod_group_name({}) == ""


def test_resolve_gang_annotations_first_then_the_pod_group() -> None:
    gang_policy = podgroup.parse_pod_group(
        raw_group({"schedulingPolicy": {"gang": {"minCount": 2}}})
    )
    basic = podgroup.parse_pod_group(raw_group({"schedulingPolicy": {"basic": {}}}))
    bad = podgroup.parse_pod_group(raw_group({"schedulingPolicy": {"gang": {"minCount": 0}}}))
    annotated = GangRef("other", 4)
    resolve = podgroup.resolve_gang
    assert resolve(annotated, "", "ns", "workers", gang_policy) == (annotated, "")
    assert resolve(None, "bad size", "ns", "workers", gang_policy) == (None, "bad size")
    assert resolve(None, "", "ns", "", None) == (None, "")
    assert resolve(None, "", "ns", "workers", gang_policy) == (gang_policy.gang(), "")
    assert resolve(None, "", "ns", "workers", basic) == (None, "")
    assert resolve(None, "", "ns", "workers", bad) == (None, bad.problem)
    assert resolve(None, "", "ns", "workers", None) == (
        None,
        'waiting for its PodGroup "workers" (scheduling.k8s.io), which does not exist in '
        'namespace "ns"',
    )
