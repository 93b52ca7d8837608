"""allocgang: which pod events make a gang's other members decide again; a claim members share."""

from __future__ import annotations

from typing import Any

from operators.api.annotations import (
    GANG_ANNOTATION,
    GANG_SIZE_ANNOTATION,
    GANG_TOPOLOGY_ANNOTATION,
)
from operators.cache.core import SCHEDULING_GATE, Pod, parse_pod
from operators.cache.informer import Key
from operators.controllers.allocation import AllocationController
from operators.controllers.allocgang import member_changed
from operators.kube import PODS, RESOURCE_CLAIMS, RESOURCE_SLICES

from .fakes import DRIVER, FakeClient, claim, one_device_cluster, pod, put, resource_slice
from .test_allocation_failures import allocation_results, messages, sync


def member(gated: bool, phase: str = "Pending", gang: str = "train", **meta: Any) -> Pod:
    raw: dict[str, Any] = {
        "metadata": {
            "namespace": "ns",
            "name": "w0",
            "uid": "uid-w0",
            "resourceVersion": "1",
            "annotations": {GANG_ANNOTATION: gang, GANG_SIZE_ANNOTATION: "2"},
            **meta,
        },
        "spec": {"schedulingGates": [{"name": SCHEDULING_GATE}] if gated else []},
        "status": {"phase": phase},
    }
    return parse_pod(raw)


def test_a_released_member_that_runs_on_does_not_wake_its_gang() -> None:
    # Each status update of a running member used to requeue every other member: a gang of
    # N pods cost N queue entries (and, for members still waiting, a gang search) per event.
    assert not member_changed(member(False, "Pending"), member(False, "Running"))


def test_leaving_or_being_released_wakes_the_gang() -> None:
    assert member_changed(member(True), member(False))  # released
    assert member_changed(member(True), None)  # deleted
    assert member_changed(member(False, "Running"), None)
    assert member_changed(member(True), member(True, gang="other"))  # moved
    assert member_changed(member(False, "Running"), member(False, "Succeeded"))  # finished
    assert not member_changed(member(True), member(True))  # a gated member's own update


# --- a claim the members share ------------------------------------------------------------


async def test_members_sharing_a_claim_allocate_it_once_and_both_reserve_it() -> None:
    """Two gang members name the same ResourceClaim. Its allocation is written once; the
    second member only adds itself to reservedFor (a second allocation write would replace
    the first member's devices, or conflict on the server)."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", "shared"))
    for name in ("w0", "w1"):
        raw = pod("ns", name, [{"name": "dev", "resourceClaimName": "shared"}])
        raw["metadata"]["annotations"] |= {GANG_ANNOTATION: "train", GANG_SIZE_ANNOTATION: "2"}
        put(controller.runtime, PODS, raw)
    await sync(controller, Key("ns", "w0"))
    assert [path for path, _ in allocation_results(client)] == [
        RESOURCE_CLAIMS.path("ns", "shared") + "/status"
    ]
    stored = client.objects[RESOURCE_CLAIMS.path("ns", "shared")]
    assert sorted(r["name"] for r in stored["status"]["reservedFor"]) == ["w0", "w1"]
    for name in ("w0", "w1"):
        written = client.objects[PODS.path("ns", name)]
        assert not written["spec"].get("schedulingGates"), f"{name} still gated"


# --- topology by device attribute ---------------------------------------------------------


def gang_pod(name: str, claim_name: str, topology: str) -> dict[str, Any]:
    raw = pod("ns", name, [{"name": "dev", "resourceClaimName": claim_name}])
    raw["metadata"]["annotations"] |= {
        GANG_ANNOTATION: "train",
        GANG_SIZE_ANNOTATION: "2",
        GANG_TOPOLOGY_ANNOTATION: topology,
    }
    return raw


async def test_a_gang_with_an_attribute_topology_gets_devices_of_one_value() -> None:
    """n1's devices: dev-0 in NVLink domain A, dev-1 and dev-2 in B, dev-3 in none. Each
    member alone would take dev-0 and then dev-1 (first fit, two domains); the gang gets
    two devices of B."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    domains = ["A", "B", "B", None]
    raw_slice = resource_slice("n1", devices=4)
    for device, domain in zip(raw_slice["spec"]["devices"], domains, strict=True):
        if domain is not None:
            device["attributes"] = {"nvlinkDomain": {"string": domain}}
    raw_slice["metadata"]["resourceVersion"] = "2"
    put(controller.runtime, RESOURCE_SLICES, raw_slice)
    for name in ("w0", "w1"):
        put(controller.runtime, RESOURCE_CLAIMS, claim("ns", f"c-{name}"))
        put(
            controller.runtime,
            PODS,
            gang_pod(name, f"c-{name}", f"attribute:{DRIVER}/nvlinkDomain"),
        )
    await sync(controller, Key("ns", "w0"))
    written = sorted(r["device"] for _, results in allocation_results(client) for r in results)
    assert written == ["dev-1", "dev-2"]


async def test_a_malformed_gang_topology_is_told_on_the_pod() -> None:
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", "c-w0"))
    put(controller.runtime, PODS, gang_pod("w0", "c-w0", "attribute:nvlinkDomain"))
    await sync(controller, Key("ns", "w0"))
    assert not allocation_results(client)
    [message] = {m for m in messages(client, "w0")}
    assert GANG_TOPOLOGY_ANNOTATION in message
    assert "is not a fully qualified device attribute name" in message
