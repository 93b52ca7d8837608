"""The pod's DevicesAllocated condition ends up saying what is true, even when its write
conflicts (kube-scheduler binds the pod, the kubelet writes its status, ...).

A conflicting condition write is retried from a fresh read: the same pod (UID), still needing
the change, with its new resourceVersion; a few times at most. A pod that is gone, replaced,
or no longer needs the change is left alone.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from operators.cache.core import Pod, parse_pod
from operators.cache.informer import Key
from operators.controllers import podcondition
from operators.controllers.allocation import AllocationController
from operators.controllers.allocation.decide import EXPLAIN_GRACE
from operators.controllers.podcondition import CONDITION_TYPE
from operators.controllers.workqueue import work_once
from operators.kube import PODS, RESOURCE_CLAIMS, Conflict, JsonDict

from .fakes import Call, FakeClient, claim, one_device_cluster, pod, put

POD_STATUS = PODS.path("ns", "p") + "/status"


class BindingClient(FakeClient):
    """The first ``conflicts`` status writes of pod p conflict, as if kube-scheduler had bound
    the pod in between: the pod on the server moves to a newer version (``bind``)."""

    def __init__(self, conflicts: int = 1) -> None:
        super().__init__()
        self.conflicts = conflicts
        self.bind: dict[str, Any] | None = {"nodeName": "n1"}

    async def request(self, method: str, path: str, **kwargs: Any) -> JsonDict:
        if method == "PATCH" and path == POD_STATUS and self.conflicts > 0:
            self.conflicts -= 1
            self.calls.append(Call(method, path, kwargs.get("body")))
            stored = self.objects[PODS.path("ns", "p")]
            if self.bind is not None:
                stored.setdefault("spec", {}).update(self.bind)
            stored["metadata"]["resourceVersion"] = str(int(_version(stored)) + 100)
            raise Conflict(409, "Conflict", "the object has been modified")
        return await super().request(method, path, **kwargs)


def _version(raw: JsonDict) -> str:
    return str(raw["metadata"]["resourceVersion"])


def status_writes(client: FakeClient) -> list[JsonDict]:
    return [c.body for c in client.calls if c.method == "PATCH" and c.path == POD_STATUS]


def written_condition(body: JsonDict) -> tuple[str, str, str]:
    [condition] = body["status"]["conditions"]
    assert condition["type"] == CONDITION_TYPE
    return condition["status"], condition["reason"], condition["message"]


def unallocatable_pod() -> JsonDict:
    """Pod p (claim c1), which was explained as unallocatable before."""
    raw = pod("ns", "p", [{"name": "dev", "resourceClaimName": "c1"}])
    condition = {
        "type": CONDITION_TYPE,
        "status": "False",
        "reason": "Unallocatable",
        "message": "0/1 nodes are available: 1 no free device",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    raw["status"] = {"conditions": [condition]}
    return raw


async def sync(controller: AllocationController, key: Key) -> None:
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        assert await asyncio.wait_for(work_once(controller.queue, controller.sync), 5) == key


async def test_the_allocated_condition_is_written_again_after_a_conflict() -> None:
    client = BindingClient()
    controller = AllocationController(one_device_cluster(client))
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", "c1"))
    put(controller.runtime, PODS, unallocatable_pod())
    await sync(controller, Key("ns", "p"))
    writes = status_writes(client)
    assert len(writes) == 2, "the conflicting condition write was not retried"
    assert all(written_condition(w)[0] == "True" for w in writes)
    assert written_condition(writes[1]) == ("True", "Allocated", "allocated on node n1")
    fresh = client.objects[PODS.path("ns", "p")]
    assert writes[1]["metadata"]["resourceVersion"] == _version(fresh), (
        "the retry did not use the version of a fresh read"
    )
    assert [c.path for c in client.calls if c.method == "GET"] == [PODS.path("ns", "p")]


async def test_the_unallocatable_condition_is_written_again_after_a_conflict() -> None:
    client = BindingClient()
    client.bind = None  # something else changed the pod (a label, the kubelet)
    controller = AllocationController(one_device_cluster(client))
    # The only device is taken by another pod's claim.
    taken = claim("ns", "c0")
    put(controller.runtime, RESOURCE_CLAIMS, taken)
    controller.state.assume(controller.claims.get(Key("ns", "c0")), _one_device())
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", "c1"))
    put(controller.runtime, PODS, pod("ns", "p", [{"name": "dev", "resourceClaimName": "c1"}]))
    key = Key("ns", "p")
    controller.decider.failing_since[key] = -EXPLAIN_GRACE * 10  # past the grace period
    await sync(controller, key)
    writes = status_writes(client)
    assert len(writes) == 2, "the conflicting condition write was not retried"
    assert written_condition(writes[1])[:2] == ("False", "Unallocatable")
    assert writes[1]["metadata"]["resourceVersion"] == _version(
        client.objects[PODS.path("ns", "p")]
    )


def _one_device() -> dict[str, Any]:
    result = {"request": "dev", "driver": "gpu.example.com", "pool": "n1", "device": "dev-0"}
    return {"devices": {"results": [result]}}


# --- the write itself -------------------------------------------------------------------------


def cached_pod(client: FakeClient, raw: JsonDict) -> Pod:
    client.remember(PODS, raw)
    return parse_pod(json.loads(json.dumps(raw)))


async def test_a_replaced_pod_is_left_alone() -> None:
    client = BindingClient()
    old = cached_pod(client, pod("ns", "p", []))
    client.objects[PODS.path("ns", "p")]["metadata"]["uid"] = "uid-of-another-pod"
    written = await podcondition.set_condition(
        client, old, "False", "Unallocatable", "no room", still_needed=lambda _p: True
    )
    assert not written
    assert len(status_writes(client)) == 1


async def test_a_change_no_longer_needed_is_not_written() -> None:
    client = BindingClient()
    old = cached_pod(client, pod("ns", "p", []))
    written = await podcondition.set_condition(
        client, old, "False", "Unallocatable", "no room", still_needed=lambda p: not p.node_name
    )
    assert not written, "the pod was bound meanwhile; the condition no longer applies"
    assert len(status_writes(client)) == 1


async def test_retries_are_bounded() -> None:
    client = BindingClient(conflicts=1000)
    old = cached_pod(client, pod("ns", "p", []))
    try:
        await podcondition.set_condition(
            client, old, "False", "Unallocatable", "no room", still_needed=lambda _p: True
        )
    except Conflict:
        pass
    else:
        raise AssertionError("endless conflicts did not end in a Conflict")
    assert len(status_writes(client)) == podcondition.MAX_ATTEMPTS


async def test_a_condition_that_already_says_it_is_not_written() -> None:
    client = BindingClient(conflicts=0)
    current = cached_pod(client, unallocatable_pod())
    [condition] = current.conditions
    written = await podcondition.set_condition(
        client,
        current,
        "False",
        condition["reason"],
        condition["message"],
        still_needed=lambda _p: True,
    )
    assert not written and status_writes(client) == []
