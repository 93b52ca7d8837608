"""Claim statuses of a gated pod are recorded in the allocation's pod write, not in one of their own.

The claim controller creates the claim and leaves the pod alone for ``STATUSES_DEFER``
seconds; the allocation controller finds the claim through its owner and writes the claim
statuses together with the devices, the node and the gate removal. If no allocation happens
in that time, the claim controller records them itself.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from operators.cache.core import CLAIM_STATUSES_ANNOTATION, DEVICES_ANNOTATION
from operators.cache.informer import Key
from operators.controllers.allocation import AllocationController
from operators.controllers.claims import STATUSES_DEFER, ClaimController
from operators.controllers.workqueue import work_once
from operators.kube import PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, JsonDict

from ..fakes import FakeClient, one_device_cluster, pod, put, template

POD = Key("ns", "p")
ENTRY = [{"name": "dev", "resourceClaimTemplateName": "one"}]


def setup(
    client: FakeClient, *, gated: bool = True, other_gates: tuple[str, ...] = ()
) -> tuple[ClaimController, AllocationController]:
    runtime = one_device_cluster(client)
    runtime.cache[RESOURCE_CLAIM_TEMPLATES].apply("ADDED", template("ns", "one"))
    claims = ClaimController(runtime)
    allocation = AllocationController(runtime)
    raw = pod("ns", "p", ENTRY, gated=gated)
    if other_gates:  # someone else's gates, before ours
        ours = raw["spec"].get("schedulingGates", [])
        raw["spec"]["schedulingGates"] = [{"name": g} for g in other_gates] + ours
    put(runtime, PODS, raw)
    return claims, allocation


def pod_writes(client: FakeClient) -> list[dict[str, str]]:
    """The annotations of every write to the pod, in order."""
    return [
        dict((call.body.get("metadata") or {}).get("annotations") or {})
        for call in client.writes(PODS.path("ns", "p"))
        if not call.path.endswith("/status")
    ]


async def test_the_allocation_write_records_the_claim_statuses() -> None:
    client = FakeClient()
    claims, allocation = setup(client, other_gates=("example.com/other",))
    await work_once(claims.queue, claims.sync)
    assert len(client.writes(RESOURCE_CLAIMS.path("ns"))) == 1  # the claim was created
    assert pod_writes(client) == []  # but the pod was left to the allocation write
    due = claims.queue.due_in(("pod", POD))
    assert due is not None and 0 < due <= STATUSES_DEFER

    # The watch shows the claim; the allocation controller finds it through its owner, and
    # one pod write carries everything.
    created = client.objects[client.path(RESOURCE_CLAIMS, "ns", "p-dev-abcde")]
    allocation.runtime.cache[RESOURCE_CLAIMS].apply("ADDED", created)
    async with asyncio.TaskGroup() as writers:
        allocation.commits.writers = writers
        assert await asyncio.wait_for(work_once(allocation.queue, allocation.sync), 5) == POD
    [annotations] = pod_writes(client)
    assert DEVICES_ANNOTATION in annotations
    statuses = json.loads(annotations[CLAIM_STATUSES_ANNOTATION])
    assert statuses == [{"name": "dev", "resourceClaimName": "p-dev-abcde"}]
    # The same write removes our gate (and only ours) and pins the pod to the node.
    written = client.objects[PODS.path("ns", "p")]
    assert written["spec"].get("schedulingGates") == [{"name": "example.com/other"}]
    required = written["spec"]["affinity"]["nodeAffinity"]
    [term] = required["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}


async def test_statuses_are_written_by_the_claim_controller_when_no_allocation_comes() -> None:
    client = FakeClient()
    claims, _ = setup(client)
    await work_once(claims.queue, claims.sync)
    assert pod_writes(client) == []
    claims.statuses_deferred[POD] -= STATUSES_DEFER  # as if the time had passed
    claims.queue.add(("pod", POD))
    await work_once(claims.queue, claims.sync)
    [annotations] = pod_writes(client)
    assert json.loads(annotations[CLAIM_STATUSES_ANNOTATION])[0]["name"] == "dev"
    assert POD not in claims.statuses_deferred


async def test_an_ungated_pod_gets_its_statuses_at_once() -> None:
    client = FakeClient()
    claims, _ = setup(client, gated=False)
    await work_once(claims.queue, claims.sync)
    [annotations] = pod_writes(client)
    assert CLAIM_STATUSES_ANNOTATION in annotations


async def test_a_generated_claim_needs_no_finalizer_write_before_its_allocation() -> None:
    client = FakeClient()
    claims, allocation = setup(client)
    await work_once(claims.queue, claims.sync)
    created = client.objects[client.path(RESOURCE_CLAIMS, "ns", "p-dev-abcde")]
    allocation.runtime.cache[RESOURCE_CLAIMS].apply("ADDED", created)
    async with asyncio.TaskGroup() as writers:
        allocation.commits.writers = writers
        await asyncio.wait_for(work_once(allocation.queue, allocation.sync), 5)
    writes = client.writes(RESOURCE_CLAIMS.path("ns", "p-dev-abcde"))
    assert [w.path.rsplit("/", 1)[-1] for w in writes] == ["status"]  # no finalizer patch


async def test_a_created_claim_wakes_its_pod_before_the_watch_shows_it() -> None:
    client = FakeClient()
    claims, allocation = setup(client)
    async with asyncio.TaskGroup() as writers:
        allocation.commits.writers = writers
        await asyncio.wait_for(work_once(allocation.queue, allocation.sync), 5)
    assert allocation.queue.due_in(POD) is None  # no claim yet: nothing to do
    await work_once(claims.queue, claims.sync)
    assert allocation.queue.due_in(POD) == 0.0  # woken by the claim controller's write
    async with asyncio.TaskGroup() as writers:
        allocation.commits.writers = writers
        await asyncio.wait_for(work_once(allocation.queue, allocation.sync), 5)
    [annotations] = pod_writes(client)
    assert DEVICES_ANNOTATION in annotations


# --- in-tree: the statuses live in the pod's status subresource ---------------------------


def in_tree_pod(**status: Any) -> JsonDict:
    raw = pod("ns", "p", [])
    del raw["metadata"]["annotations"]
    raw["spec"]["resourceClaims"] = ENTRY
    if status:
        raw["status"] = status
    return raw


def in_tree(client: FakeClient, **settings: Any) -> AllocationController:
    runtime = one_device_cluster(client, api_group="resource.k8s.io", **settings)
    runtime.cache[RESOURCE_CLAIM_TEMPLATES].apply("ADDED", template("ns", "one"))
    return AllocationController(runtime)


def status_writes(client: FakeClient) -> list[object]:
    return [
        call.body["status"]
        for call in client.writes(PODS.path("ns", "p"))
        if call.path.endswith("/status")
    ]


async def allocate_once(allocation: AllocationController) -> Key | None:
    async with asyncio.TaskGroup() as writers:
        allocation.commits.writers = writers
        return await asyncio.wait_for(work_once(allocation.queue, allocation.sync), 5)


async def test_in_tree_the_allocation_records_the_statuses_in_a_write_of_its_own() -> None:
    """The claim controller leaves a gated pod's statuses to the allocation in-tree too:
    both writing them made the allocation's write conflict for every pod."""
    client = FakeClient()
    allocation = in_tree(client)
    claims = ClaimController(allocation.runtime)
    put(allocation.runtime, PODS, in_tree_pod())
    await work_once(claims.queue, claims.sync)
    assert len(client.writes(RESOURCE_CLAIMS.path("ns"))) == 1  # the claim was created
    assert client.writes(PODS.path("ns", "p")) == []  # the pod is left to the allocation
    created = client.objects[client.path(RESOURCE_CLAIMS, "ns", "p-dev-abcde")]
    allocation.runtime.cache[RESOURCE_CLAIMS].apply("ADDED", created)
    assert await allocate_once(allocation) == POD
    recorded = [{"name": "dev", "resourceClaimName": "p-dev-abcde"}]
    assert status_writes(client) == [{"resourceClaimStatuses": recorded}]
    [annotations] = pod_writes(client)
    assert DEVICES_ANNOTATION in annotations


async def test_in_tree_beside_kcm_the_allocation_waits_for_the_statuses_kcm_records() -> None:
    """Allocator only (kcm's claim controller makes the claims): the pod's recorded claim
    name is waited for, as kube-scheduler does, instead of being written a second time."""
    client = FakeClient()
    allocation = in_tree(client, claims_controller=False)
    made = template("ns", "one")  # kcm's claim for the pod: owned by it, named after it
    kcm_claim = {
        "apiVersion": made["apiVersion"],
        "kind": "ResourceClaim",
        "metadata": {
            "name": "p-dev-xyz12",
            "namespace": "ns",
            "uid": "uid-c-kcm",
            "resourceVersion": "20",
            "annotations": {"resource.kubernetes.io/pod-claim-name": "dev"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p-p",
                 "controller": True}
            ],
        },
        "spec": made["spec"]["spec"],
    }  # fmt: skip
    put(allocation.runtime, RESOURCE_CLAIMS, kcm_claim)
    put(allocation.runtime, PODS, in_tree_pod())
    assert await allocate_once(allocation) == POD
    assert client.writes("/") == [], "allocated before kcm recorded the claim on the pod"

    recorded = in_tree_pod(
        resourceClaimStatuses=[{"name": "dev", "resourceClaimName": "p-dev-xyz12"}]
    )
    recorded["metadata"]["resourceVersion"] = "6"
    put(allocation.runtime, PODS, recorded)
    assert await allocate_once(allocation) == POD
    assert status_writes(client) == []  # kcm's record stands
    [annotations] = pod_writes(client)
    assert DEVICES_ANNOTATION in annotations
