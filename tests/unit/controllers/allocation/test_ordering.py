"""The watch and the API's answers arrive in either order; the outcome does not depend on it.

- The watch event of a claim's own allocation may come before the PATCH answer: the write
  landed, and it is a success (not an error, not a retry).
- While an allocation write is in flight, a newer claim without the allocation (someone else
  changed it) does not free the devices: the pending answer decides. A conflict then frees
  them; a write that got no answer is settled from what the watch already showed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
from prometheus_client import REGISTRY

from operators.cache.informer import Key
from operators.controllers.allocation import AllocationController
from operators.controllers.workqueue import work_once
from operators.kube import PODS, RESOURCE_CLAIMS, Conflict, JsonDict, Resource

from ..fakes import FakeClient, claim, one_device_cluster, pod, put

STATUS_PATH = RESOURCE_CLAIMS.path("ns", "c1") + "/status"
C1 = Key("ns", "c1")


class WatchFirstClient(FakeClient):
    """Runs ``during`` while the claim's status PATCH is on the wire, after the server
    applied it (``stored``: the object as it now is) and before the answer comes back."""

    def __init__(self) -> None:
        super().__init__()
        self.during: Callable[[JsonDict], object] | None = None
        self.answer_error: BaseException | None = None

    async def merge_patch(
        self, resource: Resource, name: str, patch: JsonDict, **kwargs: Any
    ) -> JsonDict:
        stored = await super().merge_patch(resource, name, patch, **kwargs)
        if resource is RESOURCE_CLAIMS and kwargs.get("subresource") == "status":
            if self.during is not None:
                self.during(stored)
            if self.answer_error is not None:
                raise self.answer_error
        return stored


def setup() -> tuple[WatchFirstClient, AllocationController, Key]:
    client = WatchFirstClient()
    controller = AllocationController(one_device_cluster(client, requeue_base_delay=1.0))
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", "c1"))
    put(controller.runtime, PODS, pod("ns", "p", [{"name": "dev", "resourceClaimName": "c1"}]))
    return client, controller, Key("ns", "p")


async def sync(controller: AllocationController, key: Key) -> None:
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        assert await asyncio.wait_for(work_once(controller.queue, controller.sync), 5) == key


def devices_used(controller: AllocationController) -> int:
    return sum(controller.state.allocated.exclusive.values())


def allocations(result: str) -> float:
    value = REGISTRY.get_sample_value("dralloc_pod_allocations_total", {"result": result})
    return value or 0.0


async def test_the_watch_showing_the_allocation_before_the_answer_is_a_success() -> None:
    client, controller, key = setup()
    watch = controller.runtime.cache[RESOURCE_CLAIMS]
    client.during = lambda stored: watch.apply("MODIFIED", stored)
    errors_before = allocations("error")
    await sync(controller, key)
    assert allocations("error") == errors_before, "a landed write was counted as failed"
    assert controller.commits.allocated_pods == 1
    assert controller.queue.failures(key) == 0, "a landed write was retried"
    assert len([c for c in client.writes(STATUS_PATH) if "allocation" in c.body["status"]]) == 1
    assert client.writes(PODS.path("ns", "p")), "the pod write never happened"
    assert controller.writer.unanswered == {}
    assert devices_used(controller) == 1, "the device is not counted as used"


async def test_a_newer_claim_during_the_write_does_not_free_its_devices() -> None:
    client, controller, key = setup()
    watch = controller.runtime.cache[RESOURCE_CLAIMS]
    seen: list[bool] = []

    def someone_else_wrote(_stored: JsonDict) -> None:
        newer = claim("ns", "c1", rv="5000")  # e.g. a label edit, without the allocation
        watch.apply("MODIFIED", newer)
        claim_now = controller.claims.get(C1)
        seen.append(C1 in controller.writer.unanswered and controller.state.is_assumed(claim_now))
        seen.append(devices_used(controller) == 1)

    client.during = someone_else_wrote
    client.answer_error = Conflict(409, "Conflict", "the object has been modified")
    await sync(controller, key)
    assert seen == [True, True], "the devices were freed while the write's answer was pending"
    # The answer (a conflict) decided: the devices are free again and the pod is requeued.
    assert devices_used(controller) == 0
    assert controller.writer.unanswered == {}
    assert controller.queue.due_in(key) is not None


async def test_an_unanswered_write_is_settled_by_what_the_watch_showed_meanwhile() -> None:
    client, controller, key = setup()
    watch = controller.runtime.cache[RESOURCE_CLAIMS]
    client.during = lambda _stored: watch.apply("MODIFIED", claim("ns", "c1", rv="5000"))
    client.answer_error = aiohttp.ServerDisconnectedError()
    await sync(controller, key)
    # No live read needed: the watch already showed a newer claim without the allocation.
    assert controller.writer.unanswered == {}
    assert devices_used(controller) == 0


async def test_a_watch_that_skips_our_allocation_and_shows_a_later_release_frees_the_device() -> (
    None
):
    # A relist after a 410 may show a later version of the claim than the one our write made
    # (released meanwhile) and never the allocated one: the assumption must end there.
    _, controller, key = setup()
    await sync(controller, key)
    allocated = controller.claims.get(C1)
    assert allocated is not None
    written = int(allocated.metadata.resource_version or 0)
    assert devices_used(controller) == 1
    released = claim("ns", "c1", rv=str(written + 10))
    controller.runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", released)
    assert not controller.state.is_assumed(controller.claims.get(C1))
    assert devices_used(controller) == 0, "the device stays taken by a claim that holds none"
