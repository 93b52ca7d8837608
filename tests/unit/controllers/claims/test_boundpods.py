"""The claim controller and a pod bound by someone else (kube-scheduler, a user's nodeName):
its own allocated claims are reserved for it, once, on the version read; a claim that is not
allocated, or a pod that is not bound yet, gets no reservation. (The pod's own claims only:
see test_trust.py for claims of other pods.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from operators.cache.core import CLAIM_STATUSES_ANNOTATION
from operators.cache.informer import Key
from operators.controllers.claims import ClaimController
from operators.kube import PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, JsonDict

from ..fakes import FakeClient, allocated, claim, one_device_cluster, pod, put, template


class RecordingClient(FakeClient):
    """Also records each merge patch's resourceVersion precondition, by path."""

    def __init__(self) -> None:
        super().__init__()
        self.preconditions: list[tuple[str, str | None]] = []

    async def merge_patch(self, resource: Any, name: str, patch: JsonDict, **kwargs: Any) -> Any:
        path = resource.path(kwargs.get("namespace"), name)
        self.preconditions.append((path, kwargs.get("resource_version")))
        return await super().merge_patch(resource, name, patch, **kwargs)


def claim_controller(client: FakeClient) -> ClaimController:
    runtime = one_device_cluster(client)
    runtime.cache[RESOURCE_CLAIM_TEMPLATES].apply("ADDED", template("ns", "one"))
    return ClaimController(runtime)


def bound_pod(name: str, claims: list[dict[str, str]], *, node: str = "n1") -> JsonDict:
    raw = pod("ns", name, claims, gated=not node)
    if node:
        raw["spec"]["nodeName"] = node
    return raw


def reservations(client: FakeClient, claim_name: str) -> list[list[str]]:
    path = RESOURCE_CLAIMS.path("ns", claim_name) + "/status"
    return [[r["name"] for r in call.body["status"]["reservedFor"]] for call in client.writes(path)]


async def test_a_bound_pod_is_added_to_its_claims_reservation_on_the_version_read() -> None:
    client = RecordingClient()
    controller = claim_controller(client)
    put(controller.runtime, RESOURCE_CLAIMS, allocated(claim("ns", "c", rv="42"), "a", "uid-a"))
    put(controller.runtime, PODS, bound_pod("p", [{"name": "dev", "resourceClaimName": "c"}]))
    await controller.sync(("pod", Key("ns", "p")))
    assert reservations(client, "c") == [["a", "p"]]
    assert (RESOURCE_CLAIMS.path("ns", "c"), "42") in client.preconditions
    (write,) = client.writes(RESOURCE_CLAIMS.path("ns", "c") + "/status")
    assert write.body["status"]["reservedFor"][-1] == {
        "resource": "pods",
        "name": "p",
        "uid": "uid-p-p",
    }


async def test_a_bound_pod_already_reserved_is_not_reserved_again() -> None:
    client = FakeClient()
    controller = claim_controller(client)
    put(controller.runtime, RESOURCE_CLAIMS, allocated(claim("ns", "c"), "p", "uid-p-p"))
    put(controller.runtime, PODS, bound_pod("p", [{"name": "dev", "resourceClaimName": "c"}]))
    await controller.sync(("pod", Key("ns", "p")))
    assert reservations(client, "c") == []


WAITING = {
    "type": "Allocated",
    "status": "False",
    "reason": "AllocationFailed",
    "message": "0/1 nodes",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}


@pytest.mark.parametrize("status", [None, {"conditions": [WAITING]}])
async def test_an_unallocated_claim_is_not_reserved_for_a_bound_pod(
    status: JsonDict | None,
) -> None:
    """Reserving a claim without an allocation would give the pod nothing and block the
    allocator's own write (its precondition); the allocator allocates and reserves it."""
    client = FakeClient()
    controller = claim_controller(client)
    raw = claim("ns", "c")
    if status is not None:
        raw["status"] = status
    put(controller.runtime, RESOURCE_CLAIMS, raw)
    put(controller.runtime, PODS, bound_pod("p", [{"name": "dev", "resourceClaimName": "c"}]))
    await controller.sync(("pod", Key("ns", "p")))
    assert client.writes(RESOURCE_CLAIMS.path("ns", "c")) == []


async def test_a_pod_not_bound_yet_gets_no_reservation_from_the_claim_controller() -> None:
    client = FakeClient()
    controller = claim_controller(client)
    put(controller.runtime, RESOURCE_CLAIMS, allocated(claim("ns", "c"), "a", "uid-a"))
    put(
        controller.runtime,
        PODS,
        bound_pod("p", [{"name": "dev", "resourceClaimName": "c"}], node=""),
    )
    await controller.sync(("pod", Key("ns", "p")))
    assert reservations(client, "c") == []


async def test_a_bound_pods_generated_claim_is_reserved_for_it() -> None:
    client = FakeClient()
    controller = claim_controller(client)
    raw = allocated(claim("ns", "p-dev-abcde"), "a", "uid-a")
    raw["metadata"]["annotations"] = {"resource.dralloc.dev/pod-claim-name": "dev"}
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p-p", "controller": True}
    ]
    put(controller.runtime, RESOURCE_CLAIMS, raw)
    raw_pod = bound_pod("p", [{"name": "dev", "resourceClaimTemplateName": "one"}])
    statuses = [{"name": "dev", "resourceClaimName": "p-dev-abcde"}]
    raw_pod["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION] = json.dumps(statuses)
    put(controller.runtime, PODS, raw_pod)
    await controller.sync(("pod", Key("ns", "p")))
    assert reservations(client, "p-dev-abcde") == [["a", "p"]]
