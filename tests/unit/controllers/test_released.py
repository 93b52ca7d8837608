"""A released pod that kube-scheduler keeps refusing: reported (a bare pod keeps its devices),
and a controller-owned pod deleted so that its controller recreates it."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from operators.controllers import released
from operators.controllers.released import REASON_REFUSED, ReleasedPodsController
from operators.kube import PODS, RESOURCE_CLAIMS, JsonDict

from .fakes import FakeClient, allocated, claim, one_device_cluster, pod, put

PIN = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}  # fmt: skip
REFUSED = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/1 nodes are available: 1 Insufficient cpu.",
}


def released_pod(name: str, *, refused: bool = True, **metadata: Any) -> JsonDict:
    raw = pod("ns", name, [{"name": "dev", "resourceClaimName": f"{name}-claim"}], gated=False)
    raw["spec"]["affinity"] = PIN
    raw["metadata"]["annotations"]["resource.dralloc.dev/devices"] = "[]"
    raw["metadata"].update(metadata)
    raw["status"] = {"phase": "Pending", "conditions": [REFUSED] if refused else []}
    return raw


def setup(client: FakeClient, name: str, **metadata: Any) -> ReleasedPodsController:
    runtime = one_device_cluster(client, release_grace=0.0)
    controller = ReleasedPodsController(runtime)
    put(runtime, RESOURCE_CLAIMS, allocated(claim("ns", f"{name}-claim"), name, f"uid-p-{name}"))
    put(runtime, PODS, released_pod(name, **metadata))
    return controller


async def run_once(controller: ReleasedPodsController, monkeypatch: Any) -> None:
    monkeypatch.setattr(released, "CHECK_PERIOD", 0.01)
    task = asyncio.create_task(controller._loop())
    await asyncio.sleep(0.1)
    task.cancel()


async def test_a_bare_pod_is_reported_and_keeps_its_devices(monkeypatch: Any) -> None:
    """kube-scheduler's refusal may come from a view that lags; freeing the claims would let
    it bind the pod on that view with claims that hold nothing. The pod is told, and keeps
    its devices."""
    client = FakeClient()
    controller = setup(client, "p")
    await run_once(controller, monkeypatch)
    assert not client.writes(RESOURCE_CLAIMS.path("ns")), "a bare pod's claims were freed"
    (event,) = [e for e in client.events if e["reason"] == REASON_REFUSED]
    assert "Insufficient cpu" in event["message"] and "node n1" in event["message"]
    assert "the pod keeps its devices" in event["message"]
    (write,) = client.writes(PODS.path("ns", "p"))
    assert write.path.endswith("/status")  # the condition only: the devices annotation stays
    (condition,) = write.body["status"]["conditions"]
    assert (condition["status"], condition["reason"]) == ("True", REASON_REFUSED)
    assert not [c for c in client.calls if c.method == "DELETE"]


async def test_an_owned_pod_is_deleted_for_its_controller(monkeypatch: Any) -> None:
    client = FakeClient()
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}]  # fmt: skip
    controller = setup(client, "p", ownerReferences=owner)
    await run_once(controller, monkeypatch)
    assert [c.path for c in client.calls if c.method == "DELETE"] == [PODS.path("ns", "p")]
    (event,) = [e for e in client.events if e["reason"] == REASON_REFUSED]
    assert "ReplicaSet/rs recreates it" in event["message"]


async def test_nothing_happens_while_the_scheduler_has_not_refused(monkeypatch: Any) -> None:
    client = FakeClient()
    runtime = one_device_cluster(client, release_grace=0.0)
    controller = ReleasedPodsController(runtime)
    put(runtime, RESOURCE_CLAIMS, allocated(claim("ns", "p-claim"), "p", "uid-p-p"))
    put(runtime, PODS, released_pod("p", refused=False))
    await run_once(controller, monkeypatch)
    assert not client.writes("")
    # and nothing before the grace period, refusal or not
    client = FakeClient()
    runtime = one_device_cluster(client)
    runtime.settings = dataclasses.replace(runtime.settings, release_grace=60.0)
    controller = ReleasedPodsController(runtime)
    put(runtime, PODS, released_pod("p"))
    await run_once(controller, monkeypatch)
    assert not client.writes("")


async def test_an_owned_pod_bound_meanwhile_is_not_deleted(monkeypatch: Any) -> None:
    """The deletion is conditional on the refused version: a bind in between makes it
    conflict, and nothing is done."""
    from operators.kube import Conflict

    client = FakeClient()
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}]  # fmt: skip
    controller = setup(client, "p", ownerReferences=owner)
    client.fail = lambda method, path, _body: (
        Conflict(409, "Conflict", "the object has been modified")
        if method == "DELETE" and path == PODS.path("ns", "p")
        else None
    )
    await run_once(controller, monkeypatch)
    assert not client.writes(RESOURCE_CLAIMS.path("ns")), "claims released under a bound pod"
    assert not [e for e in client.events if e["reason"] == REASON_REFUSED]


def test_refused_nodes_are_remembered_per_controller_for_a_while() -> None:
    from operators.controllers.placerules import RecentRefusals

    refusals = RecentRefusals()
    refusals.add("ns", "ReplicaSet/rs", "n1", until=100.0)
    assert refusals.nodes("ns", "ReplicaSet/rs", now=50.0) == {"n1"}
    assert refusals.nodes("ns", "ReplicaSet/other", now=50.0) == set()
    assert refusals.nodes("other", "ReplicaSet/rs", now=50.0) == set()
    assert refusals.nodes("ns", "ReplicaSet/rs", now=100.0) == set()


async def test_in_tree_an_unpinned_refused_pod_is_undone_too(monkeypatch: Any) -> None:
    """In-tree dralloc also allocates a pod that passed the gate by, which it cannot pin:
    refused, it keeps its devices and after the grace is reported as a pinned one is."""
    client = FakeClient()
    runtime = one_device_cluster(client, release_grace=0.0, api_group="resource.k8s.io")
    controller = ReleasedPodsController(runtime)
    put(runtime, RESOURCE_CLAIMS, allocated(claim("ns", "p-claim"), "p", "uid-p-p"))
    raw = released_pod("p")
    del raw["spec"]["affinity"]
    del raw["metadata"]["annotations"]["resource.dralloc.dev/claims"]
    raw["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimName": "p-claim"}]
    put(runtime, PODS, raw)
    await run_once(controller, monkeypatch)
    assert not client.writes(RESOURCE_CLAIMS.path("ns", "p-claim"))
    (event,) = [e for e in client.events if e["reason"] == REASON_REFUSED]
    assert "did not bind the pod within" in event["message"]


def in_tree_released(
    client: FakeClient, *, claim_deleting: bool, **metadata: Any
) -> ReleasedPodsController:
    """In-tree, a released pod (pinned) that kube-scheduler has said nothing about."""
    runtime = one_device_cluster(client, release_grace=0.0, api_group="resource.k8s.io")
    controller = ReleasedPodsController(runtime)
    held = allocated(claim("ns", "p-claim"), "p", "uid-p-p")
    if claim_deleting:
        held["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    put(runtime, RESOURCE_CLAIMS, held)
    raw = released_pod("p", refused=False, **metadata)
    del raw["metadata"]["annotations"]["resource.dralloc.dev/claims"]
    raw["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimName": "p-claim"}]
    put(runtime, PODS, raw)
    return controller


async def test_in_tree_a_pod_held_back_for_a_claim_being_deleted_is_told(
    monkeypatch: Any,
) -> None:
    """kube-scheduler keeps such a pod out of its queue and says nothing (its DRA plugin's
    PreEnqueue): dralloc says why, on the pod and in a Warning Event."""
    client = FakeClient()
    controller = in_tree_released(client, claim_deleting=True)
    await run_once(controller, monkeypatch)
    (event,) = [e for e in client.events if e["reason"] == REASON_REFUSED]
    assert event["type_"] == "Warning"
    assert "its ResourceClaim p-claim is being deleted" in event["message"], event["message"]
    (write,) = client.writes(PODS.path("ns", "p"))
    (condition,) = write.body["status"]["conditions"]
    assert "is being deleted" in condition["message"]


async def test_in_tree_an_owned_pod_held_back_for_a_claim_being_deleted_is_recreated(
    monkeypatch: Any,
) -> None:
    client = FakeClient()
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}]  # fmt: skip
    controller = in_tree_released(client, claim_deleting=True, ownerReferences=owner)
    await run_once(controller, monkeypatch)
    assert [c.path for c in client.calls if c.method == "DELETE"] == [PODS.path("ns", "p")]


async def test_in_tree_a_pod_whose_claims_stand_is_left_to_the_scheduler(
    monkeypatch: Any,
) -> None:
    client = FakeClient()
    controller = in_tree_released(client, claim_deleting=False)
    await run_once(controller, monkeypatch)
    assert not client.writes("")
