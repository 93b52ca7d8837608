"""The allocator loop chooses only nodes kube-scheduler will bind the pod to.

Node n1 is small (cpu 2, one device) and n2 big (cpu 8, two devices): binpack prefers the
node with the fewest free matching devices, so without the scheduler's filters a pod that
needs cpu 4 would be pinned to n1, where kube-scheduler refuses it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from operators.cache.informer import Key
from operators.controllers.allocation import AllocationController
from operators.controllers.allocation.decide import EXPLAIN_GRACE
from operators.controllers.allocation.outcomes import StillWaiting, Unallocatable
from operators.controllers.workqueue import work_once
from operators.kube import NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, JsonDict

from ..fakes import FakeClient, claim, one_device_cluster, pod, put, resource_slice


def sized(name: str, cpu: str) -> JsonDict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "2"},
        "spec": {},
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}},
    }


def two_nodes(client: FakeClient) -> AllocationController:
    runtime = one_device_cluster(client)
    runtime.cache[NODES].apply("MODIFIED", sized("n1", "2"))
    runtime.cache[NODES].apply("ADDED", sized("n2", "8"))
    runtime.cache[RESOURCE_SLICES].apply("ADDED", resource_slice("n2", devices=2))
    return AllocationController(runtime)


def add_pod(controller: AllocationController, name: str, cpu: str, **spec: Any) -> Key:
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", f"{name}-claim"))
    raw = pod("ns", name, [{"name": "dev", "resourceClaimName": f"{name}-claim"}])
    raw["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    raw["spec"].update(spec)
    put(controller.runtime, PODS, raw)
    return Key("ns", name)


async def sync(controller: AllocationController, key: Key) -> None:
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        taken = await asyncio.wait_for(work_once(controller.queue, controller.sync), 5)
        assert taken == key


def pinned_node(client: FakeClient, name: str) -> str:
    writes = [c for c in client.writes(PODS.path("ns", name)) if "spec" in (c.body or {})]
    assert writes, f"pod {name} was not released"
    terms = writes[-1].body["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return str(terms[0]["matchFields"][0]["values"][0])


async def test_a_pod_goes_where_its_cpu_fits_not_where_binpack_points() -> None:
    client = FakeClient()
    controller = two_nodes(client)
    small = add_pod(controller, "small", "1")
    await sync(controller, small)
    assert pinned_node(client, "small") == "n1"  # binpack: the node with one device
    client = FakeClient()
    controller = two_nodes(client)
    big = add_pod(controller, "needs-4", "4")
    await sync(controller, big)
    assert pinned_node(client, "needs-4") == "n2"


async def test_pods_decided_back_to_back_do_not_share_the_last_cpu() -> None:
    """The first pod's pin has not come back through the watch when the second is decided:
    the choice itself must count."""
    client = FakeClient()
    controller = two_nodes(client)
    first = add_pod(controller, "first", "6")
    await sync(controller, first)
    assert pinned_node(client, "first") == "n2"
    second = add_pod(controller, "second", "3")
    waiting = controller.pods.get(second)
    assert waiting is not None
    with pytest.raises(StillWaiting):
        controller.decider.choose(waiting, controller.decider.resolve_claims(waiting))
    controller.decider.failing_since[second] -= EXPLAIN_GRACE
    with pytest.raises(Unallocatable) as caught:
        controller.decider.choose(waiting, controller.decider.resolve_claims(waiting))
    assert caught.value.summary == "0/2 nodes: 2 Insufficient cpu"
    assert not [c for c in client.writes(PODS.path("ns", "second")) if "spec" in (c.body or {})]


async def test_a_pod_that_leaves_frees_its_cpu_and_wakes_waiting_pods() -> None:
    client = FakeClient()
    controller = two_nodes(client)
    first = add_pod(controller, "first", "7")
    await sync(controller, first)
    second = add_pod(controller, "second", "7")
    await sync(controller, second)
    assert second in controller.waiting
    # The watch shows the first pod pinned (the choice is no longer just assumed), then gone.
    controller.runtime.cache[PODS].apply("MODIFIED", _stored(client, "first"))
    assert controller.usage.on_node("n2").requested == {"cpu": 7000}
    controller.runtime.cache[PODS].apply("DELETED", _stored(client, "first"))
    assert controller.usage.on_node("n2").requested == {}
    assert second not in controller.waiting  # woken: what the first pod held is free
    waiting = controller.pods.get(second)
    assert waiting is not None
    node, _ = controller.decider.choose(waiting, controller.decider.resolve_claims(waiting))
    assert node == "n2"


async def test_a_node_that_starts_declaring_a_feature_wakes_waiting_pods() -> None:
    """Devices that skip node operations become usable where the kubelet declares
    DRAOptionalNodeOperations: waiting pods look again, as for a label or taint change."""
    client = FakeClient()
    controller = two_nodes(client)
    big = add_pod(controller, "big", "9")  # fits no node
    await sync(controller, big)
    assert big in controller.waiting
    unchanged = sized("n2", "8")
    unchanged["metadata"]["resourceVersion"] = "3"
    controller.runtime.cache[NODES].apply("MODIFIED", unchanged)
    assert big in controller.waiting  # nothing that matters changed
    declaring = sized("n2", "8")
    declaring["status"]["declaredFeatures"] = ["DRAOptionalNodeOperations"]
    controller.runtime.cache[NODES].apply("MODIFIED", declaring)
    assert big not in controller.waiting


def _stored(client: FakeClient, name: str) -> JsonDict:
    """The pod as the fake server holds it after our writes (what the watch would show)."""
    return json.loads(json.dumps(client.objects[PODS.path("ns", name)]))  # type: ignore[no-any-return]


async def test_host_ports_of_placed_pods_count() -> None:
    client = FakeClient()
    controller = two_nodes(client)
    port = [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]
    web = add_pod(controller, "web", "1", containers=port)
    await sync(controller, web)
    assert pinned_node(client, "web") == "n1"
    web2 = add_pod(controller, "web2", "1", containers=port)
    await sync(controller, web2)
    assert pinned_node(client, "web2") == "n2"


async def test_in_tree_a_released_pod_is_pinned_too() -> None:
    """In-tree as on our CRDs: unpinned, kube-scheduler's DRA plugin would judge the claim on
    every node and may clear it, then bind the pod on its stale view (see pins_node)."""
    client = FakeClient()
    runtime = one_device_cluster(client, api_group="resource.k8s.io")
    runtime.cache[NODES].apply("MODIFIED", sized("n1", "2"))
    controller = AllocationController(runtime)
    put(runtime, RESOURCE_CLAIMS, claim("ns", "p-claim"))
    raw = pod("ns", "p", [])
    del raw["metadata"]["annotations"]["resource.dralloc.dev/claims"]
    raw["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimName": "p-claim"}]
    put(runtime, PODS, raw)
    await sync(controller, Key("ns", "p"))
    assert pinned_node(client, "p") == "n1"
