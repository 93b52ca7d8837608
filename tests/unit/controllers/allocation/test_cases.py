"""The allocator loop on pods and claims in particular states: a pod bound by someone else,
a shared claim at the reservedFor limit, a claim being deleted, a generated claim the pod does
not own, a claim whose writes for another pod are in flight, a pod that changed during its
write (an event while the writes are in flight, a conflict on the pod write, a stale cached
version after it), and the node policy."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from operators.api.annotations import CLAIM_STATUSES_ANNOTATION
from operators.api.limits import RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE
from operators.cache.informer import Key
from operators.controllers import placerules
from operators.controllers.allocation import AllocationController
from operators.controllers.allocation.commit import BUSY_DELAY
from operators.controllers.workqueue import work_once
from operators.kube import NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, Conflict, JsonDict
from operators.settings import NodePolicy

from ..fakes import (
    WRITES,
    FakeClient,
    allocated,
    claim,
    node,
    one_device_cluster,
    pod,
    put,
    resource_slice,
)


class HoldingClient(FakeClient):
    """Holds PATCHes of one path until released, as a slow API server would."""

    def __init__(self) -> None:
        super().__init__()
        self.hold_path = ""
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self.attempts = 0  # PATCHes of the held path, answered or not

    async def merge_patch(self, resource: Any, name: str, patch: JsonDict, **kwargs: Any) -> Any:
        path = resource.path(kwargs.get("namespace"), name)
        if kwargs.get("subresource"):
            path += "/" + kwargs["subresource"]
        if path == self.hold_path:
            self.attempts += 1
            self.held.set()
            await self.release.wait()
        return await super().merge_patch(resource, name, patch, **kwargs)


def cluster(client: FakeClient, **settings: Any) -> AllocationController:
    return AllocationController(one_device_cluster(client, requeue_base_delay=1.0, **settings))


def add_node(controller: AllocationController, name: str, devices: int) -> None:
    controller.runtime.cache[NODES].apply("ADDED", node(name))
    controller.runtime.cache[RESOURCE_SLICES].apply("ADDED", resource_slice(name, devices))


def add_pod(
    controller: AllocationController, name: str, claim_name: str, *, raw_claim: JsonDict | None
) -> Key:
    if raw_claim is not None:
        put(controller.runtime, RESOURCE_CLAIMS, raw_claim)
    put(
        controller.runtime,
        PODS,
        pod("ns", name, [{"name": "dev", "resourceClaimName": claim_name}]),
    )
    return Key("ns", name)


async def sync(controller: AllocationController, key: Key) -> None:
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        taken = await asyncio.wait_for(work_once(controller.queue, controller.sync), 5)
        assert taken == key


def claim_status_writes(client: FakeClient, name: str) -> list[JsonDict]:
    path = RESOURCE_CLAIMS.path("ns", name) + "/status"
    return [c.body["status"] for c in client.writes(path)]


def pod_writes(client: FakeClient, name: str) -> list[JsonDict]:
    return [c.body for c in client.writes(PODS.path("ns", name))]


def pod_messages(client: FakeClient, name: str) -> list[str]:
    return [e["message"] for e in client.events if e["involved"]["metadata"].get("name") == name]


def allocated_node(status: JsonDict) -> str:
    (result,) = status["allocation"]["devices"]["results"]
    return str(result["pool"])


# --- a pod bound by someone else ----------------------------------------------------------


async def test_a_pod_bound_by_someone_else_gets_devices_on_its_node_only() -> None:
    """kube-scheduler (or a user's spec.nodeName) chose n2: binpack would take n1's one
    device, but the claim must be allocated where the pod runs, and the pod write leaves the
    spec alone (no gate to remove, no affinity to pin)."""
    client = FakeClient()
    controller = cluster(client)
    add_node(controller, "n2", devices=2)
    raw = pod("ns", "p", [{"name": "dev", "resourceClaimName": "c1"}], gated=False)
    raw["spec"]["nodeName"] = "n2"
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", "c1"))
    put(controller.runtime, PODS, raw)
    await sync(controller, Key("ns", "p"))
    (status,) = claim_status_writes(client, "c1")
    assert allocated_node(status) == "n2"
    (written,) = pod_writes(client, "p")
    assert "spec" not in written
    assert "resource.dralloc.dev/devices" in written["metadata"]["annotations"]


async def test_a_pod_bound_where_its_allocated_claim_cannot_be_is_refused() -> None:
    client = FakeClient()
    controller = cluster(client)
    add_node(controller, "n2", devices=2)
    shared = allocated(claim("ns", "c1"), "other", "uid-other")
    shared["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}  # fmt: skip
    raw = pod("ns", "p", [{"name": "dev", "resourceClaimName": "c1"}], gated=False)
    raw["spec"]["nodeName"] = "n2"
    put(controller.runtime, RESOURCE_CLAIMS, shared)
    put(controller.runtime, PODS, raw)
    await sync(controller, Key("ns", "p"))
    assert claim_status_writes(client, "c1") == []
    (message,) = pod_messages(client, "p")
    assert placerules.REASON_CLAIM_ELSEWHERE in message and "0/1 nodes" in message


async def test_an_allocated_claim_that_skips_node_operations_needs_a_declaring_node() -> None:
    """As kube-scheduler's DRA Filter: a claim allocated with a device that skips node
    operations is usable only where the kubelet declares DRAOptionalNodeOperations."""
    client = FakeClient()
    controller = cluster(client)
    add_node(controller, "n2", devices=2)
    shared = allocated(claim("ns", "c1"), "other", "uid-other")
    shared["status"]["allocation"]["devices"]["results"][0]["skipNodeOperations"] = ["*"]
    raw = pod("ns", "p", [{"name": "dev", "resourceClaimName": "c1"}], gated=False)
    raw["spec"]["nodeName"] = "n2"
    put(controller.runtime, RESOURCE_CLAIMS, shared)
    put(controller.runtime, PODS, raw)
    await sync(controller, Key("ns", "p"))
    (message,) = pod_messages(client, "p")
    assert placerules.REASON_NODE_OPERATIONS in message and "0/1 nodes" in message


@pytest.mark.parametrize("declaring", [True, False])
async def test_a_gated_pod_sharing_such_a_claim_goes_to_a_declaring_node(declaring: bool) -> None:
    """The same for a pod dralloc places: only a declaring node is a candidate (n1, which
    binpack would pick first, declares nothing); with none, the pod is told why."""
    client = FakeClient()
    controller = cluster(client)
    n2 = node("n2")
    if declaring:
        n2["status"] = {"declaredFeatures": ["DRAOptionalNodeOperations"]}
    controller.runtime.cache[NODES].apply("ADDED", n2)
    shared = allocated(claim("ns", "c1"), "other", "uid-other")
    shared["status"]["allocation"]["devices"]["results"][0]["skipNodeOperations"] = ["*"]
    key = add_pod(controller, "p", "c1", raw_claim=shared)
    await sync(controller, key)
    released = [w for w in pod_writes(client, "p") if "spec" in w]
    if declaring:
        (written,) = released
        affinity = written["spec"]["affinity"]["nodeAffinity"]
        terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms[0]["matchFields"][0]["values"] == ["n2"]
    else:
        assert released == []
        (message,) = pod_messages(client, "p")
        assert placerules.REASON_NODE_OPERATIONS in message and "0/2 nodes" in message


# --- the reservedFor limit ----------------------------------------------------------------


def shared_claim(consumers: int) -> JsonDict:
    raw = allocated(claim("ns", "c1"), "other-0", "uid-other-0")
    raw["status"]["reservedFor"] = [
        {"resource": "pods", "name": f"other-{i}", "uid": f"uid-other-{i}"}
        for i in range(consumers)
    ]
    return raw


async def test_a_claim_reserved_for_the_maximum_takes_no_further_pod() -> None:
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(
        controller, "p", "c1", raw_claim=shared_claim(RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE)
    )
    await sync(controller, key)
    assert claim_status_writes(client, "c1") == []
    (message,) = pod_messages(client, "p")
    assert f"maximum of {RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE} consumers" in message
    assert not [w for w in pod_writes(client, "p") if "spec" in w], "the pod was released"


async def test_a_claim_one_below_the_maximum_takes_the_pod() -> None:
    client = FakeClient()
    controller = cluster(client)
    limit = RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE
    key = add_pod(controller, "p", "c1", raw_claim=shared_claim(limit - 1))
    await sync(controller, key)
    (status,) = claim_status_writes(client, "c1")
    assert len(status["reservedFor"]) == limit
    assert status["reservedFor"][-1] == {"resource": "pods", "name": "p", "uid": "uid-p-p"}


# --- a claim being deleted ----------------------------------------------------------------


async def test_a_claim_being_deleted_is_not_allocated() -> None:
    client = FakeClient()
    controller = cluster(client)
    raw = claim("ns", "c1")
    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    raw["metadata"]["finalizers"] = ["example.com/keep"]
    key = add_pod(controller, "p", "c1", raw_claim=raw)
    await sync(controller, key)
    assert client.writes(RESOURCE_CLAIMS.path("ns", "c1")) == []
    (message,) = pod_messages(client, "p")
    assert 'resourceclaim "c1" is being deleted' in message


async def test_a_running_pod_whose_claim_is_being_deleted_is_not_told_it_has_no_devices() -> None:
    """Its devices stay until it ends (the claim's finalizer waits for it)."""
    client = FakeClient()
    controller = cluster(client)
    raw = allocated(claim("ns", "c1"), "p", "uid-p-p")
    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    raw["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    put(controller.runtime, RESOURCE_CLAIMS, raw)
    running = pod("ns", "p", [{"name": "dev", "resourceClaimName": "c1"}], gated=False)
    running["spec"]["nodeName"] = "n1"
    put(controller.runtime, PODS, running)
    await sync(controller, Key("ns", "p"))
    assert pod_messages(client, "p") == []
    assert not [c for c in client.calls if c.method != "GET" and "/pods/p" in c.path]


# --- a generated claim the pod does not own -----------------------------------------------


def template_pod(owner_uid: str) -> tuple[JsonDict, JsonDict]:
    """A pod whose template entry records claim "p-dev", and that claim, owned by ``owner_uid``."""
    raw_pod = pod("ns", "p", [{"name": "dev", "resourceClaimTemplateName": "t"}])
    statuses = [{"name": "dev", "resourceClaimName": "p-dev"}]
    raw_pod["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION] = json.dumps(statuses)
    raw_claim = claim("ns", "p-dev")
    raw_claim["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner_uid, "controller": True}
    ]
    raw_claim["metadata"]["annotations"] = {"resource.dralloc.dev/pod-claim-name": "dev"}
    return raw_pod, raw_claim


@pytest.mark.parametrize("owner", ["uid-p-p", "uid-earlier-pod"])
async def test_a_generated_claim_is_allocated_only_for_the_pod_that_owns_it(owner: str) -> None:
    client = FakeClient()
    controller = cluster(client)
    raw_pod, raw_claim = template_pod(owner)
    put(controller.runtime, RESOURCE_CLAIMS, raw_claim)
    put(controller.runtime, PODS, raw_pod)
    await sync(controller, Key("ns", "p"))
    writes = claim_status_writes(client, "p-dev")
    if owner == "uid-p-p":
        assert len(writes) == 1 and writes[0]["allocation"] is not None
        return
    assert writes == []
    (message,) = pod_messages(client, "p")
    assert "ResourceClaim ns/p-dev was not created for Pod ns/p (Pod is not owner)" in message


# --- two pods sharing a claim being written -----------------------------------------------


async def test_a_pod_whose_claim_is_being_written_for_another_pod_waits_for_it() -> None:
    """p's allocation of the shared claim is in flight: q must neither decide from the claim
    as it was (unallocated) nor wait as if there were no room; it retries shortly and is then
    added to the claim's reservedFor."""
    client = HoldingClient()
    controller = cluster(client)
    client.hold_path = RESOURCE_CLAIMS.path("ns", "c1") + "/status"
    first = add_pod(controller, "p", "c1", raw_claim=claim("ns", "c1"))
    second = add_pod(controller, "q", "c1", raw_claim=None)
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        assert await work_once(controller.queue, controller.sync) == first
        await asyncio.wait_for(client.held.wait(), 5)
        assert await work_once(controller.queue, controller.sync) == second
        due = controller.queue.due_in(second)
        assert due is not None and 0 < due <= BUSY_DELAY
        assert second not in controller.waiting
        assert client.attempts == 1
        client.release.set()
    (allocation,) = claim_status_writes(client, "c1")
    assert [r["name"] for r in allocation["reservedFor"]] == ["p"]
    await asyncio.sleep(BUSY_DELAY)
    await sync(controller, second)
    reservation = claim_status_writes(client, "c1")[-1]
    assert [r["name"] for r in reservation["reservedFor"]] == ["p", "q"]
    assert "allocation" not in reservation


# --- a pod that changed during its write --------------------------------------------------


async def test_a_pod_that_changes_while_its_writes_are_in_flight_is_synced_again_after() -> None:
    client = HoldingClient()
    controller = cluster(client)
    client.hold_path = RESOURCE_CLAIMS.path("ns", "c1") + "/status"
    key = add_pod(controller, "p", "c1", raw_claim=claim("ns", "c1"))
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        assert await work_once(controller.queue, controller.sync) == key
        await asyncio.wait_for(client.held.wait(), 5)
        changed = pod("ns", "p", [{"name": "dev", "resourceClaimName": "c1"}])
        changed["metadata"]["resourceVersion"] = "6"
        changed["metadata"]["labels"] = {"edited": "yes"}
        controller.runtime.cache[PODS].apply("MODIFIED", changed)
        assert await work_once(controller.queue, controller.sync) == key
        assert key in controller.commits.resync  # not decided again while its writes are in flight
        assert client.attempts == 1
        client.release.set()
    assert key not in controller.commits.resync
    assert controller.queue.due_in(key) == 0.0  # looked at again, now the writes are done


# --- the node policy ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [(NodePolicy.BINPACK, "n1"), (NodePolicy.SPREAD, "n3"), (NodePolicy.FIRST_FIT, "n0")],
)
async def test_the_node_policy_chooses_among_fitting_nodes(
    policy: NodePolicy, expected: str
) -> None:
    """n0 has 2 devices, n1 1 and n3 3: binpack leaves the fewest free (n1), spread the
    most (n3), first-fit takes the first by name (n0)."""
    client = FakeClient()
    controller = cluster(client, node_policy=policy)
    add_node(controller, "n0", devices=2)
    add_node(controller, "n3", devices=3)
    key = add_pod(controller, "p", "c1", raw_claim=claim("ns", "c1"))
    await sync(controller, key)
    (status,) = claim_status_writes(client, "c1")
    assert allocated_node(status) == expected


async def test_a_pod_changed_before_its_own_write_is_finished_from_its_reserved_claim() -> None:
    """The pod changed between the claim write and the pod write (409 on the pod): the claim
    stays allocated and reserved for it, the pod is retried at once, and the retry only
    writes the pod (no second allocation)."""
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(controller, "p", "c1", raw_claim=claim("ns", "c1"))
    pod_path = PODS.path("ns", "p")
    conflicts = [Conflict(409, "Conflict", "the object has been modified")]

    def fail(method: str, path: str, _body: JsonDict | None) -> BaseException | None:
        return conflicts.pop() if method in WRITES and path == pod_path and conflicts else None

    client.fail = fail
    await sync(controller, key)
    assert len(claim_status_writes(client, "c1")) == 1
    assert controller.queue.due_in(key) == 0.0  # a conflict is retried at once
    kept = controller.claims.get(Key("ns", "c1"))
    assert kept is not None and controller.state.is_assumed(kept)
    changed = pod("ns", "p", [{"name": "dev", "resourceClaimName": "c1"}])
    changed["metadata"].update(resourceVersion="6", labels={"edited": "yes"})
    controller.runtime.cache[PODS].apply("MODIFIED", changed)
    await sync(controller, key)
    assert len(claim_status_writes(client, "c1")) == 1, "the claim was allocated again"
    released = [w for w in pod_writes(client, "p") if "spec" in w]
    assert len(released) == 2 and released[-1]["spec"].get("schedulingGates") is None


async def test_a_stale_cached_pod_after_our_write_is_not_decided_again() -> None:
    """Until the watch shows the version our pod write returned, an older cached version
    of the pod (still gated) is not acted on: that would only write it again."""
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(controller, "p", "c1", raw_claim=claim("ns", "c1"))
    await sync(controller, key)
    written = controller.writer.written[key]
    writes = len(client.calls)
    stale = pod("ns", "p", [{"name": "dev", "resourceClaimName": "c1"}])
    stale["metadata"]["resourceVersion"] = "6"  # newer than what we read, older than ours
    controller.runtime.cache[PODS].apply("MODIFIED", stale)
    await sync(controller, key)
    assert len(client.calls) == writes, "acted on a pod older than its own write"
    ours = pod("ns", "p", [{"name": "dev", "resourceClaimName": "c1"}], gated=False)
    ours["metadata"]["resourceVersion"] = str(written)
    controller.runtime.cache[PODS].apply("MODIFIED", ours)
    assert key not in controller.writer.written


async def test_the_gated_pod_is_written_back_whole_or_else_patched() -> None:
    """The allocation's pod write is an update of the pod as the cache last read it (cheaper
    for the API server), fields the operator does not model included; where the cache kept
    no copy of that version, the same change goes as a merge patch."""
    for kept in (True, False):
        client = FakeClient()
        controller = cluster(client)
        raw = pod("ns", "p", [{"name": "dev", "resourceClaimName": "c1"}])
        raw["spec"]["futureField"] = {"kept": True}
        raw["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update"}]
        pods = controller.runtime.cache[PODS]
        assert pods.raw_kept is not None
        pods.raw_kept.limit = 1 if kept else 0
        put(controller.runtime, RESOURCE_CLAIMS, claim("ns", "c1"))
        put(controller.runtime, PODS, raw)
        await sync(controller, Key("ns", "p"))
        [write] = [c for c in client.writes(PODS.path("ns", "p")) if c.method in WRITES]
        assert write.method == ("PUT" if kept else "PATCH")
        body = write.body
        assert body["metadata"]["resourceVersion"] == "5", "not conditional on the version read"
        assert "resource.dralloc.dev/devices" in body["metadata"]["annotations"]
        assert body["spec"].get("schedulingGates") is None
        if kept:
            assert body["spec"]["futureField"] == {"kept": True}
            assert body["spec"]["containers"] == raw["spec"]["containers"]
            assert "managedFields" not in body["metadata"], (
                "the stored ones are kept by leaving them out"
            )
        else:
            assert set(body["spec"]) <= {"schedulingGates", "affinity"}, body
