"""Claim statuses of a gated pod are recorded in the allocation's pod write, not in one of their own.

The claim controller creates the claim and leaves the pod alone for ``STATUSES_DEFER``
seconds; the allocation controller finds the claim through its owner and writes the claim
statuses together with the devices, the node and the gate removal. If no allocation happens
in that time, the claim controller records them itself.
"""

from __future__ import annotations

import asyncio
import json

from operators.cache.core import CLAIM_STATUSES_ANNOTATION, DEVICES_ANNOTATION
from operators.cache.informer import Key
from operators.controllers.allocation import AllocationController
from operators.controllers.claims import STATUSES_DEFER, ClaimController
from operators.controllers.workqueue import work_once
from operators.kube import PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS

from .fakes import FakeClient, one_device_cluster, pod, put, template

POD = Key("ns", "p")
ENTRY = [{"name": "dev", "resourceClaimTemplateName": "one"}]


def setup(
    client: FakeClient, *, gated: bool = True
) -> tuple[ClaimController, AllocationController]:
    runtime = one_device_cluster(client)
    runtime.cache[RESOURCE_CLAIM_TEMPLATES].apply("ADDED", template("ns", "one"))
    claims = ClaimController(runtime)
    allocation = AllocationController(runtime)
    put(runtime, PODS, pod("ns", "p", ENTRY, gated=gated))
    return claims, allocation


def pod_writes(client: FakeClient) -> list[dict[str, str]]:
    """The annotations of every write to the pod, in order."""
    return [
        dict((call.body.get("metadata") or {}).get("annotations") or {})
        for call in client.writes(PODS.path("ns", "p"))
        if not call.path.endswith("/status")
    ]


async def test_the_allocation_write_records_the_claim_statuses() -> None:
    client = FakeClient()
    claims, allocation = setup(client)
    await work_once(claims.queue, claims.sync)
    assert len(client.writes(RESOURCE_CLAIMS.path("ns"))) == 1  # the claim was created
    assert pod_writes(client) == []  # but the pod was left to the allocation write
    due = claims.queue.due_in(("pod", POD))
    assert due is not None and 0 < due <= STATUSES_DEFER

    # The watch shows the claim; the allocation controller finds it through its owner, and
    # one pod write carries everything.
    created = client.objects[RESOURCE_CLAIMS.path("ns", "p-dev-abcde")]
    allocation.runtime.cache[RESOURCE_CLAIMS].apply("ADDED", created)
    async with asyncio.TaskGroup() as writers:
        allocation._writers = writers
        assert await asyncio.wait_for(work_once(allocation.queue, allocation.sync), 5) == POD
    [annotations] = pod_writes(client)
    assert DEVICES_ANNOTATION in annotations
    statuses = json.loads(annotations[CLAIM_STATUSES_ANNOTATION])
    assert statuses == [{"name": "dev", "resourceClaimName": "p-dev-abcde"}]


async def test_statuses_are_written_by_the_claim_controller_when_no_allocation_comes() -> None:
    client = FakeClient()
    claims, _ = setup(client)
    await work_once(claims.queue, claims.sync)
    assert pod_writes(client) == []
    claims.statuses_deferred[POD] -= STATUSES_DEFER  # as if the time had passed
    claims.queue.add(("pod", POD))
    await work_once(claims.queue, claims.sync)
    [annotations] = pod_writes(client)
    assert json.loads(annotations[CLAIM_STATUSES_ANNOTATION])[0]["name"] == "dev"
    assert POD not in claims.statuses_deferred


async def test_an_ungated_pod_gets_its_statuses_at_once() -> None:
    client = FakeClient()
    claims, _ = setup(client, gated=False)
    await work_once(claims.queue, claims.sync)
    [annotations] = pod_writes(client)
    assert CLAIM_STATUSES_ANNOTATION in annotations


async def test_a_generated_claim_needs_no_finalizer_write_before_its_allocation() -> None:
    client = FakeClient()
    claims, allocation = setup(client)
    await work_once(claims.queue, claims.sync)
    created = client.objects[RESOURCE_CLAIMS.path("ns", "p-dev-abcde")]
    allocation.runtime.cache[RESOURCE_CLAIMS].apply("ADDED", created)
    async with asyncio.TaskGroup() as writers:
        allocation._writers = writers
        await asyncio.wait_for(work_once(allocation.queue, allocation.sync), 5)
    writes = client.writes(RESOURCE_CLAIMS.path("ns", "p-dev-abcde"))
    assert [w.path.rsplit("/", 1)[-1] for w in writes] == ["status"]  # no finalizer patch


async def test_a_created_claim_wakes_its_pod_before_the_watch_shows_it() -> None:
    client = FakeClient()
    claims, allocation = setup(client)
    async with asyncio.TaskGroup() as writers:
        allocation._writers = writers
        await asyncio.wait_for(work_once(allocation.queue, allocation.sync), 5)
    assert allocation.queue.due_in(POD) is None  # no claim yet: nothing to do
    await work_once(claims.queue, claims.sync)
    assert allocation.queue.due_in(POD) == 0.0  # woken by the claim controller's write
    async with asyncio.TaskGroup() as writers:
        allocation._writers = writers
        await asyncio.wait_for(work_once(allocation.queue, allocation.sync), 5)
    [annotations] = pod_writes(client)
    assert DEVICES_ANNOTATION in annotations
