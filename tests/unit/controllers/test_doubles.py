"""Devices allocated to two claims at once: which side is undone, and how."""

from __future__ import annotations

import copy
from typing import Any

from operators.cache.informer import Key
from operators.controllers import doubles
from operators.controllers.doubles import DoubleAllocationController, Holder, Undo, choose_keeper
from operators.kube import PODS, RESOURCE_CLAIMS, JsonDict

from .fakes import FakeClient, allocated, claim, one_device_cluster, pod, put


def holder(name: str, undo: Undo = Undo.DEALLOCATE, seen: int = 1) -> Holder:
    return Holder(Key("ns", name), undo, seen)


def test_the_holder_hardest_to_undo_or_seen_first_keeps_the_device() -> None:
    keeper, undo = choose_keeper([holder("late", seen=9), holder("early", seen=3)])
    assert (keeper.key.name, [h.key.name for h in undo]) == ("early", ["late"])
    keeper, _ = choose_keeper([holder("gated", seen=1), holder("bound", Undo.EVICT, seen=5)])
    assert keeper.key.name == "bound"
    keeper, _ = choose_keeper([holder("owned", Undo.EVICT), holder("bare", Undo.REPORT, seen=7)])
    assert keeper.key.name == "bare"


OWNER = [
    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}
]
DEVICE = ("gpu.example.com", "n1", "dev-0")


class Writer:
    """The allocation controller's answer to "are you writing this right now?"."""

    name = "allocation"

    def __init__(self) -> None:
        self.busy: set[Key] = set()

    def writing(self, claim: Key, pods: Any) -> bool:
        return claim in self.busy

    async def run(self) -> None: ...

    def health(self) -> dict[str, Any]:
        return {}


class _Controller(DoubleAllocationController):
    """The controller under test, with the allocation controller's stand-in at hand."""

    writer: Writer


def _double(
    client: FakeClient,
    *,
    gated: bool = False,
    bound: bool = False,
    owned: bool = False,
    generated: bool = True,
    c2_reserved: list[dict[str, Any]] | None = None,
) -> _Controller:
    """c1 (pod "first", bound, seen first) and c2 (pod "second") hold the same device."""
    runtime = one_device_cluster(client)
    writer = Writer()
    runtime.add(writer)
    controller = _Controller(runtime)
    controller.writer = writer
    first = pod("ns", "first", [{"name": "d", "resourceClaimName": "c1"}], gated=False)
    first["spec"]["nodeName"] = "n1"
    first["metadata"]["ownerReferences"] = OWNER
    second = pod("ns", "second", [{"name": "d", "resourceClaimName": "c2"}], gated=gated)
    if bound:
        second["spec"]["nodeName"] = "n1"
    if owned:
        second["metadata"]["ownerReferences"] = OWNER
    for raw in (first, second):
        put(runtime, PODS, raw)
    c1 = allocated(claim("ns", "c1", rv="20"), "first", "uid-p-first")
    c2 = allocated(claim("ns", "c2", rv="30"), "second", "uid-p-second")
    # A forged timestamp must not decide who keeps the device: c2 claims to be older.
    c2["status"]["allocation"]["allocationTimestamp"] = "1970-01-01T00:00:00Z"
    if generated:
        c2["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "second", "uid": "uid-p-second", "controller": True}
        ]  # fmt: skip
    if c2_reserved is not None:
        c2["status"]["reservedFor"] = c2_reserved
    put(runtime, RESOURCE_CLAIMS, c1)
    put(runtime, RESOURCE_CLAIMS, c2)
    return controller


def _undone(client: FakeClient) -> list[str]:
    """Writes that undo something (a condition that reports the double undoes nothing)."""
    return [f"{c.method} {c.path.rsplit('/', 2)[-2]}/{c.path.rsplit('/', 1)[-1]}" for c in client.calls if c.method in ("PATCH", "DELETE") and not _reports(c)]  # fmt: skip


def _reports(call: Any) -> bool:
    body = call.body or {}
    conditions = (body.get("status") or {}).get("conditions") or []
    return (
        call.path.endswith("/status")
        and "/pods/" in call.path
        and [c.get("reason") for c in conditions] == [doubles.REASON_DOUBLE]
    )


async def test_a_gated_double_is_deallocated_and_reported() -> None:
    client = FakeClient()
    controller = _double(client, gated=True)
    assert controller.since  # found at once
    await controller._repair(DEVICE)
    (write,) = client.writes("resourceclaims/c2/status")
    assert write.body["status"] == {
        "allocation": None,
        "reservedFor": None,
        "devices": None,
        "allocatedDevices": None,
        "reservedForNames": None,
    }
    assert not client.writes("resourceclaims/c1") and not client.writes("pods/first")
    messages = {e["involved"]["metadata"]["name"]: e["message"] for e in client.events}
    assert set(messages) == {"c2", "second"}
    assert "also allocated to resourceclaim ns/c1" in messages["c2"]
    assert all(e["reason"] == doubles.REASON_DOUBLE for e in client.events)
    assert controller.repaired == 1


async def test_a_claim_dralloc_is_still_writing_is_left_for_later() -> None:
    client = FakeClient()
    controller = _double(client, gated=True)
    controller.writer.busy.add(Key("ns", "c2"))
    await controller._repair(DEVICE)
    assert not _undone(client) and not client.events
    assert DEVICE in controller.since  # looked at again


async def test_a_released_unbound_pod_is_never_deallocated_under_kube_scheduler() -> None:
    """Ungated, kube-scheduler may bind it any moment: clearing its claim would leave a
    bound pod with an unallocated claim. Owned, it is evicted with a version precondition."""
    client = FakeClient()
    controller = _double(client, owned=True)
    await controller._repair(DEVICE)
    assert not client.writes("resourceclaims")
    (delete,) = [c for c in client.calls if c.method == "DELETE"]
    assert delete.path.endswith("/pods/second")
    bare = FakeClient()
    controller = _double(bare)
    await controller._repair(DEVICE)
    assert not _undone(bare) and controller.reported == 1


async def test_a_bound_double_evicts_only_generated_claims_of_owned_pods() -> None:
    client = FakeClient()
    controller = _double(client, bound=True, owned=True)
    await controller._repair(DEVICE)
    assert [c.method for c in client.writes("pods/second")] == ["PATCH", "DELETE"]
    assert not client.writes("pods/first")  # the forged older timestamp did not win
    assert not client.writes("resourceclaims")

    bare = FakeClient()
    controller = _double(bare, bound=True)
    await controller._repair(DEVICE)
    await controller._repair(DEVICE)
    assert not _undone(bare)
    assert controller.reported == 1  # once, not every period
    assert "cannot be undone safely" in bare.events[0]["message"]
    # It lasts: said on the pod too, and counted by the gauge an alert fires on.
    (condition,) = [c for c in bare.calls if _reports(c)]
    assert condition.path.endswith("/pods/second/status")
    assert condition.body["status"]["conditions"][0]["status"] == "True"
    assert "cannot be undone safely" in condition.body["status"]["conditions"][0]["message"]
    assert set(controller.doubled) == {DEVICE}

    shared = FakeClient()  # a named claim: its next consumers would get the same allocation
    controller = _double(shared, bound=True, owned=True, generated=False)
    await controller._repair(DEVICE)
    assert not _undone(shared) and controller.reported == 1


async def test_a_claim_reserved_for_something_else_than_known_pods_is_only_reported() -> None:
    client = FakeClient()
    group = [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g", "uid": "g"}]
    controller = _double(client, gated=True, c2_reserved=group)
    await controller._repair(DEVICE)
    assert not _undone(client) and controller.reported == 1


def test_the_index_forgets_released_devices() -> None:
    client = FakeClient()
    controller = _double(client, gated=True)
    released = copy.deepcopy(
        client.objects["/apis/resource.dralloc.dev/v1/namespaces/ns/resourceclaims/c2"]
    )
    released["status"] = {}
    released["metadata"]["resourceVersion"] = "31"
    controller.runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", released)
    assert not controller.since
    assert controller.holders[DEVICE] == {Key("ns", "c1")}


def test_the_gauge_counts_devices_held_twice_past_the_settle_window_while_leading() -> None:
    """A relist may show a new allocation a moment before the release it followed: not a
    double the alert should count. One that lasts is counted; one that ends is not."""
    from operators import metrics

    client = FakeClient()
    controller = _double(client, gated=True)
    assert set(controller.doubled) == {DEVICE}
    controller.running = True  # as run() sets it while this replica leads
    began = controller.doubled[DEVICE]
    controller._count(began + doubles.SETTLE_SECONDS / 2)
    assert metrics.DEVICES_HELD_TWICE._value.get() == 0
    controller._count(began + doubles.SETTLE_SECONDS)
    assert metrics.DEVICES_HELD_TWICE._value.get() == 1
    path = "/apis/resource.dralloc.dev/v1/namespaces/ns/resourceclaims/c2"
    held = copy.deepcopy(client.objects[path])
    released = copy.deepcopy(held)
    released["status"] = {}
    released["metadata"]["resourceVersion"] = "31"
    controller.runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", released)
    assert metrics.DEVICES_HELD_TWICE._value.get() == 0
    held["metadata"]["resourceVersion"] = "32"
    controller.runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", held)
    assert controller.lasting(controller.doubled[DEVICE] + doubles.SETTLE_SECONDS) == 1
    controller.running = False
    metrics.DEVICES_HELD_TWICE.set(0)


def _reported(client: FakeClient, controller: DoubleAllocationController) -> JsonDict:
    """The bare pod "second" as the watch shows it after its double was reported."""
    (report,) = [c for c in client.calls if _reports(c)]
    second = copy.deepcopy(client.objects["/api/v1/namespaces/ns/pods/second"])
    second["status"] = report.body["status"]
    second["metadata"]["resourceVersion"] = "35"
    put(controller.runtime, PODS, second)
    return second


def _release(controller: DoubleAllocationController, client: FakeClient, name: str) -> None:
    path = f"/apis/resource.dralloc.dev/v1/namespaces/ns/resourceclaims/{name}"
    released = copy.deepcopy(client.objects[path])
    released["status"] = {}
    released["metadata"]["resourceVersion"] = "40"
    controller.runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", released)


def _told(client: FakeClient) -> dict[str, Any]:
    (told,) = [
        c for c in client.writes("pods/second/status")
        if c.body["status"]["conditions"][0]["reason"] != doubles.REASON_DOUBLE
    ]  # fmt: skip
    return dict(told.body["status"]["conditions"][0])


async def test_a_reported_pod_is_told_when_its_double_ends() -> None:
    """The report on a bare pod lasts while the double does, and not for good: once the
    other side is freed, the pod's condition says it has its device again."""
    client = FakeClient()
    controller = _double(client, bound=True)
    await controller._repair(DEVICE)
    assert controller.reported == 1
    _reported(client, controller)
    await controller._tell_ended()
    assert not [c for c in client.writes("pods/second/status") if not _reports(c)], "told early"
    _release(controller, client, "c1")
    await controller._tell_ended()
    condition = _told(client)
    assert (condition["status"], condition["reason"]) == ("True", "Allocated")
    assert "no device of this pod is allocated to another claim" in condition["message"]
    assert not controller.reported_pods


async def test_a_reported_pod_whose_own_claim_was_freed_is_not_told_it_has_its_device() -> None:
    client = FakeClient()
    controller = _double(client, bound=True)
    await controller._repair(DEVICE)
    _reported(client, controller)
    _release(controller, client, "c2")  # the reported pod's own claim
    await controller._tell_ended()
    condition = _told(client)
    assert (condition["status"], condition["reason"]) == ("False", doubles.REASON_DOUBLE_ENDED)
    assert "resourceclaim c2 no longer holds devices for this pod" in condition["message"]


async def test_a_replica_that_starts_leading_tells_the_reports_another_left() -> None:
    client = FakeClient()
    reporter = _double(client, bound=True)
    await reporter._repair(DEVICE)
    _reported(client, reporter)
    # The next leader has a cache of the same cluster, and no memory of the report.
    successor = DoubleAllocationController(reporter.runtime)
    successor.seed_reported()
    assert successor.reported_pods == {Key("ns", "second")}
    _release(successor, client, "c1")
    await successor._tell_ended()
    assert _told(client)["reason"] == "Allocated"
