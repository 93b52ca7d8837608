"""Priority preemption in the allocation controller, against the fake API server: node n1's one
device is held by a running pod of priority 0; a gated pod of priority 1000 wants it.

The victim gets upstream's DisruptionTarget and is deleted by UID, with an Event naming the
preemptor; the preemptor gets its nominatedNodeName and is told what it waits for; the device
is held for it while the victim goes (another pod does not get it), and it takes the device
once the victim's claim is released."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from prometheus_client import REGISTRY

from operators.cache.core import CLAIMS_ANNOTATION
from operators.cache.informer import Key
from operators.controllers.allocation import AllocationController
from operators.controllers.allocation.decide import EXPLAIN_GRACE
from operators.controllers.allocation.preemption import DISRUPTION_REASON, REASON_PREEMPTING
from operators.controllers.workqueue import work_once
from operators.kube import PODS, RESOURCE_CLAIMS, JsonDict

from ..fakes import FakeClient, allocated, claim, one_device_cluster, pod, put


def running(name: str, priority: int) -> JsonDict:
    raw = pod("ns", name, [{"name": "dev", "resourceClaimName": f"{name}-claim"}], gated=False)
    raw["spec"].update(nodeName="n1", priority=priority)
    raw["status"] = {"phase": "Running", "startTime": "2026-12-01T00:00:00Z"}
    return raw


def waiting(name: str, priority: int, **spec: Any) -> JsonDict:
    raw = pod("ns", name, [{"name": "dev", "resourceClaimName": f"{name}-claim"}])
    raw["spec"].update(priority=priority, **spec)
    return raw


def cluster(client: FakeClient, victim_priority: int = 0, **settings: Any) -> AllocationController:
    controller = AllocationController(
        one_device_cluster(client, preemption=True, requeue_base_delay=1.0, **settings)
    )
    runtime = controller.runtime
    put(runtime, RESOURCE_CLAIMS, allocated(claim("ns", "low-claim"), "low", "uid-p-low"))
    put(runtime, PODS, running("low", victim_priority))
    return controller


def add_waiting(controller: AllocationController, name: str, priority: int, **spec: Any) -> Key:
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", f"{name}-claim"))
    put(controller.runtime, PODS, waiting(name, priority, **spec))
    return Key("ns", name)


async def sync(controller: AllocationController, key: Key) -> None:
    """Decide for ``key`` as the loop does, past the grace before a pod is explained."""
    controller.decider.failing_since[key] = -EXPLAIN_GRACE - 1.0
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        await asyncio.wait_for(controller.sync(key), 5)


def allocations(client: FakeClient, claim_name: str) -> list[JsonDict]:
    """The allocations written to a claim."""
    return [
        c.body["status"]["allocation"]
        for c in client.writes(RESOURCE_CLAIMS.path("ns", claim_name) + "/status")
        if (c.body.get("status") or {}).get("allocation")
    ]


def condition(client: FakeClient, name: str) -> JsonDict:
    """The pod's DevicesAllocated condition as last written."""
    found = [
        c
        for call in client.writes(PODS.path("ns", name) + "/status")
        for c in (call.body.get("status") or {}).get("conditions") or []
        if c["type"] == "resource.dralloc.dev/DevicesAllocated"
    ]
    assert found, [c.path for c in client.calls]
    return found[-1]


async def test_the_lower_priority_holder_goes_and_its_device_is_held_for_the_preemptor() -> None:
    client = FakeClient()
    controller = cluster(client)
    vip = add_waiting(controller, "vip", 1000)
    await sync(controller, vip)
    low_path = PODS.path("ns", "low")
    marks = [c for c in client.calls if c.method == "PATCH" and c.path == low_path + "/status"]
    assert marks and marks[0].body["status"]["conditions"][0]["reason"] == DISRUPTION_REASON
    deletes = [c for c in client.calls if c.method == "DELETE" and c.path == low_path]
    assert len(deletes) == 1
    preempted = [e for e in client.events if e["reason"] == "Preempted"]
    assert preempted and "ns/vip (priority 1000)" in preempted[0]["message"]
    nominated = [
        c.body["status"].get("nominatedNodeName")
        for c in client.writes(PODS.path("ns", "vip") + "/status")
    ]
    assert "n1" in nominated
    told = condition(client, "vip")
    assert told["reason"] == REASON_PREEMPTING and "ns/low (priority 0)" in told["message"]
    assert controller.state.nominated("ns/vip"), "the device is held for the preemptor"

    # The victim goes and its claim is released: a third pod does not get the device.
    controller.runtime.cache[PODS].apply("DELETED", running("low", 0))
    released = claim("ns", "low-claim", rv="11")
    controller.runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", released)
    other = add_waiting(controller, "other", 0)
    await sync(controller, other)
    assert not allocations(client, "other-claim")
    assert "preempt" not in condition(client, "other")["message"], "priority 0: nothing said"
    # The preemptor takes it, and what was held for it is its allocation now.
    await sync(controller, vip)
    [written] = allocations(client, "vip-claim")
    assert written["devices"]["results"][0]["device"] == "dev-0"
    assert not controller.state.nominated("ns/vip")


async def test_a_holder_on_its_way_out_is_waited_for_and_nobody_is_preempted() -> None:
    """The device's holder is being deleted already: the preemptor preempts nobody (not
    the holder again, nor anyone else), holds the device meanwhile and says so."""
    client = FakeClient()
    controller = cluster(client)
    leaving = running("low", 0)
    leaving["metadata"].update(deletionTimestamp="2026-12-07T00:00:00Z", resourceVersion="50")
    put(controller.runtime, PODS, leaving)
    vip = add_waiting(controller, "vip", 1000)
    await sync(controller, vip)
    assert not [c for c in client.calls if c.method == "DELETE"]
    assert not [e for e in client.events if e["reason"] == "Preempted"]
    told = condition(client, "vip")
    assert told["reason"] == REASON_PREEMPTING, told
    assert "pods on their way out on node n1 free the devices it needs" in told["message"]
    assert "preempting nobody" in told["message"] and "0 lower-priority" not in told["message"]
    assert controller.state.nominated("ns/vip"), "the device is held for the preemptor"


def leaving_low(controller: AllocationController) -> None:
    """The holder of n1's one device, low, is being deleted already."""
    leaving = running("low", 0)
    leaving["metadata"].update(deletionTimestamp="2026-12-07T00:00:00Z", resourceVersion="50")
    put(controller.runtime, PODS, leaving)


async def test_the_preemptors_own_claim_is_not_counted_free_when_its_other_holder_leaves() -> None:
    """vip uses low's claim too (allocated: it keeps it) and needs one more device: low
    leaving frees nothing vip could take, so nothing is held for it."""
    client = FakeClient()
    controller = cluster(client)
    leaving_low(controller)
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", "vip-claim"))
    raw = waiting("vip", 1000)
    raw["metadata"]["annotations"][CLAIMS_ANNOTATION] = json.dumps(
        [
            {"name": "dev", "resourceClaimName": "vip-claim"},
            {"name": "shared", "resourceClaimName": "low-claim"},
        ]
    )
    put(controller.runtime, PODS, raw)
    await sync(controller, Key("ns", "vip"))
    assert not controller.state.nominated("ns/vip")
    assert "preempting nobody" not in condition(client, "vip")["message"]


async def test_a_claim_a_staying_pod_reserves_is_not_counted_free() -> None:
    """low's claim is reserved for low (leaving) and keeper (staying, priority 1000); a
    second leaving pod names it without being among its holders: it stays held."""
    client = FakeClient()
    controller = cluster(client)
    shared = allocated(claim("ns", "low-claim", rv="12"), "low", "uid-p-low")
    shared["status"]["reservedFor"].append(
        {"resource": "pods", "name": "keeper", "uid": "uid-p-keeper"}
    )
    put(controller.runtime, RESOURCE_CLAIMS, shared)
    leaving_low(controller)
    for name, priority in (("keeper", 1000), ("low2", 0)):
        raw = running(name, priority)
        raw["metadata"]["annotations"][CLAIMS_ANNOTATION] = json.dumps(
            [{"name": "dev", "resourceClaimName": "low-claim"}]
        )
        if name == "low2":
            raw["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
        put(controller.runtime, PODS, raw)
    vip = add_waiting(controller, "vip", 1000)
    await sync(controller, vip)
    assert not controller.state.nominated("ns/vip")
    assert "preempting nobody" not in condition(client, "vip")["message"]


async def test_equal_priority_never_preempts_and_says_what_it_would_take() -> None:
    client = FakeClient()
    controller = cluster(client, victim_priority=1000)
    vip = add_waiting(controller, "vip", 1000)
    await sync(controller, vip)
    assert not [c for c in client.calls if c.method == "DELETE"]
    told = condition(client, "vip")
    assert "it would need to preempt 1 pod(s) of priority 1000 or more" in told["message"]


async def test_a_pod_whose_preemption_policy_is_never_waits() -> None:
    client = FakeClient()
    controller = cluster(client)
    vip = add_waiting(controller, "vip", 1000, preemptionPolicy="Never")
    await sync(controller, vip)
    assert not [c for c in client.calls if c.method == "DELETE"]
    assert "preemptionPolicy is Never" in condition(client, "vip")["message"]


async def test_without_the_setting_nobody_is_preempted() -> None:
    client = FakeClient()
    made = AllocationController(one_device_cluster(client, requeue_base_delay=1.0))
    put(made.runtime, RESOURCE_CLAIMS, allocated(claim("ns", "low-claim"), "low", "uid-p-low"))
    put(made.runtime, PODS, running("low", 0))
    vip = add_waiting(made, "vip", 1000)
    await sync(made, vip)
    assert made.preemption is None
    assert not [c for c in client.calls if c.method == "DELETE"]


async def test_victims_gone_while_it_preempts_wake_the_preemptor_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The victim's claim is released before the preemptor's sync ends (a fast kubelet): the
    preemptor is due again within moments, not after its backoff (seen in the latency
    benchmark: one probe of 20 waited 3.3 s more)."""
    client = FakeClient()
    controller = cluster(client)
    vip = add_waiting(controller, "vip", 1000)
    preemption = controller.preemption
    assert preemption is not None
    remove = preemption._remove

    async def remove_and_release(*args: Any) -> None:
        await remove(*args)
        controller.runtime.cache[PODS].apply("DELETED", running("low", 0))
        released = claim("ns", "low-claim", rv="11")
        controller.runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", released)

    monkeypatch.setattr(preemption, "_remove", remove_and_release)  # the fast kubelet
    controller.decider.failing_since[vip] = -EXPLAIN_GRACE - 1.0
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        for _ in range(5):  # as the loop takes it: from the queue (other keys first, maybe)
            taken = await asyncio.wait_for(work_once(controller.queue, controller.sync), 5)
            if taken == vip:
                break
    assert [e for e in client.events if e["reason"] == "Preempted"], "it did preempt"
    due = controller.queue.due_in(vip)
    assert due is not None and due < 0.5, due


def cut_once(client: FakeClient, method: str, path: str) -> str:
    """The first ``method`` request to ``path`` gets no answer (the connection drops)."""
    cut = [ConnectionResetError("the API server went away")]

    def fail(asked: str, to: str, _body: Any) -> BaseException | None:
        return cut.pop() if asked == method and to == path and cut else None

    client.fail = fail
    return path


async def test_a_victim_already_on_its_way_out_is_neither_removed_nor_counted_again() -> None:
    """The deletion reached the API server but its answer was lost: the victim is terminating
    when the preemptor is looked at again, so it is not deleted again, told again, or counted
    in dralloc_preemption_victims_total again."""
    client = FakeClient()
    controller = cluster(client)
    vip = add_waiting(controller, "vip", 1000)
    low_path = cut_once(client, "DELETE", PODS.path("ns", "low"))
    with pytest.raises(ExceptionGroup):
        await sync(controller, vip)
    terminating = running("low", 0)
    terminating["metadata"]["deletionTimestamp"] = "2026-12-01T00:01:00Z"
    terminating["metadata"]["resourceVersion"] = "99"
    put(controller.runtime, PODS, terminating)
    counted = REGISTRY.get_sample_value("dralloc_preemption_victims_total") or 0.0

    def deletes() -> int:
        return sum(1 for c in client.calls if c.method == "DELETE" and c.path == low_path)

    sent = deletes()
    await sync(controller, vip)
    assert deletes() == sent, "a terminating victim was deleted again"
    assert REGISTRY.get_sample_value("dralloc_preemption_victims_total") == counted
    assert not client.events, "the victim was told, though its removal was never answered"
    assert controller.preemption is not None
    assert controller.preemption.nominations[vip].removed


async def test_a_removal_cut_short_is_sent_again_when_the_preemptor_is_looked_at_again() -> None:
    """The victim's deletion got no answer (the API server restarting): the next look at the
    preemptor deletes it, instead of waiting for a victim nobody removes (the robustness suite
    saw a preemptor wait out its whole run so)."""
    client = FakeClient()
    controller = cluster(client)
    vip = add_waiting(controller, "vip", 1000)
    low_path = cut_once(client, "DELETE", PODS.path("ns", "low"))
    raised = False
    try:
        await sync(controller, vip)
    except* ConnectionResetError:
        raised = True  # the work queue retries the pod
    assert raised
    assert controller.state.nominated("ns/vip"), "the device stays held for the preemptor"
    await sync(controller, vip)
    deletes = [c for c in client.calls if c.method == "DELETE" and c.path == low_path]
    assert len(deletes) == 2, "the removal was not sent again"
    assert [e["reason"] for e in client.events] == ["Preempted"], "the victim is told once"
    await sync(controller, vip)
    deletes = [c for c in client.calls if c.method == "DELETE" and c.path == low_path]
    assert len(deletes) == 2, "an answered removal is not sent again"
