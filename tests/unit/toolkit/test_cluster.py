"""The simulated cluster's checks around the allocator: admin access needs a labelled
namespace, and which nodes a pod may use at all (bound, the scheduler's filters, a claim
allocated elsewhere)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from operators.scheduling.filters import REASON_NODE_AFFINITY
from operators.toolkit.cluster import Cluster, Placement
from operators.toolkit.snapshot import build_snapshot
from operators.toolkit.sources import read_objects

from .conftest import find, load_items

Items = list[dict[str, Any]]


def evaluate(write: Callable[..., Path], items: Items, pod: str, ns: str = "team-a") -> Placement:
    cluster = Cluster(build_snapshot(read_objects([write(items)])))
    return cluster.evaluate(cluster.pods[f"{ns}/{pod}"], every_node=True)


def verdicts(placement: Placement) -> dict[str, tuple[bool, tuple[str, ...]]]:
    return {v.node: (v.fits, v.reasons) for v in placement.verdicts}


def new_pod(name: str, ns: str = "team-a", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "image": "pause"}], **spec},
        "status": {"phase": "Pending"},
    }


# --- admin access -------------------------------------------------------------------------


def admin_items(ns: str = "team-a", *, labels: dict[str, str] | None = None) -> Items:
    items = load_items()
    template = copy.deepcopy(find(items, "ResourceClaimTemplate", "one-gpu"))
    template["metadata"] = {"name": "monitor", "namespace": ns}
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    items.append(template)
    if labels is not None:
        find(items, "Namespace", "team-a")["metadata"]["labels"] = labels
    pod = new_pod(
        "monitor", ns, resourceClaims=[{"name": "g", "resourceClaimTemplateName": "monitor"}]
    )
    items.append(pod)
    return items


def test_admin_access_in_an_unlabelled_namespace_is_refused(
    write_snapshot: Callable[..., Path],
) -> None:
    placement = evaluate(write_snapshot, admin_items(), "monitor")
    assert placement.node is None
    assert placement.reason == (
        "claim team-a/monitor-g: admin access to devices requires the "
        'resource.dralloc.dev/admin-access: "true" label on namespace team-a'
    )


@pytest.mark.parametrize(
    "label", ["resource.dralloc.dev/admin-access", "resource.kubernetes.io/admin-access"]
)
def test_admin_access_in_a_labelled_namespace_is_placed(
    write_snapshot: Callable[..., Path], label: str
) -> None:
    placement = evaluate(write_snapshot, admin_items(labels={label: "true"}), "monitor")
    assert placement.node is not None and not placement.reason


def test_a_label_other_than_true_is_no_admin_namespace(write_snapshot: Callable[..., Path]) -> None:
    items = admin_items(labels={"resource.dralloc.dev/admin-access": "yes"})
    assert "admin access to devices requires" in evaluate(write_snapshot, items, "monitor").reason


def test_a_namespace_missing_from_the_snapshot_is_not_judged(
    write_snapshot: Callable[..., Path],
) -> None:
    """Its labels are unknown (a partial snapshot): the check is left to the cluster."""
    placement = evaluate(write_snapshot, admin_items("team-b"), "monitor", "team-b")
    assert placement.node is not None and not placement.reason


def test_a_named_admin_claim_is_checked_too(write_snapshot: Callable[..., Path]) -> None:
    items = load_items()
    items.append({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "watch", "namespace": "team-a", "uid": "uid-watch"},
        "spec": {"devices": {"requests": [
            {"name": "g", "exactly": {"deviceClassName": "gpu", "adminAccess": True}}]}},
    })  # fmt: skip
    items.append(new_pod("watcher", resourceClaims=[{"name": "g", "resourceClaimName": "watch"}]))
    reason = evaluate(write_snapshot, items, "watcher").reason
    assert reason.startswith("claim team-a/watch: admin access to devices requires")


# --- node fit -----------------------------------------------------------------------------


def test_a_bound_pod_fits_only_its_node_whatever_the_filters_say(
    write_snapshot: Callable[..., Path],
) -> None:
    """Bound to node-c (tainted NoSchedule, outside its nodeSelector): kube-scheduler's
    filters were already passed or skipped; only the devices there count."""
    items = load_items()
    find(items, "Pod", "west-pair")["spec"]["nodeName"] = "node-c"
    placement = evaluate(write_snapshot, items, "west-pair")
    assert placement.node == "node-c"
    assert verdicts(placement) == {
        "node-a": (False, ("pod is bound to node node-c",)),
        "node-b": (False, ("pod is bound to node node-c",)),
        "node-c": (True, ()),
    }


def test_the_scheduler_filters_exclude_nodes_before_devices(
    write_snapshot: Callable[..., Path],
) -> None:
    items = load_items()
    items.append(
        new_pod("anywhere", resourceClaims=[{"name": "g", "resourceClaimTemplateName": "one-gpu"}])
    )
    placement = evaluate(write_snapshot, items, "anywhere")
    fits = verdicts(placement)
    assert fits["node-c"] == (False, ("node(s) had untolerated taint {maintenance: }",))
    assert fits["node-a"] == (True, ()) and fits["node-b"] == (True, ())
    west = evaluate(write_snapshot, load_items(), "west-pair")
    assert verdicts(west)["node-a"] == (False, (REASON_NODE_AFFINITY,))


def test_a_claim_allocated_on_one_node_keeps_its_pods_there(
    write_snapshot: Callable[..., Path],
) -> None:
    items = load_items()
    items.append(
        new_pod("helper", resourceClaims=[{"name": "g", "resourceClaimName": "trainer-gpus"}])
    )
    placement = evaluate(write_snapshot, items, "helper")
    assert placement.node == "node-a"
    elsewhere = ("claim team-a/trainer-gpus is allocated on another node",)
    fits = verdicts(placement)
    assert fits["node-b"] == (False, elsewhere)
    assert fits["node-a"][0]
    assert [d.device for d in placement.devices] == [
        f"gpu.example.com/node-a/gpu-{i}" for i in range(3)
    ]


@pytest.mark.parametrize("declaring", [False, True])
def test_a_claim_whose_devices_skip_node_operations_needs_a_declaring_node(
    write_snapshot: Callable[..., Path], declaring: bool
) -> None:
    """As kube-scheduler's DRA Filter and the operator: the pods of a claim allocated with
    devices that skip node operations go only where the kubelet declares
    DRAOptionalNodeOperations."""
    items = load_items()
    trainer = find(items, "ResourceClaim", "trainer-gpus")
    for result in trainer["status"]["allocation"]["devices"]["results"]:
        result["skipNodeOperations"] = ["*"]
    if declaring:
        node_a = find(items, "Node", "node-a")
        node_a.setdefault("status", {})["declaredFeatures"] = ["DRAOptionalNodeOperations"]
    items.append(
        new_pod("helper", resourceClaims=[{"name": "g", "resourceClaimName": "trainer-gpus"}])
    )
    placement = evaluate(write_snapshot, items, "helper")
    fits = verdicts(placement)
    if declaring:
        assert placement.node == "node-a" and fits["node-a"][0]
    else:
        assert placement.node is None
        (reason,) = fits["node-a"][1]
        assert "skip node operations" in reason and "DRAOptionalNodeOperations" in reason
