"""In-tree, dralloc allocates the claims of pods that passed its gate by.

A pod created while the webhook was down (or failing open), or before the operator ran, has
no gate; kube-scheduler would allocate its claims beside dralloc. With the claim-allocation
policy it may not, so dralloc allocates them as for a gated pod (without a gate to lift or a
node to pin: kube-scheduler binds the pod where its claims are), in the namespaces it serves
only. On dralloc's CRDs kube-scheduler knows nothing of the claims, so such a pod is
allocated once bound, on its node, as before.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from operators.api.annotations import (
    GANG_ANNOTATION,
    GANG_SIZE_ANNOTATION,
    GANG_TOPOLOGY_ANNOTATION,
)
from operators.cache.informer import Key
from operators.controllers.allocation import AllocationController
from operators.controllers.workqueue import work_once
from operators.fencing import ALLOCATED_BY_ANNOTATION, AllocationRecord, AllocatorMark
from operators.kube import NAMESPACES, PODS, RESOURCE_CLAIMS

from ..fakes import FakeClient, allocated, claim, namespace, one_device_cluster, pod, put

POD = Key("ns", "p")
ENTRY = [{"name": "dev", "resourceClaimName": "c"}]


def ungated_pod(ns: str = "ns", *, in_tree: bool = True) -> dict[str, Any]:
    raw = pod(ns, "p", [] if in_tree else ENTRY, gated=False)
    if in_tree:
        del raw["metadata"]["annotations"]
        raw["spec"]["resourceClaims"] = ENTRY
    return raw


def controller(client: FakeClient, ns: str = "ns", **settings: Any) -> AllocationController:
    settings.setdefault("api_group", "resource.k8s.io")
    runtime = one_device_cluster(client, **settings)
    if ns != "ns":
        runtime.cache[NAMESPACES].apply("ADDED", namespace(ns))
    put(runtime, RESOURCE_CLAIMS, claim(ns, "c"))
    return AllocationController(runtime)


async def allocate_once(allocation: AllocationController) -> Key | None:
    async with asyncio.TaskGroup() as writers:
        allocation.commits.writers = writers
        return await asyncio.wait_for(work_once(allocation.queue, allocation.sync), 5)


def allocations(client: FakeClient, ns: str = "ns") -> list[dict[str, Any]]:
    return [
        call.body["status"]
        for call in client.writes(RESOURCE_CLAIMS.path(ns, "c"))
        if call.path.endswith("/status") and "allocation" in (call.body.get("status") or {})
    ]


async def test_an_ungated_pod_is_allocated_and_left_to_kube_scheduler_to_bind() -> None:
    client = FakeClient()
    allocation = controller(client)
    put(allocation.runtime, PODS, ungated_pod())
    assert allocation.queue.pending() == 1
    assert await allocate_once(allocation) == POD
    [status] = allocations(client)
    [result] = status["allocation"]["devices"]["results"]
    assert (result["pool"], result["device"]) == ("n1", "dev-0")
    assert [r["uid"] for r in status["reservedFor"]] == ["uid-p-p"]
    # kube-scheduler binds it by the allocation's node selector: no gate to lift, no
    # affinity written (the spec of an ungated pod cannot take one anyway).
    pod_writes = [c.body for c in client.writes(PODS.path("ns", "p"))]
    assert pod_writes and all("spec" not in body for body in pod_writes)
    # Counted on that node from now on (its cpu, ports, spread), as a gated pod would be.
    assert allocation.usage.node_of(POD) == "n1"


async def test_pods_of_namespaces_dralloc_does_not_serve_stay_kube_schedulers() -> None:
    for ns, settings in (
        ("ns", {"gate_namespace_label": "dralloc=on"}),  # "ns" is not labelled
        ("kube-system", {}),
        ("ns", {"allocate_ungated": False}),
    ):
        client = FakeClient()
        allocation = controller(client, ns, **settings)
        put(allocation.runtime, PODS, ungated_pod(ns))
        assert allocation.queue.pending() == 0, (ns, settings)
        await allocation.sync(Key(ns, "p"))
        assert allocations(client, ns) == [], (ns, settings)


async def test_labelling_the_namespace_brings_its_ungated_pods_in() -> None:
    client = FakeClient()
    allocation = controller(client, gate_namespace_label="dralloc=on")
    put(allocation.runtime, PODS, ungated_pod())
    assert allocation.queue.pending() == 0
    labelled = namespace("ns")
    labelled["metadata"]["labels"]["dralloc"] = "on"
    labelled["metadata"]["resourceVersion"] = "2"
    allocation.runtime.cache[NAMESPACES].apply("MODIFIED", labelled)
    assert await allocate_once(allocation) == POD
    assert len(allocations(client)) == 1


async def test_on_the_crds_an_ungated_pod_waits_for_its_node() -> None:
    client = FakeClient()
    allocation = controller(client, api_group="resource.dralloc.dev")
    put(allocation.runtime, PODS, ungated_pod(in_tree=False))
    assert allocation.queue.pending() == 0
    await allocation.sync(POD)
    assert allocations(client) == []


async def test_a_gang_member_without_the_gate_is_not_allocated_alone() -> None:
    """Allocated alone, it would be bound while the rest of its gang waits: it is explained
    instead (it can never be held back again)."""
    client = FakeClient()
    allocation = controller(client)
    member = ungated_pod()
    member["metadata"]["annotations"] = {GANG_ANNOTATION: "train", GANG_SIZE_ANNOTATION: "2"}
    put(allocation.runtime, PODS, member)
    assert await allocate_once(allocation) == POD
    assert allocations(client) == []
    conditions = [
        call.body["status"]["conditions"]
        for call in client.writes(PODS.path("ns", "p"))
        if call.path.endswith("/status") and "conditions" in (call.body.get("status") or {})
    ]
    assert conditions, client.calls
    assert "gang train: this member has no" in json.dumps(conditions)


async def test_a_gang_member_placed_with_its_gang_and_released_is_left_alone() -> None:
    """dralloc lifted its gate after allocating the whole gang: while it waits for
    kube-scheduler it is neither allocated again nor told it passed the gate by (seen in a
    robustness run: both members of a placed gang were told so for 33 s until bound)."""
    client = FakeClient()
    allocation = controller(client)
    put(allocation.runtime, RESOURCE_CLAIMS, allocated(claim("ns", "c", rv="11"), "p", "uid-p-p"))
    member = ungated_pod()
    member["metadata"]["annotations"] = {GANG_ANNOTATION: "train", GANG_SIZE_ANNOTATION: "2"}
    put(allocation.runtime, PODS, member)
    assert await allocate_once(allocation) == POD
    assert allocations(client) == []
    assert client.writes(PODS.path("ns", "p")) == [], "the placed member was written to"


LEADER = AllocatorMark("ns/lease", "op-0", 1)


def released_member(by: AllocatorMark = LEADER, /, **annotations: str) -> dict[str, Any]:
    """A member of gang "train" that dralloc released with its gang (its allocation record),
    its claim no longer allocated."""
    member = ungated_pod()
    record = AllocationRecord(by, time.time() - 5)
    member["metadata"]["annotations"] = {
        GANG_ANNOTATION: "train",
        GANG_SIZE_ANNOTATION: "2",
        ALLOCATED_BY_ANNOTATION: record.render(),
        **annotations,
    }
    return member


async def test_a_released_member_whose_claims_were_cleared_is_allocated_again_alone() -> None:
    """dralloc released it with its gang (its allocation record says so), then kube-scheduler
    cleared its claim (its PostFilter does when its view has no node for the pod, a node it
    has not seen yet): the gang was placed already, so the member is allocated again on its
    own, as any released pod, rather than told to be made again (seen in a robustness run:
    the member waited, and without the claim-allocation policy kube-scheduler took it).
    An operator without leader election records itself too, without a Lease."""
    for by in (LEADER, AllocatorMark.without_lease("op-0")):
        client = FakeClient()
        allocation = controller(client)
        put(allocation.runtime, PODS, released_member(by))
        assert await allocate_once(allocation) == POD
        [status] = allocations(client)
        assert [r["uid"] for r in status["reservedFor"]] == ["uid-p-p"], by
        told = json.dumps([c.body for c in client.calls])
        assert "gang train: this member has no" not in told, by


async def test_without_leader_election_the_pod_still_records_its_allocator() -> None:
    """The record is what lets a released member whose claims were cleared be allocated
    again (above): an operator run without leader election writes one with its identity and
    no Lease, which fences nobody."""
    client = FakeClient()
    allocation = controller(client, identity="op-solo")
    assert allocation.runtime.mark is None
    put(allocation.runtime, PODS, ungated_pod())
    assert await allocate_once(allocation) == POD
    records = [
        AllocationRecord.parse(body["metadata"]["annotations"].get(ALLOCATED_BY_ANNOTATION))
        for body in (c.body for c in client.writes(PODS.path("ns", "p")))
        if "metadata" in body
    ]
    assert records and all(r is not None for r in records), records
    assert {r.by for r in records if r is not None} == {AllocatorMark.without_lease("op-solo")}


async def test_a_released_member_is_not_placed_alone_outside_its_gangs_topology() -> None:
    """With a topology the member could land outside the value its gang shares: told, not
    allocated. A record that does not parse is no record (the member passed the gate by)."""
    for extra, told in (
        ({GANG_TOPOLOGY_ANNOTATION: "topology.kubernetes.io/zone"}, "node label topology.kubernetes.io/zone its gang shares"),
        ({ALLOCATED_BY_ANNOTATION: "not a record"}, "this member has no"),
    ):  # fmt: skip
        client = FakeClient()
        allocation = controller(client)
        put(allocation.runtime, PODS, released_member(**extra))
        assert await allocate_once(allocation) == POD
        assert allocations(client) == [], extra
        assert told in json.dumps([c.body for c in client.calls]), extra
