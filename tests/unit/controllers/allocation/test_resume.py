"""A crash between the claim write and the pod write: the next operator finishes the job.

The claim is allocated and reserved for the pod; the pod is still gated, without its devices
annotation. A fresh controller (the restarted operator, or the new leader) must read that as
"already allocated, pin the pod there": no second allocation, no other device, one pod write
with the claim's devices, our gate removed and the node pinned.

The e2e test of operator HA reaches this state only if a kill happens to land between the
two writes; here it is built directly.
"""

from __future__ import annotations

import asyncio
import json

from operators.cache.core import DEVICES_ANNOTATION
from operators.cache.informer import Key
from operators.controllers.allocation import AllocationController
from operators.controllers.workqueue import work_once
from operators.kube import NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES

from ..fakes import (
    DRIVER,
    FINALIZER,
    WRITES,
    FakeClient,
    allocated,
    claim,
    node,
    pod,
    put,
    resource_slice,
)
from ..fakes import one_device_cluster as _one_device_cluster

POD = Key("ns", "p")
PIN = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}


def crashed_between_the_writes(client: FakeClient) -> AllocationController:
    """Two nodes with two free-looking devices each; claim c1 allocated (n2/dev-1) and
    reserved for pod p by the operator that crashed; p still gated."""
    made = _one_device_cluster(client)
    made.cache[NODES].apply("ADDED", node("n2"))
    for name in ("n1", "n2"):
        made.cache[RESOURCE_SLICES].apply("MODIFIED", resource_slice(name, devices=2))
    raw = allocated(claim("ns", "c1", rv="20"), "p", "uid-p-p", device="dev-1")
    [result] = raw["status"]["allocation"]["devices"]["results"]
    result["pool"] = "n2"
    raw["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [PIN]}
    put(made, RESOURCE_CLAIMS, raw)
    put(made, PODS, pod("ns", "p", [{"name": "dev", "resourceClaimName": "c1"}]))
    return AllocationController(made)


async def sync(controller: AllocationController) -> None:
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        assert await asyncio.wait_for(work_once(controller.queue, controller.sync), 5) == POD


async def test_a_claim_allocated_for_a_gated_pod_is_finished_not_allocated_again() -> None:
    client = FakeClient()
    controller = crashed_between_the_writes(client)
    await sync(controller)

    claim_writes = client.writes(RESOURCE_CLAIMS.path("ns", "c1"))
    assert claim_writes == [], f"the allocated claim was written again: {claim_writes}"
    pod_writes = [c for c in client.writes(PODS.path("ns", "p")) if c.method in WRITES]
    assert len(pod_writes) == 1, f"not one pod write (the pod stays gated): {pod_writes}"
    [pod_write] = pod_writes
    devices = json.loads(pod_write.body["metadata"]["annotations"][DEVICES_ANNOTATION])
    assert [(d["pool"], d["device"]) for d in devices[0]["devices"]] == [("n2", "dev-1")]
    assert devices[0]["devices"][0]["driver"] == DRIVER
    written = client.objects[PODS.path("ns", "p")]
    assert not written["spec"].get("schedulingGates"), "the pod is still gated"
    terms = written["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [PIN], "pinned elsewhere than the claim's node"
    assert client.objects[RESOURCE_CLAIMS.path("ns", "c1")]["metadata"]["finalizers"] == [FINALIZER]
