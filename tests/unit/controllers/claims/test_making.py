"""The claim controller and a failing API server: retry what may pass, report what will not.

Regression for the pods left gated forever after an API server restart: a 503 (or a dropped
connection) on claim creation used to become a Warning Event and the pod was never looked at
again.
"""

from __future__ import annotations

import aiohttp
import pytest

from operators.cache.informer import Key
from operators.controllers.claims.controller import (
    REASON_FAILED_CREATION,
    REFUSED_RETRY_DELAY,
    ClaimController,
    WorkKey,
)
from operators.controllers.workqueue import work_once
from operators.kube import (
    NAMESPACES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    ApiError,
    Conflict,
    JsonDict,
)

from ..fakes import WRITES, FakeClient, namespace, pod, put, runtime, template

POD: WorkKey = ("pod", Key("ns", "p"))
CLAIMS_PATH = RESOURCE_CLAIMS.path("ns")


def controller_with_pod(client: FakeClient, *, admin_namespace: bool = False) -> ClaimController:
    # The claim controller alone: it records claim statuses itself, at once.
    controller = ClaimController(
        runtime(client, requeue_base_delay=1.0, allocation_controller=False)
    )
    cache = controller.runtime.cache
    cache[NAMESPACES].apply("ADDED", namespace("ns", admin=admin_namespace))
    cache[RESOURCE_CLAIM_TEMPLATES].apply("ADDED", template("ns", "one"))
    cache[RESOURCE_CLAIM_TEMPLATES].apply("ADDED", template("ns", "admin", adminAccess=True))
    put(
        controller.runtime,
        PODS,
        pod("ns", "p", [{"name": "dev", "resourceClaimTemplateName": "one"}]),
    )
    return controller


def failing_creates(*errors: BaseException) -> list[BaseException]:
    """Fail the next claim creates with these errors, in order; later ones succeed."""
    return list(errors)


def script(client: FakeClient, errors: list[BaseException]) -> None:
    def fail(method: str, path: str, _body: JsonDict | None) -> BaseException | None:
        if method == "POST" and path == CLAIMS_PATH and errors:
            return errors.pop(0)
        return None

    client.fail = fail


@pytest.mark.parametrize(
    "error",
    [
        ApiError(503, "ServiceUnavailable", "not all HTTP paths installed"),
        ApiError(500, "InternalError", "etcdserver: leader changed"),
        ApiError(429, "TooManyRequests", "storage is (re)initializing"),
        aiohttp.ServerDisconnectedError(),
        TimeoutError(),
    ],
)
async def test_unavailable_api_on_create_is_retried_with_backoff_and_no_event(
    error: BaseException,
) -> None:
    client = FakeClient()
    script(client, failing_creates(error))
    controller = controller_with_pod(client)
    controller.queue.add(POD)
    await work_once(controller.queue, controller.sync)
    assert client.events == [], "a passing outage must not be reported as a claim problem"
    assert controller.queue.failures(POD) == 1
    due = controller.queue.due_in(POD)
    assert due is not None and 0.5 < due <= 1.0, due

    # The API server is back: the retry creates the claim and records it on the pod.
    controller.queue.add(POD)
    await work_once(controller.queue, controller.sync)
    assert len(client.writes(CLAIMS_PATH)) == 2
    recorded = client.writes(PODS.path("ns", "p"))
    assert recorded and "p-dev-abcde" in str(recorded[-1].body)
    assert controller.queue.failures(POD) == 0


@pytest.mark.parametrize(
    "error",
    [
        ApiError(422, "Invalid", 'ResourceClaim "p-dev-" is invalid: spec.devices: Too many'),
        ApiError(403, "Forbidden", 'exceeded quota: "claims"'),
        ApiError(400, "BadRequest", "the body of the request was in an unknown format"),
    ],
)
async def test_refused_create_becomes_an_event_and_a_late_retry(error: ApiError) -> None:
    client = FakeClient()
    script(client, failing_creates(error))
    controller = controller_with_pod(client)
    controller.queue.add(POD)
    await work_once(controller.queue, controller.sync)
    assert [e["reason"] for e in client.events] == [REASON_FAILED_CREATION]
    message = client.events[0]["message"]
    assert error.message in message and "PodResourceClaim dev" in message
    due = controller.queue.due_in(POD)
    assert due is not None and REFUSED_RETRY_DELAY - 5 < due <= REFUSED_RETRY_DELAY


async def test_a_changed_template_is_retried_at_once_after_a_refusal() -> None:
    client = FakeClient()
    script(client, failing_creates(ApiError(422, "Invalid", "bad template")))
    controller = controller_with_pod(client)
    controller.queue.add(POD)
    await work_once(controller.queue, controller.sync)
    fixed = template("ns", "one")
    fixed["metadata"]["resourceVersion"] = "2"
    controller.runtime.cache[RESOURCE_CLAIM_TEMPLATES].apply("MODIFIED", fixed)
    assert controller.queue.due_in(POD) == 0.0
    await work_once(controller.queue, controller.sync)
    assert len(client.writes(CLAIMS_PATH)) == 2


async def test_a_conflict_on_the_pod_is_retried_at_once() -> None:
    client = FakeClient()

    def fail(method: str, path: str, _body: JsonDict | None) -> BaseException | None:
        if method in WRITES and path == PODS.path("ns", "p") and len(client.writes(path)) == 1:
            return Conflict(409, "Conflict", "the object has been modified")
        return None

    client.fail = fail
    controller = controller_with_pod(client)
    controller.queue.add(POD)
    await work_once(controller.queue, controller.sync)
    assert controller.queue.due_in(POD) == 0.0
    assert client.events == []
    await work_once(controller.queue, controller.sync)
    assert len(client.writes(PODS.path("ns", "p"))) == 2
    # The claim created on the first pass is found again, not created twice.
    assert len(client.writes(CLAIMS_PATH)) == 1
