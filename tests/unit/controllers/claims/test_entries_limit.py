"""A pod with more claim entries than the limit is refused with a reason, like a malformed
claims annotation: no claim is created, the pod gets a Warning Event and a DevicesAllocated
condition naming the limit. One entry fewer is served as usual.

(A pod with 3,000 template entries kept the operator busy creating claims ever slower while
every other pod waited.)
"""

from __future__ import annotations

import json

import pytest

from operators.api import annotations as ann
from operators.api.limits import POD_RESOURCE_CLAIMS_MAX_SIZE
from operators.cache.core import CLAIMS_ANNOTATION, parse_pod
from operators.cache.informer import Key
from operators.controllers.claims import REASON_FAILED_CREATION, ClaimController, WorkKey
from operators.controllers.podcondition import CONDITION_TYPE
from operators.controllers.workqueue import work_once
from operators.kube import NAMESPACES, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS

from ..fakes import FakeClient, namespace, pod, put, runtime, template

POD: WorkKey = ("pod", Key("ns", "p"))


def entries(n: int) -> list[dict[str, str]]:
    return [{"name": f"e{i}", "resourceClaimTemplateName": "one"} for i in range(n)]


def controller_with_pod(client: FakeClient, n: int) -> ClaimController:
    controller = ClaimController(
        runtime(client, requeue_base_delay=1.0, allocation_controller=False)
    )
    cache = controller.runtime.cache
    cache[NAMESPACES].apply("ADDED", namespace("ns"))
    cache[RESOURCE_CLAIM_TEMPLATES].apply("ADDED", template("ns", "one"))
    put(controller.runtime, PODS, pod("ns", "p", entries(n)))
    return controller


def test_the_limit_is_part_of_the_annotation_rules() -> None:
    ok = json.dumps(entries(POD_RESOURCE_CLAIMS_MAX_SIZE))
    assert len(ann.parse_pod_claims(ok)) == POD_RESOURCE_CLAIMS_MAX_SIZE
    with pytest.raises(ann.AnnotationError) as info:
        ann.parse_pod_claims(json.dumps(entries(3000)))
    message = str(info.value)
    assert message.startswith(f"annotation {CLAIMS_ANNOTATION}: ")
    assert "3000 entries" in message and f"at most {POD_RESOURCE_CLAIMS_MAX_SIZE}" in message
    view = parse_pod(pod("ns", "p", entries(POD_RESOURCE_CLAIMS_MAX_SIZE + 1)))
    assert view.claims == () and view.uses_claims
    assert f"at most {POD_RESOURCE_CLAIMS_MAX_SIZE}" in view.claims_error


async def test_a_pod_over_the_limit_gets_no_claims_an_event_and_a_condition() -> None:
    client = FakeClient()
    controller = controller_with_pod(client, POD_RESOURCE_CLAIMS_MAX_SIZE + 1)
    controller.queue.add(POD)
    await work_once(controller.queue, controller.sync)
    assert client.writes(RESOURCE_CLAIMS.path("ns")) == [], "claims were created"
    [event] = client.events
    assert event["reason"] == REASON_FAILED_CREATION and event["type_"] == "Warning"
    assert f"at most {POD_RESOURCE_CLAIMS_MAX_SIZE}" in event["message"]
    [write] = client.writes(PODS.path("ns", "p") + "/status")
    [condition] = write.body["status"]["conditions"]
    assert condition["type"] == CONDITION_TYPE and condition["status"] == "False"
    assert f"at most {POD_RESOURCE_CLAIMS_MAX_SIZE}" in condition["message"]
    assert write.body["metadata"]["resourceVersion"] == "5"


async def test_a_refused_pod_whose_condition_says_it_is_not_written_again() -> None:
    client = FakeClient()
    controller = controller_with_pod(client, POD_RESOURCE_CLAIMS_MAX_SIZE + 1)
    controller.queue.add(POD)
    await work_once(controller.queue, controller.sync)
    [write] = client.writes(PODS.path("ns", "p") + "/status")
    # The watch shows the condition; the pod event syncs the pod again: nothing to write.
    raw = pod("ns", "p", entries(POD_RESOURCE_CLAIMS_MAX_SIZE + 1))
    raw["metadata"]["resourceVersion"] = "6"
    raw["status"] = {"conditions": write.body["status"]["conditions"]}
    put(controller.runtime, PODS, raw)
    await work_once(controller.queue, controller.sync)
    assert len(client.writes(PODS.path("ns", "p") + "/status")) == 1


async def test_a_pod_at_the_limit_gets_its_claims() -> None:
    client = FakeClient()
    controller = controller_with_pod(client, POD_RESOURCE_CLAIMS_MAX_SIZE)
    controller.queue.add(POD)
    await work_once(controller.queue, controller.sync)
    assert len(client.writes(RESOURCE_CLAIMS.path("ns"))) == POD_RESOURCE_CLAIMS_MAX_SIZE
    assert client.events == []
