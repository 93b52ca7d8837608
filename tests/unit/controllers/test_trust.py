"""Truth lives in claims (docs/design.md "Trust"): a pod annotation is never proof of allocation.

- A bound pod that carries a devices annotation its claims do not back is still allocated
  (its claims are what counts), and a bound pod whose claims are allocated and reserved for it
  is left alone whatever its annotation says.
- The claim controller rewrites a bound pod's devices annotation from its claims, or removes
  it, with a Warning Event; it writes a missing one without.
- The claim controller never reserves a claim for a pod that merely names it in its
  claim-statuses annotation: a generated claim is reserved only for the pod it was made for
  (the "claim hijack" of issue 13), and a named claim is looked up in the pod's namespace.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from operators.api.models import ResourceClaim
from operators.cache.core import (
    CLAIM_STATUSES_ANNOTATION,
    DEVICES_ANNOTATION,
    PodResourceClaim,
    parse_pod,
)
from operators.cache.informer import Key
from operators.controllers import claimrules
from operators.controllers.allocation import AllocationController
from operators.controllers.claims import REASON_DEVICES_CORRECTED, ClaimController
from operators.controllers.workqueue import work_once
from operators.kube import PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, JsonDict

from .fakes import DRIVER, FakeClient, allocated, claim, one_device_cluster, pod, put, template

FORGED = json.dumps(
    [
        {
            "name": "dev",
            "resourceClaimName": "c",
            "devices": [{"request": "dev", "driver": DRIVER, "pool": "n1", "device": "dev-7"}],
        }
    ]
)
TRUE_DEVICES = json.dumps(
    [
        {
            "name": "dev",
            "resourceClaimName": "c",
            "devices": [{"request": "dev", "driver": DRIVER, "pool": "n1", "device": "dev-0"}],
            "config": [],
        }
    ],
    separators=(",", ":"),
)
NAMED = [{"name": "dev", "resourceClaimName": "c"}]


def bound_pod(
    name: str, claims: list[dict[str, str]], annotations: dict[str, str] | None = None
) -> JsonDict:
    raw = pod("ns", name, claims, gated=False)
    raw["spec"]["nodeName"] = "n1"
    raw["metadata"]["annotations"].update(annotations or {})
    return raw


def pod_annotation_writes(client: FakeClient, name: str) -> list[dict[str, Any]]:
    return [
        dict((call.body.get("metadata") or {}).get("annotations") or {})
        for call in client.writes(PODS.path("ns", name))
        if not call.path.endswith("/status")
    ]


def corrections(client: FakeClient) -> list[str]:
    return [e["message"] for e in client.events if e["reason"] == REASON_DEVICES_CORRECTED]


# --- the allocation controller ---------------------------------------------------------


async def test_a_forged_devices_annotation_does_not_stop_allocation() -> None:
    client = FakeClient()
    runtime = one_device_cluster(client)
    allocation = AllocationController(runtime)
    put(runtime, RESOURCE_CLAIMS, claim("ns", "c"))
    put(runtime, PODS, bound_pod("p", NAMED, {DEVICES_ANNOTATION: FORGED}))
    assert allocation.queue.pending() == 1, "a bound pod with a devices annotation is skipped"
    async with asyncio.TaskGroup() as writers:
        allocation.commits.writers = writers
        assert await asyncio.wait_for(work_once(allocation.queue, allocation.sync), 5)
    [status_write] = [
        c for c in client.writes(RESOURCE_CLAIMS.path("ns", "c")) if "status" in c.path
    ]
    assert status_write.body["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p", "uid": "uid-p-p"}
    ]
    [annotations] = pod_annotation_writes(client, "p")
    assert annotations[DEVICES_ANNOTATION] == TRUE_DEVICES
    [message] = corrections(client)
    assert "rewritten from them" in message


async def test_a_bound_pod_whose_claims_are_reserved_for_it_is_not_allocated_again() -> None:
    client = FakeClient()
    runtime = one_device_cluster(client)
    allocation = AllocationController(runtime)
    put(runtime, RESOURCE_CLAIMS, allocated(claim("ns", "c"), "p", "uid-p-p"))
    put(runtime, PODS, bound_pod("p", NAMED))
    async with asyncio.TaskGroup() as writers:
        allocation.commits.writers = writers
        while allocation.queue.pending():
            await asyncio.wait_for(work_once(allocation.queue, allocation.sync), 5)
    assert client.writes("/") == []


# --- the claim controller: the devices annotation follows the claims --------------------


def claim_controller(client: FakeClient) -> ClaimController:
    runtime = one_device_cluster(client)
    runtime.cache[RESOURCE_CLAIM_TEMPLATES].apply("ADDED", template("ns", "one"))
    return ClaimController(runtime)


async def sync_pod(controller: ClaimController, name: str) -> None:
    await controller.sync(("pod", Key("ns", name)))


async def test_a_forged_annotation_is_rewritten_from_the_claims() -> None:
    client = FakeClient()
    controller = claim_controller(client)
    put(controller.runtime, RESOURCE_CLAIMS, allocated(claim("ns", "c"), "p", "uid-p-p"))
    put(controller.runtime, PODS, bound_pod("p", NAMED, {DEVICES_ANNOTATION: FORGED}))
    await sync_pod(controller, "p")
    [annotations] = pod_annotation_writes(client, "p")
    assert annotations == {DEVICES_ANNOTATION: TRUE_DEVICES}
    [message] = corrections(client)
    assert "did not match the pod's ResourceClaims; rewritten from them" in message


async def test_a_forged_annotation_without_an_allocation_is_removed() -> None:
    client = FakeClient()
    controller = claim_controller(client)
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", "c"))
    put(controller.runtime, PODS, bound_pod("p", NAMED, {DEVICES_ANNOTATION: FORGED}))
    await sync_pod(controller, "p")
    [annotations] = pod_annotation_writes(client, "p")
    assert annotations == {DEVICES_ANNOTATION: None}
    [message] = corrections(client)
    assert "removed" in message and "claim entry dev: claim c is not allocated" in message


async def test_an_annotation_on_a_pod_without_claims_is_removed() -> None:
    client = FakeClient()
    controller = claim_controller(client)
    raw = bound_pod("p", [], {DEVICES_ANNOTATION: FORGED})
    del raw["metadata"]["annotations"]["resource.dralloc.dev/claims"]
    put(controller.runtime, PODS, raw)
    assert controller.queue.pending() == 1, "a pod without claims is not looked at"
    await asyncio.wait_for(work_once(controller.queue, controller.sync), 5)
    assert pod_annotation_writes(client, "p") == [{DEVICES_ANNOTATION: None}]


async def test_a_true_annotation_is_left_alone_and_a_missing_one_written_quietly() -> None:
    client = FakeClient()
    controller = claim_controller(client)
    put(controller.runtime, RESOURCE_CLAIMS, allocated(claim("ns", "c"), "p", "uid-p-p"))
    put(controller.runtime, PODS, bound_pod("p", NAMED, {DEVICES_ANNOTATION: TRUE_DEVICES}))
    await sync_pod(controller, "p")
    assert pod_annotation_writes(client, "p") == []
    put(controller.runtime, RESOURCE_CLAIMS, allocated(claim("ns", "d"), "q", "uid-p-q"))
    put(controller.runtime, PODS, bound_pod("q", [{"name": "dev", "resourceClaimName": "d"}]))
    await sync_pod(controller, "q")
    [annotations] = pod_annotation_writes(client, "q")
    assert json.loads(annotations[DEVICES_ANNOTATION])[0]["resourceClaimName"] == "d"
    assert corrections(client) == []


# --- the claim controller: no claim hijack ------------------------------------------------


def victim_claim() -> JsonDict:
    """The claim generated for pod "victim" from template "one", allocated and reserved."""
    raw = allocated(claim("ns", "victim-dev-abcde"), "victim", "uid-p-victim")
    raw["metadata"]["annotations"] = {"resource.dralloc.dev/pod-claim-name": "dev"}
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "victim", "uid": "uid-p-victim",
         "controller": True, "blockOwnerDeletion": True},
    ]  # fmt: skip
    return raw


async def test_a_pod_naming_another_pods_generated_claim_is_not_reserved_for_it() -> None:
    client = FakeClient()
    controller = claim_controller(client)
    put(controller.runtime, RESOURCE_CLAIMS, victim_claim())
    statuses = json.dumps([{"name": "dev", "resourceClaimName": "victim-dev-abcde"}])
    attacker = bound_pod(
        "mallory",
        [{"name": "dev", "resourceClaimTemplateName": "one"}],
        {CLAIM_STATUSES_ANNOTATION: statuses, DEVICES_ANNOTATION: FORGED},
    )
    put(controller.runtime, PODS, attacker)
    await sync_pod(controller, "mallory")
    assert client.writes(RESOURCE_CLAIMS.path("ns", "victim-dev-abcde")) == []
    # The forged devices annotation goes too: the pod has no claim of its own.
    devices_writes = [
        w for w in pod_annotation_writes(client, "mallory") if DEVICES_ANNOTATION in w
    ]
    assert devices_writes == [{DEVICES_ANNOTATION: None}]
    messages = [e["message"] for e in client.events]
    assert any("was not created for pod ns/mallory (pod is not owner)" in m for m in messages)
    assert any("claim entry dev: has no claim of its own" in m for m in messages)


async def test_a_bound_pod_still_gets_its_own_claims_reserved() -> None:
    client = FakeClient()
    controller = claim_controller(client)
    raw = allocated(claim("ns", "shared"), "first", "uid-p-first")
    put(controller.runtime, RESOURCE_CLAIMS, raw)
    put(
        controller.runtime,
        PODS,
        bound_pod("second", [{"name": "dev", "resourceClaimName": "shared"}]),
    )
    await sync_pod(controller, "second")
    [write] = [c for c in client.writes(RESOURCE_CLAIMS.path("ns", "shared"))]
    assert [r["name"] for r in write.body["status"]["reservedFor"]] == ["first", "second"]


async def test_a_claim_of_the_same_name_in_another_namespace_is_not_the_pods() -> None:
    client = FakeClient()
    controller = claim_controller(client)
    elsewhere = allocated(claim("other", "shared"), "first", "uid-p-first")
    put(controller.runtime, RESOURCE_CLAIMS, elsewhere)
    put(controller.runtime, PODS, bound_pod("p", [{"name": "dev", "resourceClaimName": "shared"}]))
    await sync_pod(controller, "p")
    assert client.writes(RESOURCE_CLAIMS.path("other", "shared")) == []


# --- the pure rules ----------------------------------------------------------------------


def model(raw: JsonDict) -> ResourceClaim:
    return ResourceClaim.model_validate(raw)


def test_own_claim_ignores_a_recorded_name_the_pod_does_not_own() -> None:
    statuses = json.dumps([{"name": "dev", "resourceClaimName": "victim-dev-abcde"}])
    attacker = parse_pod(
        bound_pod("mallory", [{"name": "dev", "resourceClaimTemplateName": "one"}],
                  {CLAIM_STATUSES_ANNOTATION: statuses})
    )  # fmt: skip
    victim = model(victim_claim())
    entry = PodResourceClaim(name="dev", resource_claim_template_name="one")
    lookup = {"victim-dev-abcde": victim}.get
    assert claimrules.own_claim(attacker, entry, lookup, []) is None
    # Its own generated claim is found through its owner even when the record is wrong.
    own = victim_claim()
    own["metadata"]["name"] = "mallory-dev-xyz12"
    own["metadata"]["ownerReferences"][0].update(name="mallory", uid="uid-p-mallory")
    mine = model(own)
    lookup = {"victim-dev-abcde": victim, "mallory-dev-xyz12": mine}.get
    assert claimrules.own_claim(attacker, entry, lookup, [mine]) is mine


def test_devices_annotation_needs_every_claim_reserved_for_the_pod() -> None:
    p = parse_pod(bound_pod("p", NAMED))
    entry = p.claims[0]
    reserved = model(allocated(claim("ns", "c"), "p", "uid-p-p"))
    assert claimrules.devices_annotation(p, [(entry, reserved)]) == TRUE_DEVICES
    someone_elses = model(allocated(claim("ns", "c"), "q", "uid-p-q"))
    assert claimrules.devices_annotation(p, [(entry, someone_elses)]) is None
    assert claimrules.claim_problem(someone_elses, p.uid) == "claim c is not reserved for the pod"
    assert claimrules.devices_annotation(p, [(entry, model(claim("ns", "c")))]) is None
    assert claimrules.devices_annotation(p, [(entry, None)]) is None
    assert claimrules.devices_annotation(p, []) is None
