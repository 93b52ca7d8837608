"""Every stuck state is visible: a pod that names a claim that does not exist says so.

A claim named by ``resourceClaimName`` must exist in the pod's namespace (a name cannot point
at another one). A pod whose claim is missing used to wait at the gate with no Event and no
condition; after a short grace (the claim may be created just after the pod) it gets both,
naming the claim, and it is allocated as soon as the claim appears.
"""

from __future__ import annotations

import asyncio
from typing import Any

from operators.cache.informer import Key
from operators.controllers.allocation import AllocationController
from operators.controllers.allocation.decide import EXPLAIN_GRACE
from operators.controllers.allocation.reporting import REASON_FAILED
from operators.controllers.podcondition import CONDITION_TYPE
from operators.controllers.workqueue import work_once
from operators.kube import PODS, RESOURCE_CLAIMS

from .fakes import FakeClient, claim, one_device_cluster, pod, put

POD = Key("ns", "p")
MISSING = 'claim entry "dev": resourceclaim "gone" not found in namespace "ns"'


def condition_writes(client: FakeClient) -> list[dict[str, Any]]:
    return [
        condition
        for call in client.calls
        if call.path == PODS.path("ns", "p") + "/status"
        for condition in call.body["status"]["conditions"]
    ]


async def test_a_missing_named_claim_is_reported_on_the_pod_after_a_grace() -> None:
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client, requeue_base_delay=1.0))
    put(controller.runtime, PODS, pod("ns", "p", [{"name": "dev", "resourceClaimName": "gone"}]))
    assert await asyncio.wait_for(work_once(controller.queue, controller.sync), 5) == POD
    assert client.events == [] and condition_writes(client) == []  # within the grace
    due = controller.queue.due_in(POD)
    assert due is not None and due > 0  # looked at again later, not forgotten

    controller.decider.missing_since[POD] -= EXPLAIN_GRACE  # as if the grace had passed
    await controller.sync(POD)
    [event] = client.events
    assert event["reason"] == REASON_FAILED and event["type_"] == "Warning"
    assert MISSING in event["message"]
    [condition] = condition_writes(client)
    assert condition["type"] == CONDITION_TYPE and condition["status"] == "False"
    assert MISSING in condition["message"]

    # The claim appears: the pod is allocated at once.
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", "gone"))
    assert controller.queue.due_in(POD) == 0
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        assert await asyncio.wait_for(work_once(controller.queue, controller.sync), 5) == POD
    assert client.writes(RESOURCE_CLAIMS.path("ns", "gone") + "/status")
    assert POD not in controller.decider.missing_since


async def test_a_deleted_pod_forgets_its_missing_claim() -> None:
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    raw = pod("ns", "p", [{"name": "dev", "resourceClaimName": "gone"}])
    put(controller.runtime, PODS, raw)
    await controller.sync(POD)
    assert POD in controller.decider.missing_since
    controller.runtime.cache[PODS].apply("DELETED", raw)
    assert POD not in controller.decider.missing_since
