"""In-tree, a pod's DRA extended resources are one ordinary claim of the pod: the claim
controller creates the claim the webhook named, refuses one it did not make, and a pod that
passed the webhook by is explained (or recreated through its controller)."""

from __future__ import annotations

import copy
from typing import Any

from operators.api.extendedresources import (
    ENTRY_NAME,
    EXTENDED_RESOURCES_ANNOTATION,
    translate,
)
from operators.cache.informer import Key
from operators.controllers.claims import REASON_EXTENDED_NOT_SERVED, ClaimController
from operators.controllers.workqueue import work_once
from operators.kube import DEVICE_CLASSES, NAMESPACES, PODS, RESOURCE_CLAIMS

from ..fakes import FakeClient, device_class, namespace, put, runtime

GPU = "example.com/gpu"
IN_TREE = "resource.k8s.io"


def asking_pod(name: str = "train", ns: str = "ns", *, controller: bool = False) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "5"},
        "spec": {
            "containers": [
                {"name": "main", "image": "i", "resources": {"requests": {GPU: "2"},
                                                             "limits": {GPU: "2"}}}
            ]
        },
    }  # fmt: skip
    if controller:
        raw["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u",
             "controller": True}
        ]  # fmt: skip
    return raw


def translated(raw: dict[str, Any]) -> dict[str, Any]:
    done = copy.deepcopy(raw)
    translation = translate(done, {GPU: "gpu"}, "abcde")
    assert translation is not None
    translation.apply(done)
    return done


def controller_with_class(**settings: Any) -> ClaimController:
    client = FakeClient()
    made = runtime(client, api_group=IN_TREE, **settings)
    made.cache[NAMESPACES].apply("ADDED", namespace("ns"))
    made.cache[NAMESPACES].apply("ADDED", namespace("kube-system"))
    gpu = device_class()
    gpu["spec"]["extendedResourceName"] = GPU
    made.cache[DEVICE_CLASSES].apply("ADDED", gpu)
    return ClaimController(made)


async def drain(controller: ClaimController) -> None:
    """Work every key that is due now (a refused one comes back later: not waited for)."""
    while len(controller.queue):
        await work_once(controller.queue, controller.sync)


async def test_the_claim_the_webhook_named_is_created_once_owned_by_the_pod() -> None:
    controller = controller_with_class()
    client: FakeClient = controller.client  # type: ignore[assignment]
    put(controller.runtime, PODS, translated(asking_pod()))
    await drain(controller)
    creates = [c for c in client.writes(RESOURCE_CLAIMS.path("ns")) if c.method == "POST"]
    assert len(creates) == 1
    body = creates[0].body
    assert body["metadata"]["name"] == "train-extended-resources-abcde"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-train"
    assert body["metadata"]["ownerReferences"][0]["controller"] is True
    assert body["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert body["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-0",
            "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2},
        }
    ]
    # The claim exists now (assumed, then watched): nothing more is created.
    await controller.sync_pod(Key("ns", "train"))
    assert len([c for c in client.writes(RESOURCE_CLAIMS.path("ns")) if c.method == "POST"]) == 1


async def test_a_claim_the_pod_does_not_own_is_not_taken() -> None:
    """An annotation naming a claim someone else made (a forgery, or a name taken first):
    refused where the user looks, nothing created."""
    controller = controller_with_class()
    client: FakeClient = controller.client  # type: ignore[assignment]
    other = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "train-extended-resources-abcde", "namespace": "ns",
                     "uid": "uid-c", "resourceVersion": "7"},
        "spec": {"devices": {"requests": []}},
    }  # fmt: skip
    put(controller.runtime, RESOURCE_CLAIMS, other)
    put(controller.runtime, PODS, translated(asking_pod()))
    await drain(controller)
    assert not [c for c in client.writes(RESOURCE_CLAIMS.path("ns")) if c.method == "POST"]
    assert any("pod is not owner" in e["message"] for e in client.events), client.events


async def test_an_annotation_the_pod_s_entries_do_not_back_is_reported() -> None:
    controller = controller_with_class()
    client: FakeClient = controller.client  # type: ignore[assignment]
    raw = translated(asking_pod())
    raw["spec"]["resourceClaims"] = [{"name": ENTRY_NAME, "resourceClaimName": "elsewhere"}]
    put(controller.runtime, PODS, raw)
    pod = controller.pods.get(Key("ns", "train"))
    assert pod is not None and "no entry" in pod.extended_error
    await drain(controller)
    assert not [c for c in client.writes(RESOURCE_CLAIMS.path("ns")) if c.method == "POST"]
    assert any(EXTENDED_RESOURCES_ANNOTATION in e["message"] for e in client.events)
    conditions = [c for c in client.calls if c.method == "PATCH" and "pods/train/status" in c.path]
    assert conditions, client.calls


async def test_a_pod_that_passed_the_webhook_by_is_explained_or_recreated() -> None:
    controller = controller_with_class()
    client: FakeClient = controller.client  # type: ignore[assignment]
    put(controller.runtime, PODS, asking_pod("bare"))
    put(controller.runtime, PODS, asking_pod("owned", controller=True))
    await drain(controller)
    reasons = {e["involved"]["metadata"]["name"]: e for e in client.events}
    assert reasons["bare"]["reason"] == REASON_EXTENDED_NOT_SERVED
    assert f"{GPU} (DeviceClass gpu)" in reasons["bare"]["message"]
    assert "delete the pod and create it again" in reasons["bare"]["message"]
    assert "ReplicaSet/rs creates it again" in reasons["owned"]["message"]
    assert [c.path for c in client.calls if c.method == "DELETE"] == [PODS.path("ns", "owned")]
    assert [c for c in client.calls if c.method == "PATCH" and "pods/bare/status" in c.path]
    # A sibling made before that delete is deleted as well; the controller's next pod, made
    # after it, comes back untranslated too (no webhook configured for it): explained, not
    # deleted again, so no loop of deletes and creates; looked at again later.
    sibling = asking_pod("owned-0", controller=True)
    sibling["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z"
    again = asking_pod("owned-2", controller=True)
    again["metadata"]["creationTimestamp"] = "2099-01-01T00:00:00Z"
    put(controller.runtime, PODS, sibling)
    put(controller.runtime, PODS, again)
    await drain(controller)
    deleted = [c.path for c in client.calls if c.method == "DELETE"]
    assert deleted == [PODS.path("ns", "owned"), PODS.path("ns", "owned-0")]
    last = [e for e in client.events if e["involved"]["metadata"]["name"] == "owned-2"]
    assert "keep arriving untranslated" in last[-1]["message"]
    assert controller.queue.due_in(("pod", Key("ns", "owned-2"))) is not None


async def test_only_owners_that_make_a_deleted_pod_again_get_it_deleted() -> None:
    """A Job counts a deleted pod as failed: its untranslated pod is only explained."""
    controller = controller_with_class()
    client: FakeClient = controller.client  # type: ignore[assignment]
    job_pod = asking_pod("job-x", controller=True)
    job_pod["metadata"]["ownerReferences"][0]["kind"] = "Job"
    put(controller.runtime, PODS, job_pod)
    await drain(controller)
    assert not [c for c in client.calls if c.method == "DELETE"]
    assert "delete the pod and create it again" in client.events[-1]["message"]


async def test_a_claims_pod_with_an_untranslated_extended_resource_is_reported() -> None:
    controller = controller_with_class()
    client: FakeClient = controller.client  # type: ignore[assignment]
    raw = asking_pod("mixed")
    raw["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimName": "nic"}]
    put(controller.runtime, PODS, raw)
    await drain(controller)
    assert [e["reason"] for e in client.events] == [REASON_EXTENDED_NOT_SERVED]


async def test_a_class_made_after_the_pod_brings_the_pod_back() -> None:
    controller = controller_with_class()
    client: FakeClient = controller.client  # type: ignore[assignment]
    raw = asking_pod("early")
    resource = "deviceclass.resource.kubernetes.io/late"
    raw["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"},
                                                 "requests": {resource: "1"}}  # fmt: skip
    put(controller.runtime, PODS, raw)
    await drain(controller)
    assert client.events == []  # no class backs it yet
    late = device_class()
    late["metadata"]["name"] = "late"
    controller.runtime.cache[DEVICE_CLASSES].apply("ADDED", late)
    assert controller.queue.pending() == 1
    await drain(controller)
    assert [e["reason"] for e in client.events] == [REASON_EXTENDED_NOT_SERVED]


async def test_an_annotation_naming_kube_scheduler_s_class_is_refused() -> None:
    controller = controller_with_class(scheduler_extended_classes="gpu")
    client: FakeClient = controller.client  # type: ignore[assignment]
    put(controller.runtime, PODS, translated(asking_pod()))
    await drain(controller)
    assert not [c for c in client.writes(RESOURCE_CLAIMS.path("ns")) if c.method == "POST"]
    assert any("kube-scheduler's" in e["message"] for e in client.events), client.events


async def test_pods_dralloc_does_not_serve_them_for_are_left_alone() -> None:
    for settings in ({"scheduler_extended_classes": "gpu"}, {"extended_resources": False}):
        controller = controller_with_class(**settings)
        client: FakeClient = controller.client  # type: ignore[assignment]
        put(controller.runtime, PODS, asking_pod("bare"))
        put(controller.runtime, PODS, asking_pod("system", ns="kube-system"))
        await drain(controller)
        assert client.events == [] and not client.writes("pods"), settings
    controller = controller_with_class()
    client = controller.client  # type: ignore[assignment]
    put(controller.runtime, PODS, asking_pod("system", ns="kube-system"))
    bound = asking_pod("bound")
    bound["spec"]["nodeName"] = "n1"
    put(controller.runtime, PODS, bound)
    await drain(controller)
    assert client.events == [] and not client.writes("pods")
