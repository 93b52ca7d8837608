"""Device decisions run off the event loop, with a wall-clock budget.

- While one pod's decision runs (CEL, searches), the event loop goes on: other coroutines
  (the webhook, probes, Lease renewal, watches) are not stalled.
- Changes to the allocator state that arrive meanwhile wait and are applied in order after
  the decision, so the decision reads a consistent state.
- A decision over its budget gives the pod a reason and backs off; it is not woken by every
  cluster change.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from operators import metrics
from operators.allocator.errors import DecisionTimeout
from operators.cache.informer import Key
from operators.controllers.allocation import AllocationController
from operators.controllers.allocation.decide import INLINE_SLICE
from operators.controllers.allocation.outcomes import TooSlow
from operators.kube import RESOURCE_CLAIMS, RESOURCE_SLICES

from ..fakes import FakeClient, allocated, claim, one_device_cluster, put, resource_slice
from .test_failures import add_pod, allocation_writes, sync


def controller_with(client: FakeClient, **settings: Any) -> AllocationController:
    return AllocationController(one_device_cluster(client, **settings))


def block_decisions(
    controller: AllocationController, monkeypatch: Any
) -> tuple[threading.Event, threading.Event]:
    """Decisions in the thread wait for ``release`` (after setting ``entered``); the first
    try on the loop runs out of its slice at once, as a costly decision's would."""
    entered, release = threading.Event(), threading.Event()
    real = controller.state.find_node

    def blocked_find_node(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("budget_seconds") == INLINE_SLICE:
            raise DecisionTimeout(INLINE_SLICE)
        entered.set()
        assert release.wait(5)
        return real(*args, **kwargs)

    monkeypatch.setattr(controller.state, "find_node", blocked_find_node)
    return entered, release


async def test_the_event_loop_runs_while_a_decision_is_made(monkeypatch: Any) -> None:
    client = FakeClient()
    controller = controller_with(client)
    key = add_pod(controller, "p", "c1")
    real = controller.state.find_node

    def slow_find_node(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        budget = kwargs.get("budget_seconds")
        # Pure CPU, as a costly selector is; well inside one decision slice (0.5 s), so that
        # a busy machine cannot push it past the slice's deadline.
        while time.monotonic() < started + 0.3:
            if budget is not None and time.monotonic() > started + budget:
                raise DecisionTimeout(budget)  # as the allocator's deadline checks do
        return real(*args, **kwargs)

    monkeypatch.setattr(controller.state, "find_node", slow_find_node)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    beat = asyncio.create_task(ticker())
    await sync(controller, key)
    beat.cancel()
    # On the loop, the ticker would get no turn at all for 0.3 s.
    assert ticks >= 10, f"the event loop was stalled: {ticks} ticks in 0.3 s"
    assert controller.commits.allocated_pods == 1


async def test_state_changes_wait_for_the_decision_and_keep_their_order(
    monkeypatch: Any,
) -> None:
    client = FakeClient()
    controller = controller_with(client)
    key = add_pod(controller, "p", "c1")
    entered, release = block_decisions(controller, monkeypatch)
    task = asyncio.create_task(sync(controller, key))
    while not entered.is_set():
        await asyncio.sleep(0.005)
    slices = controller.runtime.cache[RESOURCE_SLICES]
    slices.apply("ADDED", resource_slice("n2", devices=1))
    slices.apply("DELETED", resource_slice("n2", devices=1))
    slices.apply("ADDED", resource_slice("n3", devices=2))
    assert set(controller.state.node_names()) == {"n1"}, "changed under a running decision"
    release.set()
    await task
    assert set(controller.state.node_names()) == {"n1", "n3"}
    assert controller.thread.deferred == []


async def test_a_cancelled_wait_does_not_unfreeze_the_state_early(monkeypatch: Any) -> None:
    client = FakeClient()
    controller = controller_with(client)
    add_pod(controller, "p", "c1")
    entered, release = block_decisions(controller, monkeypatch)
    pod = controller.pods.get(Key("ns", "p"))
    assert pod is not None
    entries = controller.decider.resolve_claims(pod)
    waiter = asyncio.create_task(controller.decider.decide_off_loop(pod, entries))
    while not entered.is_set():
        await asyncio.sleep(0.005)
    waiter.cancel()  # leadership lost, say
    await asyncio.sleep(0.02)
    controller.runtime.cache[RESOURCE_SLICES].apply("ADDED", resource_slice("n2", devices=1))
    assert "n2" not in controller.state.node_names(), "the thread still reads the state"
    release.set()
    for _ in range(200):
        if "n2" in controller.state.node_names():
            break
        await asyncio.sleep(0.01)
    assert "n2" in controller.state.node_names()


async def test_a_decision_over_budget_is_reported_and_backs_off() -> None:
    client = FakeClient()
    controller = controller_with(client, decision_budget=1e-9)
    # Two devices: the budget is checked before each selector evaluation that is not cached.
    controller.runtime.cache[RESOURCE_SLICES].apply("MODIFIED", _two_devices())
    key = add_pod(controller, "p", "c1", selectors=[{"cel": {"expression": "true"}}])
    pod = controller.pods.get(key)
    assert pod is not None
    with pytest.raises(TooSlow, match=r"allocation search exceeded 1e-09s"):
        controller.decider.choose(pod, controller.decider.resolve_claims(pod))
    await sync(controller, key)
    assert any("allocation search exceeded" in e["message"] for e in client.events)
    assert key not in controller.waiting, "woken by every change, it would spend its budget again"
    due = controller.queue.due_in(key)
    assert due is not None and due > 0
    assert controller.commits.allocated_pods == 0


def _two_devices() -> Any:
    raw = resource_slice("n1", devices=2)
    raw["metadata"]["resourceVersion"] = "2"
    return raw


async def test_a_costly_decision_goes_in_slices_behind_the_other_pods(monkeypatch: Any) -> None:
    from operators.controllers.allocation import decide

    monkeypatch.setattr(decide, "DECISION_SLICE", 1e-9)
    client = FakeClient()
    controller = controller_with(client, decision_budget=4e-9)
    controller.runtime.cache[RESOURCE_SLICES].apply("MODIFIED", _two_devices())
    key = add_pod(controller, "p", "c1", selectors=[{"cel": {"expression": "true"}}])
    await sync(controller, key)  # slice 1 (1e-9): back in the queue, nothing said yet
    assert controller.decider.decision_spent[key] == pytest.approx(1e-9)
    assert client.events == []
    assert controller.queue.due_in(key) == 0.0
    await sync(controller, key)  # slice 2, as long as all before it: 1e-9
    assert controller.decider.decision_spent[key] == pytest.approx(2e-9)
    await sync(controller, key)  # slice 3: 2e-9, and the budget is spent: the pod is told
    assert any("allocation search exceeded 4e-09s" in e["message"] for e in client.events)
    assert key not in controller.decider.decision_spent
    due = controller.queue.due_in(key)
    assert due is not None and due > 0


async def test_a_quick_decision_is_made_on_the_loop_without_a_thread() -> None:
    client = FakeClient()
    controller = controller_with(client)
    key = add_pod(controller, "p", "c1")
    await sync(controller, key)
    assert controller.commits.allocated_pods == 1
    assert controller.thread._executor is None, "a hand-off for a decision of milliseconds"


async def test_a_pod_decided_while_the_thread_reads_sees_the_pods_decided_before_it() -> None:
    """One device, two pods. While something else reads in the decision thread (the quota
    status writer does, every second), the first pod's assumption is deferred; the second
    pod must still find the device taken, not get it as well."""
    client = FakeClient()
    controller = controller_with(client)
    first = add_pod(controller, "p1", "c1")
    second = add_pod(controller, "p2", "c2")
    release = threading.Event()
    reading = asyncio.create_task(controller.thread.run(release.wait, 5))
    await asyncio.sleep(0.05)  # the read holds the thread
    assert controller.thread.busy

    async def both() -> None:
        await sync(controller, first)
        await sync(controller, second)

    deciding = asyncio.create_task(both())
    await asyncio.sleep(0.2)
    release.set()
    assert await reading
    await deciding
    assert [path.rsplit("/", 2)[-2] for path in allocation_writes(client)] == ["c1"]


async def test_a_decision_waits_for_the_changes_deferred_while_the_thread_read() -> None:
    """One device. While something else reads in the decision thread, the watch shows it
    allocated to another claim: the change is deferred. A pod decided now must first see it
    (and wait, no room), not choose the device and be caught by the clash check after."""
    client = FakeClient()
    controller = controller_with(client)
    key = add_pod(controller, "p1", "c1")
    release = threading.Event()
    reading = asyncio.create_task(controller.thread.run(release.wait, 5))
    await asyncio.sleep(0.05)  # the read holds the thread
    put(controller.runtime, RESOURCE_CLAIMS, allocated(claim("ns", "c9"), "other", "uid-other"))
    assert controller.thread.deferred, "the change waits for the read"
    clashes = metrics.ALLOCATIONS.labels(result="clash")._value.get()
    deciding = asyncio.create_task(sync(controller, key))
    await asyncio.sleep(0.2)
    release.set()
    assert await reading
    await deciding
    assert allocation_writes(client) == []
    assert metrics.ALLOCATIONS.labels(result="clash")._value.get() == clashes


async def test_a_device_taken_while_the_pod_waits_for_a_write_slot_is_not_written() -> None:
    """The pod is decided, then waits for a write slot (all of them busy); meanwhile the
    watch shows another claim allocated to the same device (written by hand, or by another
    allocator). The decision is not written: the pod is decided again, and finds no room."""
    client = FakeClient()
    controller = controller_with(client)
    key = add_pod(controller, "p1", "c1")
    controller.commits.slots = asyncio.Semaphore(0)  # every write slot in use
    deciding = asyncio.create_task(sync(controller, key))
    await asyncio.sleep(0.1)
    assert not deciding.done()
    put(controller.runtime, RESOURCE_CLAIMS, allocated(claim("ns", "c9"), "other", "uid-other"))
    controller.commits.slots.release()
    await deciding
    assert allocation_writes(client) == []
    assert controller.queue.pending() >= 1  # decided again soon
    await asyncio.sleep(0.1)
    await sync(controller, key)
    assert allocation_writes(client) == []
    assert key in controller.waiting
