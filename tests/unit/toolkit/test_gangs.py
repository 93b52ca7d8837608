"""Gangs in the toolkit: ``simulate --add-gang`` and settling place members together or
not at all; ``explain`` of a member shows the gang's view. On the in-tree fixture, after
settling, 3 GPUs are free on schedulable nodes (1 on node-a, 2 on node-b)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from operators.api.annotations import GangTopology
from operators.toolkit.explain import explain
from operators.toolkit.simulate import AddGang, AddPods, simulate
from operators.toolkit.snapshot import Snapshot, build_snapshot
from operators.toolkit.sources import read_objects
from operators.toolkit.usererrors import SnapshotError, ToolkitError

from .conftest import INTREE, find, load_items

GANG = "resource.dralloc.dev/gang"
GANG_SIZE = "resource.dralloc.dev/gang-size"
GANG_TOPOLOGY = "resource.dralloc.dev/gang-topology"


@pytest.fixture
def snapshot() -> Snapshot:
    return build_snapshot(read_objects([INTREE]))


def test_a_gang_that_fits_is_placed_whole(snapshot: Snapshot) -> None:
    report = simulate(snapshot, [AddGang(3, "team-a", "one-gpu")])
    added = [p for p in report.placed if p.origin == "added"]
    assert report.fits and len(added) == 3
    assert sorted(p.node or "" for p in added) == ["node-a", "node-b", "node-b"]


def test_a_gang_too_big_places_nobody_where_pods_one_by_one_would_half_place(
    snapshot: Snapshot,
) -> None:
    one_by_one = simulate(snapshot, [AddPods(4, "team-a", template="one-gpu")])
    assert len([p for p in one_by_one.placed if p.origin == "added"]) == 3
    report = simulate(snapshot, [AddGang(4, "team-a", "one-gpu")])
    assert not report.fits
    assert not [p for p in report.placed if p.origin == "added"]
    pending = [p for p in report.pending if p.origin == "added"]
    assert len(pending) == 4
    assert all("at most 3 of the gang's 4 members fit at once" in p.reason for p in pending)


def test_a_gang_size_below_the_count_places_those_that_fit(snapshot: Snapshot) -> None:
    report = simulate(snapshot, [AddGang(4, "team-a", "one-gpu", size=3)])
    assert report.fits
    assert len([p for p in report.placed if p.origin == "added"]) == 3
    with pytest.raises(ToolkitError, match="gang size"):
        simulate(snapshot, [AddGang(2, "team-a", "one-gpu", size=3)])


def gang_pods(items: list[dict[str, Any]], count: int, size: str) -> list[dict[str, Any]]:
    base = find(items, "Pod", "west-pair")
    pods = []
    for i in range(count):
        pod = copy.deepcopy(base)
        pod["metadata"] |= {
            "name": f"w{i}",
            "uid": f"uid-w{i}",
            "annotations": {GANG: "train", GANG_SIZE: size},
        }
        pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "one-gpu"
        del pod["spec"]["nodeSelector"]
        pods.append(pod)
    return pods


def test_settling_and_explain_treat_pending_members_as_one_gang(
    write_snapshot: Callable[..., Path],
) -> None:
    items = load_items()
    # Settling places west-pair (2 of node-b's GPUs), leaving 3 GPUs for 4 members; explain
    # counts only allocated claims (5 GPUs free), which is still one short of 6.
    items += gang_pods(items, 4, "6") + gang_pods(items, 6, "6")[4:]
    snapshot = build_snapshot(read_objects([write_snapshot(items)]))
    report = simulate(snapshot, [])
    assert [p.pod for p in report.placed] == ["team-a/west-pair"]
    assert sorted(p.pod for p in report.pending) == [f"team-a/w{i}" for i in range(6)]
    result = explain(snapshot, "pod/w0", "team-a")
    assert 'gang "train": 6 of 6 members present' in result.gang
    assert "cannot be placed together" in result.gang


def test_malformed_gang_annotations_are_refused_by_name(
    write_snapshot: Callable[..., Path],
) -> None:
    items = load_items()
    items += gang_pods(items, 1, "many")
    with pytest.raises(SnapshotError, match="gang-size"):
        build_snapshot(read_objects([write_snapshot(items)]))


NUMA = "attribute:gpu.example.com/numa"


def numa_snapshot(write_snapshot: Callable[..., Path]) -> Snapshot:
    """The in-tree fixture with node-b's gpu-3 moved to NUMA node 0: after settling, the
    free GPUs are node-a/gpu-3 and node-b/gpu-2 (NUMA 1) and node-b/gpu-3 (NUMA 0)."""
    items = load_items()
    node_b = find(items, "ResourceSlice", "node-b-gpus")
    node_b["spec"]["devices"][3]["attributes"]["numa"] = {"int": 0}
    return build_snapshot(read_objects([write_snapshot(items)]))


def test_a_gang_topology_by_device_attribute_keeps_devices_on_one_value(
    write_snapshot: Callable[..., Path],
) -> None:
    snapshot = numa_snapshot(write_snapshot)
    plain = simulate(snapshot, [AddGang(3, "team-a", "one-gpu")])
    assert plain.fits
    three = simulate(snapshot, [AddGang(3, "team-a", "one-gpu", topology=GangTopology.parse(NUMA))])
    assert not three.fits
    pending = [p for p in three.pending if p.origin == "added"]
    assert len(pending) == 3
    assert all(
        p.reason.startswith(
            "no value of device attribute gpu.example.com/numa has room for 3 members together"
        )
        for p in pending
    )
    two = simulate(snapshot, [AddGang(2, "team-a", "one-gpu", topology=GangTopology.parse(NUMA))])
    added = [p for p in two.placed if p.origin == "added"]
    assert two.fits and len(added) == 2
    assert sorted(d.device for p in added for d in p.devices) == [
        "gpu.example.com/node-a/gpu-3",
        "gpu.example.com/node-b/gpu-2",
    ]


def test_settling_and_explain_keep_a_pending_gang_to_its_topology(
    write_snapshot: Callable[..., Path],
) -> None:
    # Three pending members kept to one NUMA node: settling (after west-pair took two of
    # node-b's NUMA 0 GPUs) finds two free GPUs per NUMA node at most. explain counts only
    # allocated claims: NUMA 0 has three free GPUs, all on node-b (without the topology the
    # gang's view would start on node-a, whose free GPU is on NUMA 1).
    items = load_items()
    find(items, "ResourceSlice", "node-b-gpus")["spec"]["devices"][3]["attributes"]["numa"] = {
        "int": 0
    }
    members = gang_pods(items, 3, "3")
    for member in members:
        member["metadata"]["annotations"][GANG_TOPOLOGY] = NUMA
    snapshot = build_snapshot(read_objects([write_snapshot(items + members)]))
    report = simulate(snapshot, [])
    pending = sorted(p.pod for p in report.pending)
    assert pending == ["team-a/w0", "team-a/w1", "team-a/w2"]
    assert "no value of device attribute gpu.example.com/numa" in report.pending[0].reason
    result = explain(snapshot, "pod/w0", "team-a")
    assert result.gang.endswith("placed together: 3 members, this pod on node node-b")


# Upstream's Workload API PodGroups (scheduling.k8s.io/v1beta1) in a snapshot.


def pod_group(name: str, min_count: int | None, namespace: str = "team-a") -> dict[str, Any]:
    policy: dict[str, Any] = (
        {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    )
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"schedulingPolicy": policy},
    }


def group_pods(items: list[dict[str, Any]], count: int, group: str) -> list[dict[str, Any]]:
    pods = gang_pods(items, count, "1")
    for pod in pods:
        del pod["metadata"]["annotations"]
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pods


def test_explain_of_a_pod_group_member_shows_the_gang_view(
    write_snapshot: Callable[..., Path],
) -> None:
    items = load_items()
    items += [*group_pods(items, 3, "train"), pod_group("train", 3)]
    snapshot = build_snapshot(read_objects([write_snapshot(items)]))
    assert "1 PodGroups" in snapshot.summary()
    result = explain(snapshot, "pod/w0", "team-a")
    assert result.gang.startswith('PodGroup "train": 3 of 3 members present')
    assert "placed together: 3 members" in result.gang


def test_settling_places_a_pod_group_gang_all_or_nothing(
    write_snapshot: Callable[..., Path],
) -> None:
    # 3 GPUs are free after west-pair: a PodGroup of 3 fits whole, one of 4 places nobody
    # (one by one, 3 of its pods would be placed).
    items = load_items()
    fits = build_snapshot(
        read_objects(
            [write_snapshot(items + group_pods(items, 3, "train") + [pod_group("train", 3)])]
        )
    )
    report = simulate(fits, [])
    assert sorted(p.pod for p in report.placed) == [
        "team-a/w0",
        "team-a/w1",
        "team-a/w2",
        "team-a/west-pair",
    ]
    too_big = build_snapshot(
        read_objects(
            [write_snapshot(items + group_pods(items, 4, "train") + [pod_group("train", 4)])]
        )
    )
    report = simulate(too_big, [])
    assert [p.pod for p in report.placed] == ["team-a/west-pair"]
    assert sorted(p.pod for p in report.pending) == [f"team-a/w{i}" for i in range(4)]
    assert all("at most 3 of the gang's 4 members fit at once" in p.reason for p in report.pending)
    basic = build_snapshot(
        read_objects(
            [write_snapshot(items + group_pods(items, 4, "train") + [pod_group("train", None)])]
        )
    )
    report = simulate(basic, [])  # a basic policy is no gang: pods placed one by one
    assert len(report.placed) == 4 and len(report.pending) == 1


def test_gang_annotations_win_over_the_pod_group(write_snapshot: Callable[..., Path]) -> None:
    items = load_items()
    pods = group_pods(items, 3, "train")
    for pod in pods:
        pod["metadata"]["annotations"] = {GANG: "other", GANG_SIZE: "2"}
    snapshot = build_snapshot(
        read_objects([write_snapshot(items + pods + [pod_group("train", 4)])])
    )
    gang, problem = snapshot.gang_of(snapshot.pods["team-a/w0"])
    assert gang is not None and (gang.name, gang.size) == ("other", 2) and not problem
    assert not gang.pod_group
    result = explain(snapshot, "pod/w0", "team-a")
    assert result.gang.startswith('gang "other"')


def test_a_missing_pod_group_leaves_its_pods_pending_with_the_reason(
    write_snapshot: Callable[..., Path],
) -> None:
    items = load_items()
    snapshot = build_snapshot(read_objects([write_snapshot(items + group_pods(items, 2, "train"))]))
    reason = 'waiting for its PodGroup "train" (scheduling.k8s.io), which does not exist'
    report = simulate(snapshot, [])
    assert sorted(p.pod for p in report.pending) == ["team-a/w0", "team-a/w1"]
    assert all(reason in p.reason for p in report.pending)
    result = explain(snapshot, "pod/w0", "team-a")
    assert result.status == "pending" and reason in result.summary


def test_a_pod_group_policy_dralloc_cannot_follow_is_the_reason(
    write_snapshot: Callable[..., Path],
) -> None:
    items = load_items()
    bad = pod_group("train", 0)
    snapshot = build_snapshot(
        read_objects([write_snapshot(items + group_pods(items, 2, "train") + [bad])])
    )
    report = simulate(snapshot, [])
    assert all("gang.minCount 0 is not a whole number" in p.reason for p in report.pending)
    assert len(report.pending) == 2


def test_a_gang_larger_than_the_operators_limit_is_refused_as_the_operator_does(
    write_snapshot: Callable[..., Path],
) -> None:
    # Two members of a gang of 2 that fits: placed under the default limit, refused with the
    # operator's own words (naming the setting) under a limit of 1.
    items = load_items()
    items += gang_pods(items, 2, "2")
    snapshot = build_snapshot(read_objects([write_snapshot(items)]))
    members = [f"team-a/w{i}" for i in range(2)]
    assert set(members) <= {p.pod for p in simulate(snapshot, []).placed}
    limited = simulate(snapshot, [], max_gang_size=1)
    refused = [p for p in limited.pending if p.pod in members]
    assert len(refused) == 2 and not {p.pod for p in limited.placed} & set(members)
    words = 'gang "train" needs 2 members placed together, more than the 1 this operator places'
    assert all(p.reason.startswith(words) and "max_gang_size" in p.reason for p in refused)
    assert "max_gang_size" not in explain(snapshot, "pod/w0", "team-a").summary
    result = explain(snapshot, "pod/w0", "team-a", max_gang_size=1)
    assert result.summary.startswith(words), result.summary
    assert not result.devices
    with pytest.raises(ToolkitError, match="max_gang_size"):
        simulate(snapshot, [AddGang(2, "team-a", "one-gpu")], max_gang_size=1)
