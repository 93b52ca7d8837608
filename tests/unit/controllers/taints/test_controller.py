"""The device-taint eviction controller against a fake API server: the rate limit, cancelled
evictions, pods replaced or being deleted meanwhile (the rules' status: test_rulestatus.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.cache.informer import Key
from operators.controllers import taintrules
from operators.controllers.taints import REASON_EVICTION, TaintController
from operators.controllers.workqueue import WorkQueue
from operators.kube import (
    DISRUPTION_BUDGET_CAUSE,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ApiError,
    JsonDict,
)
from operators.settings import EvictionMode

from ..fakes import (
    Call,
    FakeClient,
    allocated,
    claim,
    one_device_cluster,
    pod,
    put,
    resource_slice,
)

NO_EXECUTE = {"key": "broken", "value": "yes", "effect": "NoExecute"}


def tainted_slice(devices: int, *, taint: bool = True, rv: str = "2") -> JsonDict:
    raw = resource_slice("n1", devices)
    raw["metadata"]["resourceVersion"] = rv
    if taint:
        for device in raw["spec"]["devices"]:
            device["taints"] = [NO_EXECUTE]
    return raw


def bound_pod(
    name: str, device: str, *, toleration_seconds: int | None = None
) -> tuple[JsonDict, JsonDict]:
    """A pod running on n1 and its claim, allocated ``device`` and reserved for it."""
    raw_claim = allocated(claim("ns", f"{name}-claim"), name, f"uid-p-{name}", device)
    if toleration_seconds is not None:
        toleration = {**NO_EXECUTE, "operator": "Equal", "tolerationSeconds": toleration_seconds}
        raw_claim["status"]["allocation"]["devices"]["results"][0]["tolerations"] = [toleration]
    raw_pod = pod("ns", name, [{"name": "dev", "resourceClaimName": f"{name}-claim"}], gated=False)
    raw_pod["spec"]["nodeName"] = "n1"
    raw_pod["status"] = {"phase": "Running"}
    return raw_pod, raw_claim


def cluster(client: FakeClient, pods: int, **settings: Any) -> tuple[TaintController, Any]:
    runtime = one_device_cluster(client, **settings)
    runtime.cache[RESOURCE_SLICES].apply("MODIFIED", tainted_slice(pods))
    controller = TaintController(runtime)
    for i in range(pods):
        raw_pod, raw_claim = bound_pod(f"p{i}", f"dev-{i}")
        put(runtime, RESOURCE_CLAIMS, raw_claim)
        put(runtime, PODS, raw_pod)
    controller.queue = WorkQueue()  # what the handlers queued is run by hand here
    return controller, runtime


def deletes(client: FakeClient) -> list[str]:
    return [c.path for c in client.calls if c.method == "DELETE"]


# --- the eviction rate limit --------------------------------------------------------------


async def test_evictions_past_the_rate_limit_wait_their_turn() -> None:
    client = FakeClient()
    controller, _ = cluster(client, 3, max_evictions_per_minute=2)
    for i in range(3):
        await controller.sync(Key("ns", f"p{i}"))
    assert deletes(client) == [PODS.path("ns", "p0"), PODS.path("ns", "p1")]
    assert controller.ledger.evictions == 2
    later = controller.queue.due_in(Key("ns", "p2"))
    assert later is not None and 50.0 < later <= 60.0
    assert Key("ns", "p2") in controller.ledger.scheduled  # still due, only later


class BudgetGuarded(FakeClient):
    """Evictions of ``protected`` pods are refused by a disruption budget, once ``answer`` is
    set: until then they are in flight."""

    def __init__(self, protected: set[str]) -> None:
        super().__init__()
        self.protected = protected
        self.answer = asyncio.Event()

    async def request(self, method: str, path: str, **kwargs: Any) -> JsonDict:
        if path.endswith("/eviction") and path.split("/")[-2] in self.protected:
            await self.answer.wait()
            self.calls.append(Call(method, path, kwargs.get("body")))
            raise ApiError(
                429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                causes=("The disruption budget pdb needs 1 healthy pods",),
                cause_reasons=(DISRUPTION_BUDGET_CAUSE,),
            )  # fmt: skip
        return await super().request(method, path, **kwargs)


async def test_a_slot_held_by_an_eviction_a_budget_refuses_is_free_at_once_for_the_next() -> None:
    """With one eviction a minute: a protected pod's attempt is in flight when a free pod
    asks, so the free pod must wait; the budget refuses, and the free pod goes at once, not a
    minute later (the slot was never used)."""
    client = BudgetGuarded({"p0"})
    controller, _ = cluster(client, 2, max_evictions_per_minute=1, eviction_mode=EvictionMode.EVICT)
    protected = asyncio.create_task(controller.sync(Key("ns", "p0")))
    await asyncio.sleep(0)  # its eviction is in flight, its slot taken
    await controller.sync(Key("ns", "p1"))
    assert controller.queue.due_in(Key("ns", "p1")) == pytest.approx(60.0, abs=1.0)
    client.answer.set()
    await protected
    assert controller.queue.due_in(Key("ns", "p1")) == 0.0  # woken by the slot given back
    await controller.sync(Key("ns", "p1"))
    assert controller.ledger.evictions == 1
    evicted = [c.path for c in client.calls if c.path.endswith("/eviction")]
    assert evicted == [PODS.path("ns", "p0") + "/eviction", PODS.path("ns", "p1") + "/eviction"]


async def test_an_eviction_the_api_server_refuses_uses_no_slot() -> None:
    """With one eviction a minute: the first pod's eviction is refused (its namespace is being
    deleted), which is no eviction, so the next pod goes at once; an attempt that got no answer
    (it may have happened) keeps its slot."""
    terminating = ApiError(403, "Forbidden", "namespace ns is being terminated")
    for mode in (EvictionMode.EVICT, EvictionMode.DELETE):
        client = FakeClient()
        controller, _ = cluster(client, 3, max_evictions_per_minute=1, eviction_mode=mode)
        client.fail = lambda method, path, _body: (
            terminating if method != "GET" and "/p0" in path and "events" not in path else None
        )
        with pytest.raises(ApiError):
            await controller.sync(Key("ns", "p0"))
        await controller.sync(Key("ns", "p1"))
        assert controller.ledger.evictions == 1, mode
        # No answer, or a 5xx (the eviction may have been applied before it): the slot stays.
        for unknown in (TimeoutError(), ApiError(504, "Timeout", "the server timed out")):
            controller.limiter.recent.clear()
            client.fail = lambda method, path, _body, e=unknown: (  # type: ignore[misc]
                e if method != "GET" and "/p1" in path and "events" not in path else None
            )
            with pytest.raises(type(unknown)):
                await controller.sync(Key("ns", "p1"))
            await controller.sync(Key("ns", "p2"))
            due = controller.queue.due_in(Key("ns", "p2"))
            assert due is not None and due > 50.0, (mode, unknown, due)


async def test_an_eviction_that_found_its_pod_gone_uses_no_slot() -> None:
    client = FakeClient()
    controller, _ = cluster(client, 2, max_evictions_per_minute=1)
    del client.objects[PODS.path("ns", "p0")]
    await controller.sync(Key("ns", "p0"))
    await controller.sync(Key("ns", "p1"))
    assert deletes(client) == [PODS.path("ns", "p1")]


# --- cancelling a pending eviction --------------------------------------------------------


async def test_a_pending_eviction_is_cancelled_with_an_event_when_the_taint_goes() -> None:
    client = FakeClient()
    runtime = one_device_cluster(client)
    runtime.cache[RESOURCE_SLICES].apply("MODIFIED", tainted_slice(1))
    controller = TaintController(runtime)
    raw_pod, raw_claim = bound_pod("p0", "dev-0", toleration_seconds=300)
    put(runtime, RESOURCE_CLAIMS, raw_claim)
    put(runtime, PODS, raw_pod)
    controller.queue = WorkQueue()
    key = Key("ns", "p0")
    await controller.sync(key)
    assert key in controller.ledger.scheduled and not deletes(client)
    due = controller.queue.due_in(key)
    assert due is not None and 290.0 < due <= 300.0
    runtime.cache[RESOURCE_SLICES].apply("MODIFIED", tainted_slice(1, taint=False, rv="3"))
    await controller.sync(key)
    assert key not in controller.ledger.scheduled and not deletes(client)
    (event,) = client.events
    assert (event["reason"], event["message"]) == (REASON_EVICTION, "Cancelling deletion")
    assert event["involved"]["metadata"]["uid"] == "uid-p-p0"


async def test_no_cancelling_event_for_a_pod_replaced_or_being_deleted() -> None:
    for change in ({"uid": "uid-new"}, {"deletionTimestamp": "2026-01-01T00:00:00Z"}):
        client = FakeClient()
        runtime = one_device_cluster(client)
        runtime.cache[RESOURCE_SLICES].apply("MODIFIED", tainted_slice(1))
        controller = TaintController(runtime)
        raw_pod, raw_claim = bound_pod("p0", "dev-0", toleration_seconds=300)
        put(runtime, RESOURCE_CLAIMS, raw_claim)
        put(runtime, PODS, raw_pod)
        key = Key("ns", "p0")
        await controller.sync(key)
        assert key in controller.ledger.scheduled
        raw_pod["metadata"] = {**raw_pod["metadata"], **change, "resourceVersion": "6"}
        runtime.cache[PODS].apply("MODIFIED", raw_pod)
        await controller.sync(key)
        assert key not in controller.ledger.scheduled, change
        assert not client.events, change
        assert not deletes(client), change


# --- pods replaced or being deleted before the delete -------------------------------------


@pytest.mark.parametrize(
    "live",
    [
        {"uid": "uid-other"},  # a new pod of the same name
        {"deletionTimestamp": "2026-01-01T00:00:00Z"},  # already being deleted
        None,  # gone
    ],
)
async def test_a_pod_replaced_deleting_or_gone_is_not_evicted(live: JsonDict | None) -> None:
    client = FakeClient()
    controller, _ = cluster(client, 1)
    path = PODS.path("ns", "p0")
    if live is None:
        del client.objects[path]
    else:
        client.objects[path]["metadata"].update(live)
    await controller.sync(Key("ns", "p0"))
    assert [c.method for c in client.calls] == ["GET"]  # the live read only
    assert not client.events and controller.ledger.evictions == 0


async def test_a_pod_still_there_is_marked_and_deleted_with_its_uid() -> None:
    client = FakeClient()
    controller, _ = cluster(client, 1)
    await controller.sync(Key("ns", "p0"))
    path = PODS.path("ns", "p0")
    assert [(c.method, c.path) for c in client.calls] == [
        ("GET", path),
        ("POST", "/api/v1/namespaces/ns/events"),
        ("PATCH", path + "/status"),
        ("DELETE", path),
    ]
    assert client.calls[2].body["metadata"] == {"uid": "uid-p-p0"}
    assert client.events[0]["message"] == "Marking for deletion"


# --- what a slice change queues -------------------------------------------------------------


async def test_a_slice_change_queues_only_the_pods_whose_devices_changed_taints() -> None:
    client = FakeClient()
    controller, runtime = cluster(client, 3)
    slices = runtime.cache[RESOURCE_SLICES]
    assert controller.taints()[("gpu.example.com", "n1", "dev-1")]  # the table is built
    republished = tainted_slice(3, rv="3")
    republished["spec"]["devices"][0]["attributes"] = {"model": {"string": "A100"}}
    slices.apply("MODIFIED", republished)
    assert controller.queue.pending() == 0  # the same taints: nobody to look at again
    untainted = tainted_slice(3, rv="4")
    del untainted["spec"]["devices"][1]["taints"]
    slices.apply("MODIFIED", untainted)
    assert controller.queue._queued == {Key("ns", "p1")}
    # The table the evictions read follows the slice without being rebuilt.
    assert controller._taints is not None
    assert controller._taints[("gpu.example.com", "n1", "dev-1")] == []
    assert controller._taints[("gpu.example.com", "n1", "dev-0")]


async def test_a_slice_gone_or_a_newer_generation_queues_the_pods_it_untainted() -> None:
    client = FakeClient()
    controller, runtime = cluster(client, 2)
    slices = runtime.cache[RESOURCE_SLICES]
    newer = tainted_slice(2, rv="3")
    newer["metadata"]["name"] = "n1-gpu-2"
    newer["metadata"]["uid"] = "uid-slice-n1-2"
    newer["spec"]["pool"]["generation"] = 2
    del newer["spec"]["devices"][0]["taints"]
    slices.apply("ADDED", newer)  # hides generation 1, where dev-0 was tainted
    assert controller.queue._queued == {Key("ns", "p0")}
    controller.queue = WorkQueue()
    slices.apply("DELETED", newer)  # generation 1 counts again
    assert controller.queue._queued == {Key("ns", "p0")}
    assert controller.taints() == taintrules.device_taints(slices.values(), [])
