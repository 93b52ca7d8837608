"""The Allocated condition on claims: per-claim messages, written only when they change."""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any, cast

from operators.api.models import ResourceClaim
from operators.api.podprotocol import DRALLOC, KUBERNETES
from operators.cache.informer import Key
from operators.controllers import claimstatus
from operators.controllers.allocation import AllocationController
from operators.controllers.allocation.decide import EXPLAIN_GRACE
from operators.controllers.claims import ClaimController
from operators.controllers.workqueue import work_once
from operators.kube import (
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    JsonDict,
)

from .fakes import (
    DRIVER,
    FakeClient,
    allocated,
    claim,
    node,
    one_device_cluster,
    pod,
    put,
    resource_slice,
    runtime,
)

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=5)


def with_conditions(*conditions: dict[str, Any]) -> ResourceClaim:
    raw = claim("ns", "c")
    raw["status"] = {"conditions": list(conditions)}
    return ResourceClaim.model_validate(raw)


def condition(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2025-06-01T00:00:00Z",
    }


def test_a_new_condition_is_added_next_to_the_others() -> None:
    ready = condition("example.com/Ready", "True", "Ok")
    written = claimstatus.updated_conditions(
        with_conditions(ready), "False", "Unschedulable", "0/1 nodes: 1 x", T0
    )
    assert written is not None
    assert written[0] == ready
    assert written[1]["type"] == "Allocated" and written[1]["status"] == "False"
    assert written[1]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_the_same_reason_is_not_written_again() -> None:
    current = with_conditions(condition("Allocated", "False", "Unschedulable", "0/1 nodes: 1 x"))
    assert (
        claimstatus.updated_conditions(current, "False", "Unschedulable", "0/1 nodes: 1 x", T1)
        is None
    )


def test_a_new_message_keeps_the_transition_time_a_new_status_moves_it() -> None:
    current = with_conditions(condition("Allocated", "False", "Unschedulable", "0/1 nodes: 1 x"))
    message_only = claimstatus.updated_conditions(current, "False", "Unschedulable", "other", T1)
    assert message_only is not None
    assert message_only[0]["lastTransitionTime"] == "2025-06-01T00:00:00Z"
    allocated = claimstatus.updated_conditions(current, "True", "Allocated", "on n1", T1)
    assert allocated is not None
    assert allocated[0]["lastTransitionTime"] == "2026-01-01T00:05:00Z"


def test_without_condition() -> None:
    ready = condition("example.com/Ready", "True", "Ok")
    assert claimstatus.without_condition(with_conditions(ready)) is None
    both = with_conditions(ready, condition("Allocated", "True", "Allocated"))
    assert claimstatus.without_condition(both) == [ready]


# --- written by the allocator loop ---------------------------------------------------------


def cluster(client: FakeClient) -> AllocationController:
    return AllocationController(one_device_cluster(client))


def add_pod(controller: AllocationController, name: str, claims: dict[str, JsonDict]) -> Key:
    for raw in claims.values():
        put(controller.runtime, RESOURCE_CLAIMS, raw)
    entries = [{"name": f"e{i}", "resourceClaimName": n} for i, n in enumerate(claims)]
    put(controller.runtime, PODS, pod("ns", name, entries))
    return Key("ns", name)


async def explain_now(controller: AllocationController, key: Key) -> None:
    controller.decider.explained_at.clear()  # skip the 10 s between explanations
    controller.decider.failing_since[key] = time.monotonic() - EXPLAIN_GRACE  # and the first wait
    controller.queue.add(key)
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        while controller.queue.due_in(key) == 0.0:
            await work_once(controller.queue, controller.sync)


def conditions_of(controller: AllocationController, name: str) -> list[tuple[str, str, str]]:
    found = controller.claims.get(Key("ns", name))
    assert found is not None and found.status is not None
    return [(c.status, c.reason, c.message) for c in found.status.conditions]


def condition_writes(client: FakeClient, name: str) -> int:
    path = RESOURCE_CLAIMS.path("ns", name) + "/status"
    return sum(1 for c in client.writes(path) if "conditions" in c.body["status"])


async def test_a_waiting_claim_says_why_once_and_is_cleared_when_allocated() -> None:
    client = FakeClient()
    controller = cluster(client)
    first = add_pod(controller, "p", {"c1": claim("ns", "c1")})
    await explain_now(controller, first)
    second = add_pod(controller, "q", {"c2": claim("ns", "c2")})
    await explain_now(controller, second)
    expected = ("False", "Unschedulable", '0/1 nodes: 1 no free device of class "gpu" (need 1)')
    assert conditions_of(controller, "c2") == [expected]
    await explain_now(controller, second)
    assert condition_writes(client, "c2") == 1, "an unchanged reason was written again"

    # The watch shows c1 allocated, then released: c2 gets the device, its condition True.
    allocated = client.objects[RESOURCE_CLAIMS.path("ns", "c1")]
    controller.runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", allocated)
    freed = claim("ns", "c1", rv="3000")
    controller.runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", freed)
    await explain_now(controller, second)
    assert conditions_of(controller, "c2") == [("True", "Allocated", "allocated on node n1")]


async def test_each_claim_of_a_pod_gets_its_own_reason() -> None:
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(
        controller, "p", {"small": claim("ns", "small"), "big": claim("ns", "big", count=2)}
    )
    await explain_now(controller, key)
    assert conditions_of(controller, "big") == [
        ("False", "Unschedulable", '0/1 nodes: 1 not enough devices of class "gpu" (need 2)')
    ]
    assert conditions_of(controller, "small") == [
        ("False", "Unschedulable", f"0/1 nodes: 1 {claimstatus.OTHER_CLAIMS}")
    ]


async def test_deallocation_drops_the_condition() -> None:
    client = FakeClient()
    controller = ClaimController(runtime(client))
    raw = allocated(claim("ns", "c1"), "gone", "uid-gone")
    raw["status"]["conditions"] = [condition("Allocated", "True", "Allocated", "on node n1")]
    put(controller.runtime, RESOURCE_CLAIMS, raw)
    controller.releaser.pod_deleted("uid-gone")
    await controller.releaser.sync(Key("ns", "c1"))
    [release, *_] = client.writes(RESOURCE_CLAIMS.path("ns", "c1") + "/status")
    assert release.body["status"]["allocation"] is None
    assert release.body["status"]["conditions"] is None


async def test_deallocation_drops_driver_device_status() -> None:
    client = FakeClient()
    controller = ClaimController(runtime(client))
    raw = allocated(claim("ns", "c1"), "gone", "uid-gone")
    raw["status"]["devices"] = [{"driver": DRIVER, "pool": "n1", "device": "dev-0"}]
    put(controller.runtime, RESOURCE_CLAIMS, raw)
    controller.releaser.pod_deleted("uid-gone")
    await controller.releaser.sync(Key("ns", "c1"))
    [release, *_] = client.writes(RESOURCE_CLAIMS.path("ns", "c1") + "/status")
    assert release.body["status"]["allocation"] is None
    assert release.body["status"]["devices"] is None


async def test_a_node_added_later_is_a_candidate_for_the_next_attempt() -> None:
    # The controller keeps its sorted node list between pods; a node event must reset it.
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(controller, "p", {"big": claim("ns", "big", count=2)})
    await explain_now(controller, key)
    assert conditions_of(controller, "big")[0][:2] == ("False", "Unschedulable")
    controller.runtime.cache[NODES].apply("ADDED", node("n2"))
    controller.runtime.cache[RESOURCE_SLICES].apply("ADDED", resource_slice("n2", devices=2))
    await explain_now(controller, key)
    assert conditions_of(controller, "big") == [("True", "Allocated", "allocated on node n2")]


async def test_the_allocation_write_lists_every_device_for_kubectl() -> None:
    # The CRD's Devices column reads status.allocatedDevices: the API server's printer shows
    # only the first value of results[*].device.
    client = FakeClient()
    controller = cluster(client)
    controller.runtime.cache[NODES].apply("ADDED", node("n2"))
    controller.runtime.cache[RESOURCE_SLICES].apply("ADDED", resource_slice("n2", devices=2))
    key = add_pod(controller, "p", {"big": claim("ns", "big", count=2)})
    await explain_now(controller, key)
    found = controller.claims.get(Key("ns", "big"))
    assert found is not None and found.status is not None
    assert found.status.allocated_devices == "dev-0,dev-1"
    (write, *_) = client.writes(RESOURCE_CLAIMS.path("ns", "big") + "/status")
    assert write.body["status"]["allocatedDevices"] == "dev-0,dev-1"
    assert write.body["status"]["reservedForNames"] == "p"


def test_summaries_follow_the_lists_a_patch_writes() -> None:
    # The CRD's Reserved For and Devices columns read one string each (the API server's
    # printer shows only the first value of a list), and its CEL rules refuse a string that
    # does not match its list: every status patch that writes a list rewrites its summary.
    reserved = [{"resource": "pods", "name": n, "uid": f"u-{n}"} for n in ("a", "b")]
    results = [{"device": "gpu-1"}, {"device": "gpu-0"}, {"device": "gpu-1", "shareID": "s"}]
    written = claimstatus.summarized(
        {"allocation": {"devices": {"results": results}}, "reservedFor": reserved}, DRALLOC
    )
    assert written["allocatedDevices"] == "gpu-1,gpu-0"
    assert written["reservedForNames"] == "a,b"
    assert claimstatus.summarized({"reservedFor": reserved[1:]}, DRALLOC) == {
        "reservedFor": reserved[1:],
        "reservedForNames": "b",
    }
    cleared = claimstatus.summarized({"reservedFor": None, "allocation": None}, DRALLOC)
    assert cleared == {
        "reservedFor": None,
        "allocation": None,
        "allocatedDevices": None,
        "reservedForNames": None,
    }
    assert claimstatus.summarized({"conditions": []}, DRALLOC) == {"conditions": []}
    # resource.k8s.io/v1 claims have no such fields (the server would drop them).
    assert claimstatus.summarized({"reservedFor": reserved}, KUBERNETES) == {
        "reservedFor": reserved
    }


def test_allocated_devices_names_each_device_once_in_result_order() -> None:
    results = [{"device": "gpu-3"}, {"device": "gpu-1"}, {"device": "gpu-3", "shareID": "x"}]
    assert claimstatus.allocated_devices({"devices": {"results": results}}) == "gpu-3,gpu-1"
    assert claimstatus.allocated_devices({}) == ""


def test_deallocation_clears_the_device_list_only_where_claims_have_it() -> None:
    assert claimstatus.deallocation(DRALLOC) == {
        "allocation": None,
        "devices": None,
        "allocatedDevices": None,
    }
    assert claimstatus.deallocation(KUBERNETES) == {"allocation": None, "devices": None}


async def test_deallocation_drops_the_device_list() -> None:
    client = FakeClient()
    controller = ClaimController(runtime(client))
    raw = allocated(claim("ns", "c1"), "gone", "uid-gone")
    raw["status"]["allocatedDevices"] = "dev-0"
    put(controller.runtime, RESOURCE_CLAIMS, raw)
    controller.releaser.pod_deleted("uid-gone")
    await controller.releaser.sync(Key("ns", "c1"))
    [release, *_] = client.writes(RESOURCE_CLAIMS.path("ns", "c1") + "/status")
    assert release.body["status"]["allocatedDevices"] is None
    assert release.body["status"]["reservedForNames"] is None


async def test_a_trimmed_reservation_rewrites_the_consumers_names() -> None:
    client = FakeClient()
    controller = ClaimController(runtime(client))
    raw = allocated(claim("ns", "c1"), "kept", "uid-p-kept")
    user = pod("ns", "kept", [{"name": "dev", "resourceClaimName": "c1"}], gated=False)
    put(controller.runtime, PODS, user)
    raw["status"]["reservedFor"].append({"resource": "pods", "name": "gone", "uid": "uid-gone"})
    raw["status"]["reservedForNames"] = "kept,gone"
    put(controller.runtime, RESOURCE_CLAIMS, raw)
    controller.releaser.pod_deleted("uid-gone")
    await controller.releaser.sync(Key("ns", "c1"))
    [trim, *_] = client.writes(RESOURCE_CLAIMS.path("ns", "c1") + "/status")
    assert [r["name"] for r in trim.body["status"]["reservedFor"]] == ["kept"]
    assert trim.body["status"]["reservedForNames"] == "kept"


def _crd_rules_pass(status: dict[str, Any]) -> list[str]:
    """The CRD's status rules (as the API server runs them) that refuse ``status``."""
    from operators.api.resourceclaim import ResourceClaimStatus
    from operators.cel.program import evaluate

    stored = {k: v for k, v in status.items() if v is not None}  # merge-patch nulls drop
    extra = ResourceClaimStatus.model_config["json_schema_extra"]
    assert isinstance(extra, dict)
    rules = cast(list[dict[str, str]], extra["x-kubernetes-validations"])  # the CRD's JSON
    return [
        r["message"]
        for r in rules
        if "oldSelf" not in r["rule"] and evaluate(r["rule"], {"self": stored}) is not True
    ]


def test_the_summaries_of_a_claim_without_requests_pass_the_crd_rules() -> None:
    # A claim with no requests is allocated with no results. Its summary used to be
    # allocatedDevices: "", which the rule reads as one device named "" that the
    # allocation lacks: the API server refused the write, and the pod waited forever.
    written = claimstatus.summarized(
        {
            "allocation": {"devices": {"results": []}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
        },
        DRALLOC,
    )
    assert _crd_rules_pass(written) == []
