"""Releasing claims: a finalizer write answered 404 hides the claim only when the answer names
the claim; a deleted pod's claims are the garbage collector's to delete, ours after a grace."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from operators.cache.informer import Key
from operators.controllers.claims import ClaimController, release
from operators.controllers.workqueue import work_once
from operators.kube import PODS, RESOURCE_CLAIMS, ApiError, JsonDict, NotFound, Resource

from ..fakes import FakeClient, allocated, claim, put, runtime

ROUTE_404 = NotFound(404, "NotFound", "the server could not find the requested resource")


def test_a_404_names_the_object_only_when_the_status_details_do() -> None:
    named = ApiError.from_status(
        404,
        {"reason": "NotFound", "details": {"name": "c1", "kind": "resourceclaims"}},
    )
    assert isinstance(named, NotFound) and named.name == "c1"
    route = ApiError.from_status(404, {"reason": "NotFound", "message": "could not find"})
    assert isinstance(route, NotFound) and route.name == ""


@pytest.mark.parametrize("answer", ["route", "object"])
async def test_a_finalizer_patch_refused_by_the_route_hides_nothing(answer: str) -> None:
    client = FakeClient()
    controller = ClaimController(runtime(client))
    raw = allocated(claim("ns", "c1"), "gone", "uid-gone")
    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    put(controller.runtime, RESOURCE_CLAIMS, raw)
    controller.releaser.pod_deleted("uid-gone")
    real = client.merge_patch
    failing = True

    async def refusing(resource: Resource, name: str, patch: JsonDict, **kw: Any) -> JsonDict:
        if failing and "finalizers" in (patch.get("metadata") or {}):
            if answer == "route":  # e.g. a kind briefly not served by one API server
                raise ROUTE_404
            raise NotFound(404, "NotFound", f"resourceclaims {name!r} not found", name=name)
        return await real(resource, name, patch, **kw)

    # A stand-in for this one client's method (its signature is still checked).
    client.merge_patch = refusing  # type: ignore[method-assign]
    key = Key("ns", "c1")
    await controller.releaser.sync(key)
    assert controller.runtime.cache[RESOURCE_CLAIMS].get(key) is not None
    if answer == "object":
        assert controller.claims.get(key) is None  # gone: hidden until the watch says so
        return
    assert controller.claims.get(key) is not None
    failing = False
    later = copy.deepcopy(raw)
    later["metadata"]["resourceVersion"] = "99"
    controller.runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", later)
    before = len(client.writes(RESOURCE_CLAIMS.path("ns", "c1")))
    await controller.releaser.sync(key)
    assert len(client.writes(RESOURCE_CLAIMS.path("ns", "c1"))) == before + 1  # retried


async def test_kube_schedulers_extended_resource_claim_goes_with_its_pod() -> None:
    """A pod asking for a DRA extended resource names no claim: kube-scheduler made one for
    it (owned by the pod). Seen still in use when the claim changed, the pod's deletion must
    bring the claim back, else it stays allocated for nobody (kcm's claim controller, which
    would release it, is off where dralloc's runs)."""
    client = FakeClient()
    controller = ClaimController(runtime(client, api_group="resource.k8s.io"))
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x", "namespace": "ns", "uid": "uid-x", "resourceVersion": "3"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
    }
    put(controller.runtime, PODS, pod)
    raw = allocated(claim("ns", "x-extended-resources-abcde"), "x", "uid-x")
    raw["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    raw["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "uid-x", "controller": True}
    ]
    put(controller.runtime, RESOURCE_CLAIMS, raw)
    key = Key("ns", "x-extended-resources-abcde")
    await controller.releaser.sync(key)  # its pod runs: nothing to do
    assert client.writes(RESOURCE_CLAIMS.path("ns", key.name)) == []
    while controller.queue.pending():
        await work_once(controller.queue, controller.sync)
    controller.runtime.cache[PODS].apply("DELETED", pod)
    assert controller.queue.pending() == 1
    await work_once(controller.queue, controller.sync)
    # The pod owns it: the garbage collector deletes it. Until the grace is over nothing is
    # written, and the claim is looked at again when it is.
    assert client.writes(RESOURCE_CLAIMS.path("ns", key.name)) == []
    due = controller.queue.due_in(("claim", key))
    assert due is not None and 0 < due <= release.GC_GRACE, due
    # The collector came: only our finalizer goes, and with it the claim.
    deleting = copy.deepcopy(raw)
    deleting["metadata"].update(deletionTimestamp="2026-12-07T10:00:00Z", resourceVersion="9")
    controller.runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", deleting)
    await controller.releaser.sync(key)
    writes = client.writes(RESOURCE_CLAIMS.path("ns", key.name))
    assert [(c.method, c.body["metadata"]) for c in writes] == [
        ("PATCH", {"finalizers": None, "resourceVersion": "9"})
    ], writes


async def test_a_deleted_pods_claim_the_collector_leaves_is_deleted_after_the_grace() -> None:
    """No garbage collector (or one far behind): once the grace is over the controller
    deletes the claim itself, as it did before it left that to the collector."""
    client = FakeClient()
    controller = ClaimController(runtime(client))
    raw = allocated(claim("ns", "p-dev-abcde"), "p", "uid-p")
    raw["metadata"]["finalizers"] = ["resource.dralloc.dev/delete-protection"]
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p", "controller": True}
    ]
    put(controller.runtime, RESOURCE_CLAIMS, raw)
    key = Key("ns", "p-dev-abcde")
    controller.releaser.pod_deleted("uid-p")
    assert await controller.releaser.sync(key) is not None
    assert client.writes(RESOURCE_CLAIMS.path("ns", key.name)) == []
    controller.releaser.deleted_pod_uids["uid-p"] -= release.GC_GRACE  # the grace is over
    assert await controller.releaser.sync(key) is None
    writes = client.writes(RESOURCE_CLAIMS.path("ns", key.name))
    assert [call.method for call in writes][:1] == ["DELETE"], writes


@pytest.mark.parametrize("api_group", ["resource.k8s.io", "resource.dralloc.dev"])
async def test_a_deleted_generated_claim_in_tree_is_told_not_made_again(api_group: str) -> None:
    """The pod's status names its generated claim, which was deleted. In-tree that name is
    the pod's for good (kcm makes no other; renaming the entry is refused): the pod is told,
    and nothing is created. In CRD mode the annotation may name a new claim: one is made."""
    from operators.kube import NAMESPACES, RESOURCE_CLAIM_TEMPLATES

    from ..fakes import namespace, pod, template

    client = FakeClient()
    controller = ClaimController(runtime(client, api_group=api_group, allocation_controller=False))
    cache = controller.runtime.cache
    cache[NAMESPACES].apply("ADDED", namespace("ns"))
    cache[RESOURCE_CLAIM_TEMPLATES].apply("ADDED", template("ns", "one"))
    raw = pod("ns", "p", [{"name": "dev", "resourceClaimTemplateName": "one"}])
    if api_group == "resource.k8s.io":
        raw["metadata"]["annotations"] = {}
        raw["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimTemplateName": "one"}]
        raw["status"] = {
            "resourceClaimStatuses": [{"name": "dev", "resourceClaimName": "p-dev-gone"}]
        }
    else:
        raw["metadata"]["annotations"]["resource.dralloc.dev/claim-statuses"] = (
            '[{"name": "dev", "resourceClaimName": "p-dev-gone"}]'
        )
    put(controller.runtime, PODS, raw)
    await controller.sync_pod(Key("ns", "p"))
    created = [c for c in client.calls if c.method == "POST" and "resourceclaims" in c.path]
    told = [e["message"] for e in client.events if e["involved"]["metadata"]["name"] == "p"]
    conditions = [
        condition
        for call in client.writes(PODS.path("ns", "p") + "/status")
        for condition in call.body["status"].get("conditions") or ()
    ]
    if api_group == "resource.k8s.io":
        assert created == []
        assert any("ns/p-dev-gone, made for this entry, was deleted" in m for m in told), told
        # Where the user looks too: the allocation waits for the claim without a word.
        [condition] = conditions
        assert condition["status"] == "False" and "was deleted" in condition["message"]
    else:
        assert len(created) == 1 and told == [] and conditions == []
