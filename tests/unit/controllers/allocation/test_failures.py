"""The allocator loop when a write fails or a claim must not be allocated.

- adminAccess on a claim written directly is refused unless the gate is on and the namespace
  carries the label; labelling the namespace retries the pod at once.
- A claim write that got no answer (connection dropped, 5xx) keeps its devices counted as
  used until the watch or a live read shows whether it landed; a refused write releases them
  and tells the user.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import aiohttp
import pytest

from operators.cache.informer import Key
from operators.controllers.allocation import AllocationController, writes
from operators.controllers.allocation.controller import RELIST_DELAY
from operators.controllers.allocation.decide import EXPLAIN_GRACE
from operators.controllers.allocation.outcomes import StillWaiting, Unallocatable
from operators.controllers.allocation.reporting import REASON_FAILED
from operators.controllers.workqueue import work_once
from operators.kube import (
    NAMESPACES,
    PODS,
    RESOURCE_CLAIMS,
    ApiError,
    Conflict,
    JsonDict,
)
from operators.settings import FeatureGates

from ..fakes import (
    DRIVER,
    WRITES,
    FakeClient,
    allocated,
    claim,
    namespace,
    one_device_cluster,
    pod,
    put,
)

STATUS_PATH = RESOURCE_CLAIMS.path("ns", "c1") + "/status"


def cluster(client: FakeClient, **settings: Any) -> AllocationController:
    return AllocationController(one_device_cluster(client, requeue_base_delay=1.0, **settings))


def add_pod(controller: AllocationController, name: str, claim_name: str, **request: Any) -> Key:
    raw = claim("ns", claim_name, **request)
    put(controller.runtime, RESOURCE_CLAIMS, raw)
    put(
        controller.runtime,
        PODS,
        pod("ns", name, [{"name": "dev", "resourceClaimName": claim_name}]),
    )
    return Key("ns", name)


async def sync(controller: AllocationController, key: Key) -> None:
    """Take the pod from the queue, decide and write as the loop does (failures requeue)."""
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        taken = await asyncio.wait_for(work_once(controller.queue, controller.sync), 5)
        assert taken == key


def messages(client: FakeClient, name: str) -> list[str]:
    return [e["message"] for e in client.events if e["involved"]["metadata"].get("name") == name]


def claim_writes(client: FakeClient) -> list[str]:
    return [c.path for c in client.writes(RESOURCE_CLAIMS.path("ns"))]


def allocation_writes(client: FakeClient) -> list[str]:
    return [path for path, _ in allocation_results(client)]


def allocation_results(client: FakeClient) -> list[tuple[str, list[JsonDict]]]:
    """Each allocation write to a claim: its path and the device results it wrote.

    A refused claim gets a status write too (its Allocated=False condition); only a write
    carrying status.allocation is an allocation.
    """
    return [
        (c.path, c.body["status"]["allocation"]["devices"]["results"])
        for c in client.writes(RESOURCE_CLAIMS.path("ns"))
        if "allocation" in (c.body.get("status") or {})
    ]


def device_result(**extra: Any) -> JsonDict:
    return {"request": "dev", "driver": DRIVER, "pool": "n1", "device": "dev-0", **extra}


def allocated_condition(controller: AllocationController, name: str) -> tuple[str, str, str]:
    found = controller.claims.get(Key("ns", name))
    assert found is not None and found.status is not None
    [condition] = [c for c in found.status.conditions if c.type == "Allocated"]
    return condition.status, condition.reason, condition.message


# --- adminAccess ----------------------------------------------------------------------------


async def test_admin_claim_in_an_unlabeled_namespace_is_not_allocated() -> None:
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(controller, "p", "c1", adminAccess=True)
    await sync(controller, key)
    assert allocation_writes(client) == [], "an adminAccess claim was allocated without the label"
    [pod_message] = messages(client, "p")
    assert '"resource.dralloc.dev/admin-access: true"' in pod_message
    assert 'resourceclaim "c1"' in pod_message
    assert any("admin-access" in m for m in messages(client, "c1")), "no Event on the claim"
    assert {e["reason"] for e in client.events} == {REASON_FAILED}
    status, reason, message = allocated_condition(controller, "c1")
    assert (status, reason) == ("False", "AllocationFailed")
    assert "resource.dralloc.dev/admin-access" in message

    # The admin labels the namespace: the pod is retried at once and allocated.
    labelled = namespace("ns", admin=True)
    labelled["metadata"]["resourceVersion"] = "2"
    controller.runtime.cache[NAMESPACES].apply("MODIFIED", labelled)
    assert controller.queue.due_in(key) == 0.0
    await sync(controller, key)
    assert allocation_writes(client) == [STATUS_PATH]
    assert allocated_condition(controller, "c1") == ("True", "Allocated", "allocated on node n1")


async def test_admin_claim_is_refused_while_the_gate_is_off() -> None:
    client = FakeClient()
    controller = cluster(
        client, admin_namespace=True, feature_gates=FeatureGates.parse("DRAAdminAccess=false")
    )
    key = add_pod(controller, "p", "c1", adminAccess=True)
    await sync(controller, key)
    assert allocation_writes(client) == []
    assert any("DRAAdminAccess" in m for m in messages(client, "p"))
    assert "DRAAdminAccess" in allocated_condition(controller, "c1")[2]


async def test_admin_claim_in_a_labelled_namespace_is_allocated() -> None:
    client = FakeClient()
    controller = cluster(client, admin_namespace=True)
    key = add_pod(controller, "p", "c1", adminAccess=True)
    await sync(controller, key)
    assert allocation_results(client) == [(STATUS_PATH, [device_result(adminAccess=True)])]
    assert allocated_condition(controller, "c1") == ("True", "Allocated", "allocated on node n1")


async def test_ordinary_claims_need_no_label() -> None:
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(controller, "p", "c1")
    await sync(controller, key)
    assert allocation_results(client) == [(STATUS_PATH, [device_result()])]
    assert allocated_condition(controller, "c1") == ("True", "Allocated", "allocated on node n1")


# --- failed writes --------------------------------------------------------------------------


def fail_status_writes(client: FakeClient, error: BaseException) -> None:
    def fail(method: str, path: str, _body: JsonDict | None) -> BaseException | None:
        return error if method == "PATCH" and path == STATUS_PATH else None

    client.fail = fail


async def test_an_unanswered_write_keeps_the_device_until_the_watch_says_it_failed() -> None:
    client = FakeClient()
    controller = cluster(client)
    first = add_pod(controller, "p", "c1")
    fail_status_writes(client, aiohttp.ServerDisconnectedError())
    await sync(controller, first)
    c1 = controller.claims.get(Key("ns", "c1"))
    assert controller.state.is_assumed(c1), (
        "the device was freed although the write may have landed"
    )
    assert Key("ns", "c1") in controller.writer.unanswered

    # Another pod wants the only device: it must wait.
    client.fail = lambda *_: None
    second = add_pod(controller, "q", "c2")
    waiting = controller.pods.get(second)
    assert waiting is not None
    with pytest.raises(StillWaiting):  # not explained before EXPLAIN_GRACE
        controller.decider.choose(waiting, controller.decider.resolve_claims(waiting))
    controller.decider.failing_since[second] -= EXPLAIN_GRACE
    with pytest.raises(Unallocatable, match="0/1 nodes"):
        controller.decider.choose(waiting, controller.decider.resolve_claims(waiting))

    # The watch shows a newer claim without an allocation: the write did not land.
    newer = claim("ns", "c1", rv="2000")
    newer["metadata"]["finalizers"] = ["resource.dralloc.dev/delete-protection"]
    controller.runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", newer)
    assert Key("ns", "c1") not in controller.writer.unanswered
    assert not controller.state.is_assumed(c1)
    assert controller.queue.due_in(first) == 0.0


async def test_an_unanswered_write_that_landed_is_found_by_a_live_read() -> None:
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(controller, "p", "c1")
    fail_status_writes(client, ApiError(504, "Timeout", "etcdserver: request timed out"))
    await sync(controller, key)
    assert Key("ns", "c1") in controller.writer.unanswered
    # The pod waits for the answer instead of allocating the claim again.
    controller.queue.add(key)
    await sync(controller, key)
    assert claim_writes(client).count(STATUS_PATH) == 1

    # What the API server holds: the write landed after all.
    landed = allocated(claim("ns", "c1", rv="2000"), "p", "uid-p-p")
    client.remember(RESOURCE_CLAIMS, landed)
    client.fail = lambda *_: None
    task = asyncio.create_task(controller.writer.confirm_unanswered())
    try:
        for _ in range(50):
            if Key("ns", "c1") not in controller.writer.unanswered:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
    assert Key("ns", "c1") not in controller.writer.unanswered, "the live read never settled it"
    assert controller.state.is_assumed(controller.claims.get(Key("ns", "c1")))
    assert controller.queue.due_in(key) == 0.0


async def confirm_rounds(controller: AllocationController, rounds: int = 5) -> None:
    """Let the live-read loop run a few periods (CONFIRM_PERIOD made short by the caller)."""
    task = asyncio.create_task(controller.writer.confirm_unanswered())
    try:
        await asyncio.sleep(rounds * 0.01 + 0.02)
    finally:
        task.cancel()


async def unanswered_write(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[FakeClient, AllocationController]:
    """Pod p's write of claim c1 got no answer; the server answers again now; the live-read
    loop reads every 10 ms."""
    monkeypatch.setattr(writes, "CONFIRM_PERIOD", 0.01)
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(controller, "p", "c1")
    fail_status_writes(client, aiohttp.ServerDisconnectedError())
    await sync(controller, key)
    assert Key("ns", "c1") in controller.writer.unanswered
    client.fail = lambda *_: None
    return client, controller


async def test_a_live_read_of_the_written_over_version_waits_until_the_server_gives_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The server may still apply a write it has not answered (it works on a request for up
    # to its --request-timeout): a read of the very version written over says "not yet".
    _, controller = await unanswered_write(monkeypatch)
    write = controller.writer.unanswered[Key("ns", "c1")]
    await confirm_rounds(controller)
    assert controller.writer.unanswered.get(Key("ns", "c1")) is write, (
        "settled on a read of 'not yet'"
    )
    assert controller.state.is_assumed(controller.claims.get(Key("ns", "c1")))
    # Once the server cannot be working on it any more, the same read settles it.
    controller.writer.unanswered[Key("ns", "c1")] = dataclasses.replace(
        write, sent=write.sent - writes.LANDING_BOUND - 1
    )
    await confirm_rounds(controller)
    assert Key("ns", "c1") not in controller.writer.unanswered
    assert not controller.state.is_assumed(controller.claims.get(Key("ns", "c1")))


async def test_a_slow_live_read_does_not_settle_a_newer_write_of_the_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, controller = await unanswered_write(monkeypatch)
    # What the server holds changed since the write (it cannot land), but the read is slow.
    changed = claim("ns", "c1", rv="2000")
    client.remember(RESOURCE_CLAIMS, changed)
    answer = asyncio.Event()
    plain_get = client.get

    async def slow_get(*args: Any, **kwargs: Any) -> JsonDict:
        found = await plain_get(*args, **kwargs)
        await answer.wait()
        return found

    client.get = slow_get  # type: ignore[method-assign]
    task = asyncio.create_task(controller.writer.confirm_unanswered())
    try:
        await asyncio.sleep(0.05)
        # Meanwhile the claim was settled and a new write for it was sent, still unanswered.
        newer = dataclasses.replace(
            controller.writer.unanswered[Key("ns", "c1")], resource_version="2000"
        )
        controller.writer.unanswered[Key("ns", "c1")] = newer
        answer.set()
        await asyncio.sleep(0.05)
    finally:
        task.cancel()
    assert controller.writer.unanswered.get(Key("ns", "c1")) is newer, (
        "an old read settled a new write"
    )
    assert controller.state.is_assumed(controller.claims.get(Key("ns", "c1")))


async def test_nothing_is_decided_while_a_cache_relists_after_its_watch_expired() -> None:
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(controller, "p", "c1")
    controller.runtime.cache[RESOURCE_CLAIMS].whole = False  # a 410: claims being listed again
    await sync(controller, key)
    assert claim_writes(client) == []
    due = controller.queue.due_in(key)
    assert due is not None and due <= RELIST_DELAY, "the pod was dropped, not put back"
    controller.runtime.cache[RESOURCE_CLAIMS].whole = True
    controller.queue.add(key)
    await sync(controller, key)
    assert STATUS_PATH in claim_writes(client)


async def test_a_refused_write_frees_the_device_and_tells_the_user() -> None:
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(controller, "p", "c1")
    fail_status_writes(client, ApiError(422, "Invalid", "status.allocation: Invalid value"))
    await sync(controller, key)
    c1 = controller.claims.get(Key("ns", "c1"))
    assert not controller.state.is_assumed(c1)
    assert Key("ns", "c1") not in controller.writer.unanswered
    assert any("status.allocation: Invalid value" in m for m in messages(client, "p"))
    due = controller.queue.due_in(key)
    assert due is not None and due > 60


async def test_a_pod_that_came_up_while_its_write_failed_keeps_its_backoff() -> None:
    """A pod that came up in the queue while its writes were in flight (its claim's watch
    event, say) is decided again at once when they landed; after a failure, its retry keeps
    the backoff (an immediate requeue sent a refused write and its Event twice)."""
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(controller, "p", "c1")
    fail_status_writes(client, ApiError(422, "Invalid", "status.allocation: Invalid value"))
    controller.commits.resync.add(key)
    await sync(controller, key)
    due = controller.queue.due_in(key)
    assert due is not None and due > 60, due
    assert key not in controller.commits.resync


# --- explaining -----------------------------------------------------------------------------


async def test_a_pod_without_room_is_explained_only_after_a_grace_period() -> None:
    client = FakeClient()
    controller = cluster(client)
    await sync(controller, add_pod(controller, "p", "c1"))  # takes the only device
    second = add_pod(controller, "q", "c2")
    await sync(controller, second)
    assert messages(client, "q") == [], "explained before the grace period"
    assert second in controller.waiting
    controller.decider.failing_since[second] -= EXPLAIN_GRACE
    await sync(controller, second)
    assert messages(client, "q") and "0/1 nodes" in messages(client, "q")[0]


async def test_an_explanation_costs_one_search_over_every_node(monkeypatch: Any) -> None:
    """A pod due for an explanation is searched once, eagerly (every node filtered): a
    lazy search first would only fail again before the explaining one."""
    client = FakeClient()
    controller = cluster(client)
    await sync(controller, add_pod(controller, "p", "c1"))  # takes the only device
    second = add_pod(controller, "q", "c2")
    await sync(controller, second)
    searches: list[tuple[bool, bool]] = []
    real = controller.state.find_node

    def counted(*args: Any, **kwargs: Any) -> Any:
        searches.append((kwargs.get("explain", False), kwargs.get("admits") is None))
        return real(*args, **kwargs)

    monkeypatch.setattr(controller.state, "find_node", counted)
    controller.decider.failing_since[second] -= EXPLAIN_GRACE
    await sync(controller, second)
    assert messages(client, "q") and "0/1 nodes" in messages(client, "q")[0]
    assert searches == [(True, True)], searches  # one search, explaining, nodes filtered


async def test_an_error_the_search_meets_is_explained_at_once() -> None:
    client = FakeClient()
    controller = cluster(client)
    broken = [{"cel": {"expression": 'device.attributes["nowhere.example.com"].x == 1'}}]
    key = add_pod(controller, "p", "c1", selectors=broken)
    await sync(controller, key)
    assert messages(client, "p") and "CEL runtime error" in messages(client, "p")[0]


def in_tree_pod(name: str, claim_name: str) -> JsonDict:
    raw = pod("ns", name, [])
    del raw["metadata"]["annotations"]
    raw["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimName": claim_name}]
    return raw


async def test_in_tree_claims_get_no_condition_written() -> None:
    """resource.k8s.io/v1 claims have no status.conditions: the API server would drop the
    field from every write, so neither the allocation nor an explanation sends it."""
    client = FakeClient()
    controller = cluster(client, api_group="resource.k8s.io")
    for name, claim_name in (("p", "c1"), ("q", "c2")):
        put(controller.runtime, RESOURCE_CLAIMS, claim("ns", claim_name))
        put(controller.runtime, PODS, in_tree_pod(name, claim_name))
    await sync(controller, Key("ns", "p"))  # takes the only device
    # The in-tree kind's path: the client's group rewrite runs in these tests too.
    assert allocation_writes(client) == [client.path(RESOURCE_CLAIMS, "ns", "c1") + "/status"]
    assert STATUS_PATH.startswith("/apis/resource.dralloc.dev/")
    second = Key("ns", "q")
    await sync(controller, second)
    controller.decider.failing_since[second] -= EXPLAIN_GRACE
    await sync(controller, second)
    assert messages(client, "q") and "0/1 nodes" in messages(client, "q")[0], "not explained"
    status_writes = [
        c.body["status"] for c in client.writes("/status") if "resourceclaims" in c.path
    ]
    assert status_writes and all("conditions" not in s for s in status_writes), status_writes
    assert [c.path for c in client.writes(RESOURCE_CLAIMS.path("ns", "c2"))] == []


async def test_a_stale_write_after_a_long_wait_is_retried_at_once() -> None:
    """The pod waited for room through several backoffs; once it fits, its write meets a
    conflict (the pod changed meanwhile): it is decided again at once, not after the backoff
    its waiting built up."""
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(controller, "p", "c1")
    for _ in range(4):
        controller.queue.retry(key)  # the waits for room before
    pod_path = PODS.path("ns", "p")

    def conflict(method: str, path: str, _body: JsonDict | None) -> BaseException | None:
        if method in WRITES and path == pod_path:
            return Conflict(409, "Conflict", "the object has been modified")
        return None

    client.fail = conflict
    await sync(controller, key)
    due = controller.queue.due_in(key)
    assert due is not None and due < 0.5, due


async def test_a_change_while_the_decision_runs_wakes_the_pod_it_found_no_room_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Devices freed while a pod's decision is made (it is not among the waiting yet) wake
    it as they wake the waiting: it does not wait out its backoff."""
    client = FakeClient()
    controller = cluster(client)
    key = add_pod(controller, "p", "c1")
    for _ in range(4):
        controller.queue.retry(key)  # the waits for room before

    def decide_now(*_args: Any) -> Any:
        controller._wake()  # a claim released meanwhile (the watch's handler)
        raise StillWaiting()

    monkeypatch.setattr(controller.decider, "decide_now", decide_now)  # the race
    await sync(controller, key)
    due = controller.queue.due_in(key)
    assert due is not None and due < 0.5, due
    assert key in controller.waiting
