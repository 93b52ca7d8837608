"""The gate webhook's handler in in-tree mode: a pod's DRA extended resources become a claim
of the pod (the patch kopf sends back), what dralloc writes itself cannot be forged at
creation, and namespaces dralloc does not serve are left alone."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, cast

import jsonpatch
import kopf
import pytest

from operators.api.extendedresources import ENTRY_NAME, EXTENDED_RESOURCES_ANNOTATION
from operators.controllers import runtime
from operators.controllers.runtime import MEMO_KEY
from operators.kube import DEVICE_CLASSES, NAMESPACES
from operators.settings import Settings
from operators.webhooks import add_scheduling_gate

from ..controllers import fakes
from ..controllers.fakes import FakeClient, device_class, namespace

GPU = "example.com/gpu"
GATE = "resource.dralloc.dev/allocation"


def new_pod(ns: str = "ns", **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns, "annotations": dict(annotations)},
        "spec": {
            "initContainers": [{"name": "setup", "image": "i"}],
            "containers": [
                {"name": "main", "image": "i",
                 "resources": {"requests": {"cpu": "1", GPU: "2"}, "limits": {GPU: "2"}}},
                {"name": "side", "image": "i"},
            ],
        },
    }  # fmt: skip


@pytest.fixture
def memo(monkeypatch: pytest.MonkeyPatch) -> kopf.Memo:
    settings = dataclasses.replace(Settings(), api_group="resource.k8s.io")
    monkeypatch.setattr(runtime, "_configured_settings", settings)
    made = fakes.runtime(FakeClient(), api_group="resource.k8s.io")
    made.cache[NAMESPACES].apply("ADDED", namespace("ns"))
    gpu = device_class()
    gpu["spec"]["extendedResourceName"] = GPU
    made.cache[DEVICE_CLASSES].apply("ADDED", gpu)
    for informer in made.cache.informers.values():
        informer.synced.set()
    memo = kopf.Memo()
    memo[MEMO_KEY] = made
    return memo


async def admitted(pod: dict[str, Any], memo: kopf.Memo) -> dict[str, Any]:
    """The pod as the API server stores it after the webhook's JSON patch."""
    body = kopf.Body(cast(kopf.RawBody, copy.deepcopy(pod)))
    patch = kopf.Patch(body=body)
    # kopf.on.mutate types the handler as kopf's generic WebhookFn (every keyword of a
    # webhook required, any result): this one is async and reads these three only.
    handler = cast(Callable[..., Awaitable[None]], add_scheduling_gate)
    await handler(body=body, patch=patch, memo=memo)
    ops = patch.as_json_patch()
    result: dict[str, Any] = jsonpatch.apply_patch(pod, ops)
    return result


async def test_extended_resources_become_a_gated_claims_pod(memo: kopf.Memo) -> None:
    stored = await admitted(new_pod(), memo)
    spec = stored["spec"]
    (entry,) = spec["resourceClaims"]
    assert entry["name"] == ENTRY_NAME
    assert entry["resourceClaimName"].startswith("p-extended-resources-")
    assert len(entry["resourceClaimName"]) == len("p-extended-resources-") + 10
    main = spec["containers"][0]["resources"]
    assert main == {
        "requests": {"cpu": "1"},
        "claims": [{"name": ENTRY_NAME, "request": "container-1-request-1"}],
    }
    assert spec["containers"][1] == new_pod()["spec"]["containers"][1]
    assert spec["initContainers"] == new_pod()["spec"]["initContainers"]
    assert spec["schedulingGates"] == [{"name": GATE}]
    assert EXTENDED_RESOURCES_ANNOTATION in stored["metadata"]["annotations"]


async def test_what_the_webhook_writes_cannot_be_brought_along(memo: kopf.Memo) -> None:
    forged = new_pod(**{EXTENDED_RESOURCES_ANNOTATION: "{}"})
    with pytest.raises(kopf.AdmissionError, match="set by dralloc's webhook only"):
        await admitted(forged, memo)
    entry = new_pod()
    entry["spec"]["resourceClaims"] = [{"name": ENTRY_NAME, "resourceClaimName": "theirs"}]
    with pytest.raises(kopf.AdmissionError, match="is dralloc's"):
        await admitted(entry, memo)


async def test_unserved_namespaces_and_requests_no_claim_holds(memo: kopf.Memo) -> None:
    system = new_pod("kube-system")
    assert await admitted(system, memo) == system
    huge = new_pod()
    huge["spec"]["containers"][0]["resources"] = {"limits": {GPU: "33"}}
    with pytest.raises(kopf.AdmissionError, match="at most 32"):
        await admitted(huge, memo)
