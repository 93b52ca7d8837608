"""allocgang: which pod events make a gang's other members decide again; a claim members share."""

from __future__ import annotations

from typing import Any

from operators.api.annotations import GANG_ANNOTATION, GANG_SIZE_ANNOTATION
from operators.cache.core import SCHEDULING_GATE, Pod, parse_pod
from operators.cache.informer import Key
from operators.controllers.allocation import AllocationController
from operators.controllers.allocgang import member_changed
from operators.kube import PODS, RESOURCE_CLAIMS

from .fakes import FakeClient, claim, one_device_cluster, pod, put
from .test_allocation_failures import allocation_results, sync


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
