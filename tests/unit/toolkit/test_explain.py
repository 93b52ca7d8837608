from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from operators.toolkit.explain import explain, parse_subject
from operators.toolkit.snapshot import build_snapshot
from operators.toolkit.sources import read_objects
from operators.toolkit.usererrors import ToolkitError

from .conftest import INTREE, find, load_items


def test_pending_pod_gets_one_verdict_per_node() -> None:
    snapshot = build_snapshot(read_objects([INTREE]))
    result = explain(snapshot, "pod/west-pair", "team-a")
    assert result.status == "pending"
    verdicts = {v.node: v for v in result.nodes}
    assert set(verdicts) == {"node-a", "node-b", "node-c"}
    assert verdicts["node-b"].fits
    assert not verdicts["node-a"].fits
    assert verdicts["node-a"].reasons == ("node(s) didn't match Pod's node affinity/selector",)
    assert "can take the claims now" in result.summary


def test_unplaceable_pod_says_why_on_every_node(write_snapshot: Callable[..., Path]) -> None:
    items = load_items()
    template = find(items, "ResourceClaimTemplate", "numa-pair")
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    snapshot = build_snapshot(read_objects([write_snapshot(items)]))
    result = explain(snapshot, "pod/west-pair", "team-a")
    assert result.status == "pending"
    assert not any(v.fits for v in result.nodes)
    affinity = ("node(s) didn't match Pod's node affinity/selector",)
    together = (
        "devices fit one by one but not together (constraints, or requests competing for them)",
    )
    assert {v.node: v.reasons for v in result.nodes} == {
        "node-a": affinity,
        "node-b": together,  # from the allocator
        "node-c": affinity,
    }
    assert result.summary == (f"0/3 nodes are available: 2 {affinity[0]}, 1 {together[0]}.")


def test_allocated_claim_and_its_pod() -> None:
    snapshot = build_snapshot(read_objects([INTREE]))
    claim = explain(snapshot, "resourceclaim/trainer-gpus", "team-a")
    assert claim.status == "allocated"
    assert "team-a/trainer" in claim.summary
    assert [d.device for d in claim.devices] == [
        f"gpu.example.com/node-a/gpu-{i}" for i in range(3)
    ]
    pod = explain(snapshot, "pod/trainer", "team-a")
    assert pod.status == "allocated" and pod.node == "node-a"


def test_subject_errors() -> None:
    snapshot = build_snapshot(read_objects([INTREE]))
    with pytest.raises(ToolkitError, match="Pod team-a/ghost is not in the snapshot"):
        explain(snapshot, "pod/ghost", "team-a")
    with pytest.raises(ToolkitError, match="pod/NAME or resourceclaim/NAME"):
        parse_subject("deployment/x")
    with pytest.raises(ToolkitError, match="expected pod/NAME"):
        parse_subject("west-pair")


def test_a_pod_with_an_empty_claims_list_is_explained_as_asking_for_nothing() -> None:
    from operators.toolkit.sources import RawObject
    from operators.toolkit.usererrors import ObjectRef

    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team", "annotations": {
            "resource.dralloc.dev/claims": "[]"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }  # fmt: skip
    snapshot = build_snapshot([RawObject(ObjectRef("test", 1), body)])
    with pytest.raises(
        ToolkitError, match=r"asks for no claims .* is an empty list\): it is not gated"
    ):
        explain(snapshot, "pod/p", "team")


def test_node_resources_and_running_pods_count(write_snapshot: Callable[..., Path]) -> None:
    """explain and simulate use the scheduler's filters: a pod that needs cpu 4 is not
    placed on a node with cpu 2, nor beside a running pod that holds the cpu."""
    items = load_items()
    for name, cpu in (("node-a", "8"), ("node-b", "2"), ("node-c", "8")):
        find(items, "Node", name)["status"] = {"allocatable": {"cpu": cpu, "pods": "110"}}
    west = find(items, "Pod", "west-pair")
    del west["spec"]["nodeSelector"]
    west["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "4"}}
    trainer = find(items, "Pod", "trainer")
    trainer["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "6"}}
    snapshot = build_snapshot(read_objects([write_snapshot(items)]))
    result = explain(snapshot, "pod/west-pair", "team-a")
    verdicts = {v.node: v for v in result.nodes}
    assert verdicts["node-b"].reasons == ("Insufficient cpu",)
    assert verdicts["node-a"].reasons == ("Insufficient cpu",)  # the trainer holds 6 of 8
    assert result.status == "pending"
    assert "2 Insufficient cpu" in result.summary, result.summary


def test_a_quota_in_the_snapshot_is_named_where_it_refuses(
    write_snapshot: Callable[..., Path],
) -> None:
    quota = {
        "apiVersion": "resource.dralloc.dev/v1",
        "kind": "DeviceQuota",
        "metadata": {"name": "gpus", "namespace": "team-a"},
        "spec": {"deviceClassName": "gpu", "hard": {"devices": 3}},
    }
    snapshot = build_snapshot(read_objects([write_snapshot([*load_items(), quota])]))
    assert "1 DeviceQuotas" in snapshot.summary()
    result = explain(snapshot, "pod/west-pair", "team-a")
    verdicts = {v.node: v for v in result.nodes}
    assert not verdicts["node-b"].fits
    assert verdicts["node-b"].reasons[0] == (
        "DeviceQuota team-a/gpus: devices 3 of 3 used, claim needs 1"
    )


@pytest.mark.parametrize(
    ("group", "reason"),
    [
        ("resource.k8s.io", "created past dralloc's webhook"),
        ("resource.dralloc.dev", "in in-tree mode only"),
    ],
)
def test_a_pod_asking_for_a_dra_extended_resource_without_a_claim_is_explained(
    group: str, reason: str
) -> None:
    from operators.toolkit.sources import RawObject
    from operators.toolkit.usererrors import ObjectRef

    device_class = {
        "apiVersion": f"{group}/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
        "spec": {"extendedResourceName": "example.com/gpu"},
    }  # fmt: skip
    limits = {"example.com/gpu": "1"}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {"containers": [{"name": "c", "image": "i",
                                 "resources": {"requests": limits, "limits": limits}}]},
    }  # fmt: skip
    snapshot = build_snapshot(
        [RawObject(ObjectRef("test", 1), device_class), RawObject(ObjectRef("test", 2), body)]
    )
    with pytest.raises(ToolkitError, match=r"example.com/gpu \(DeviceClass gpu\)") as raised:
        explain(snapshot, "pod/p", "team")
    assert reason in str(raised.value)
