"""Devices allocated to two claims at once: which side is undone, and how."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from operators.cache.informer import Key
from operators.controllers import doubles
from operators.controllers.doubles import DoubleAllocationController, Holder, choose_keeper
from operators.kube import PODS, RESOURCE_CLAIMS

from .fakes import FakeClient, allocated, claim, one_device_cluster, pod, put


def holder(name: str, *, bound: bool = False, at: str = "", version: int = 1) -> Holder:
    return Holder(Key("ns", name), bound, at, version)


def test_the_bound_or_earlier_allocation_keeps_the_device() -> None:
    keeper, undo = choose_keeper(
        [holder("late", at="2026-01-01T00:00:02Z"), holder("early", at="2026-01-01T00:00:01Z")]
    )
    assert (keeper.key.name, [h.key.name for h in undo]) == ("early", ["late"])
    keeper, undo = choose_keeper([holder("early", at="1"), holder("bound", bound=True, at="2")])
    assert keeper.key.name == "bound"
    # Same second: the resourceVersion decides, so every replica picks the same one.
    keeper, _ = choose_keeper([holder("b", at="1", version=9), holder("a", at="1", version=7)])
    assert keeper.key.name == "a"


def _double(client: FakeClient, *, second_bound: bool, owned: bool) -> Any:
    runtime = one_device_cluster(client)
    controller = DoubleAllocationController(runtime)
    first = pod("ns", "first", [{"name": "d", "resourceClaimName": "c1"}], gated=False)
    first["spec"]["nodeName"] = "n1"
    second = pod("ns", "second", [{"name": "d", "resourceClaimName": "c2"}], gated=False)
    if second_bound:
        second["spec"]["nodeName"] = "n1"
    if owned:
        second["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "rs",
                "uid": "u",
                "controller": True,
            }
        ]
    for raw in (first, second):
        put(runtime, PODS, raw)
    c1 = allocated(claim("ns", "c1", rv="20"), "first", "uid-p-first")
    c1["status"]["allocation"]["allocationTimestamp"] = "2026-12-03T10:00:00Z"
    c2 = allocated(claim("ns", "c2", rv="30"), "second", "uid-p-second")
    c2["status"]["allocation"]["allocationTimestamp"] = "2026-12-03T10:00:01Z"
    put(runtime, RESOURCE_CLAIMS, c1)
    put(runtime, RESOURCE_CLAIMS, c2)
    return controller


@pytest.mark.asyncio
async def test_an_unbound_double_is_deallocated_and_reported() -> None:
    client = FakeClient()
    controller = _double(client, second_bound=False, owned=False)
    assert controller.since  # found at once
    await controller._repair(("gpu.example.com", "n1", "dev-0"))
    (write,) = client.writes("resourceclaims/c2/status")
    assert write.body["status"] == {"allocation": None, "reservedFor": None, "devices": None}
    assert not client.writes("resourceclaims/c1")
    messages = {e["involved"]["metadata"]["name"]: e["message"] for e in client.events}
    assert set(messages) == {"c2", "second"}
    assert "also allocated to resourceclaim ns/c1" in messages["c2"]
    assert all(e["reason"] == doubles.REASON_DOUBLE for e in client.events)
    assert controller.repaired == 1


@pytest.mark.asyncio
async def test_a_bound_double_evicts_only_pods_a_controller_recreates() -> None:
    client = FakeClient()
    controller = _double(client, second_bound=True, owned=True)
    await controller._repair(("gpu.example.com", "n1", "dev-0"))
    assert [c.method for c in client.writes("pods/second")] == ["PATCH", "DELETE"]
    assert not client.writes("resourceclaims")

    bare = FakeClient()
    controller = _double(bare, second_bound=True, owned=False)
    await controller._repair(("gpu.example.com", "n1", "dev-0"))
    await controller._repair(("gpu.example.com", "n1", "dev-0"))
    assert not bare.writes("pods/") and not bare.writes("resourceclaims")
    assert controller.reported == 1  # once, not every period
    assert "no controller owns" in bare.events[0]["message"]


def test_the_index_forgets_released_devices() -> None:
    client = FakeClient()
    controller = _double(client, second_bound=False, owned=False)
    released = copy.deepcopy(
        client.objects["/apis/resource.dralloc.dev/v1/namespaces/ns/resourceclaims/c2"]
    )
    released["status"] = {}
    released["metadata"]["resourceVersion"] = "31"
    controller.runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", released)
    assert not controller.since
    assert controller.holders[("gpu.example.com", "n1", "dev-0")] == {Key("ns", "c1")}
