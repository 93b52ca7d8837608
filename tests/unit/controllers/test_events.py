"""Events (EventRecorder): one Event per object, reason and message until ``repeat_after``
has passed; a post the server could not take is tried again for a while, a refused one is
forgotten; the memory and the Events waiting for a try stay bounded."""

from __future__ import annotations

import asyncio
import contextlib
import types
from typing import Any

import aiohttp
import pytest

from operators import metrics
from operators.controllers import runtime
from operators.controllers.runtime import EventRecorder
from operators.kube import ApiError, JsonDict

from . import fakes
from .fakes import FakeClient


def involved(uid: str) -> JsonDict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "ns", "name": uid, "uid": uid},
    }


def test_a_repeat_is_skipped_until_repeat_after_has_passed() -> None:
    events = EventRecorder(None, repeat_after=600.0)  # type: ignore[arg-type]
    assert events.should_post("u1", "R", "m", now=0.0)
    assert not events.should_post("u1", "R", "m", now=1.0)
    assert not events.should_post("u1", "R", "m", now=599.9)
    assert events.should_post("u1", "R", "m", now=600.0)
    assert not events.should_post("u1", "R", "m", now=1000.0)  # counted from the last post


def test_another_object_reason_or_message_is_posted() -> None:
    events = EventRecorder(None)  # type: ignore[arg-type]
    assert events.should_post("u1", "R", "m", now=0.0)
    assert events.should_post("u2", "R", "m", now=0.0)
    assert events.should_post("u1", "S", "m", now=0.0)
    assert events.should_post("u1", "R", "other", now=0.0)
    assert not events.should_post("u2", "R", "m", now=0.0)


def test_the_memory_drops_what_is_older_than_repeat_after() -> None:
    events = EventRecorder(None, repeat_after=10.0)  # type: ignore[arg-type]
    for i in range(10_000):
        events.should_post(f"old-{i}", "R", "m", now=0.0)
    events.should_post("recent", "R", "m", now=5.0)
    assert len(events._last) == 10_001
    events.should_post("new", "R", "m", now=12.0)  # over the bound: prune
    assert set(events._last) == {("recent", "R", "m"), ("new", "R", "m")}
    assert not events.should_post("recent", "R", "m", now=12.0)


async def test_post_sends_one_event_for_repeats(monkeypatch: Any) -> None:
    client = FakeClient()
    events = EventRecorder(client, repeat_after=600.0)  # type: ignore[arg-type]
    clock = [100.0]
    monkeypatch.setattr(runtime, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    for _ in range(3):
        await events.post(involved("u1"), "R", "no room", warning=True)
    await events.post(involved("u1"), "R", "allocated")
    assert [(e["message"], e["type_"]) for e in client.events] == [
        ("no room", "Warning"),
        ("allocated", "Normal"),
    ]
    clock[0] += 600.0
    await events.post(involved("u1"), "R", "no room", warning=True)
    assert len(client.events) == 3


class Clock:
    """``runtime.time`` in these tests: ``now`` moves only when a test moves it."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(runtime, "time", clock)
    return clock


async def posts_again(client: FakeClient, events: EventRecorder) -> None:
    """The server takes Events again: the one given up on is posted by the next call."""
    client.fail = lambda *_: None
    await events.post(involved("u1"), "R", "m")
    assert len(client.events) == 1


async def run_due(events: EventRecorder) -> None:
    """Let ``events.run`` post what is due now (then stop it)."""
    task = asyncio.create_task(events.run())
    for _ in range(20):
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@pytest.mark.parametrize(
    "error",
    [
        ApiError(503, "ServiceUnavailable", "down"),
        aiohttp.ServerDisconnectedError(),
    ],
)
async def test_a_post_the_server_could_not_take_is_tried_again_when_due(
    error: BaseException, clock: Clock
) -> None:
    client = FakeClient()
    events = EventRecorder(client)  # type: ignore[arg-type]
    client.fail = lambda *_: error
    await events.post(involved("u1"), "R", "m", warning=True)  # best effort: no exception
    assert client.events == [] and events.pending == 1
    await events.post(involved("u1"), "R", "m", warning=True)  # a repeat while it waits
    assert events.pending == 1
    clock.now += runtime.EVENT_RETRY_DELAYS_S[0]
    await run_due(events)  # the server is still away: tried, and waits longer
    assert client.events == [] and events.pending == 1
    client.fail = lambda *_: None
    clock.now += runtime.EVENT_RETRY_DELAYS_S[1] - 0.1
    await run_due(events)
    assert client.events == []  # not due yet
    clock.now += 0.1
    await run_due(events)
    assert [(e["message"], e["type_"]) for e in client.events] == [("m", "Warning")]
    assert events.pending == 0
    await events.post(involved("u1"), "R", "m", warning=True)  # posted: a repeat again
    assert len(client.events) == 1


async def test_after_its_last_try_an_event_is_forgotten_so_the_next_one_is_sent(
    clock: Clock,
) -> None:
    client = FakeClient()
    events = EventRecorder(client)  # type: ignore[arg-type]
    client.fail = lambda *_: ApiError(503, "ServiceUnavailable", "down")
    before = metrics.EVENTS_NOT_RECORDED._value.get()
    await events.post(involved("u1"), "R", "m")
    for delay in runtime.EVENT_RETRY_DELAYS_S:
        assert events.pending == 1
        clock.now += delay
        await run_due(events)
    assert events.pending == 0
    assert metrics.EVENTS_NOT_RECORDED._value.get() == before + 1
    tries = [c for c in client.calls if c.method == "POST" and "/events" in c.path]
    assert len(tries) == 1 + len(runtime.EVENT_RETRY_DELAYS_S)
    await posts_again(client, events)


async def test_a_refused_post_is_not_tried_again_but_forgotten(clock: Clock) -> None:
    client = FakeClient()
    events = EventRecorder(client)  # type: ignore[arg-type]
    client.fail = lambda *_: ApiError(403, "Forbidden", "namespace ns is being terminated")
    await events.post(involved("u1"), "R", "m")
    assert events.pending == 0
    await posts_again(client, events)


async def test_the_events_waiting_for_a_try_are_bounded(clock: Clock) -> None:
    client = FakeClient()
    events = EventRecorder(client)  # type: ignore[arg-type]
    client.fail = lambda *_: ApiError(503, "ServiceUnavailable", "down")
    for i in range(runtime.MAX_EVENTS_PENDING + 5):
        await events.post(involved(f"u{i}"), "R", "m")
    assert events.pending == runtime.MAX_EVENTS_PENDING


async def runtime_with_one_event_unposted() -> tuple[FakeClient, runtime.Runtime]:
    """A runtime whose cache is synced, and one Event the server could not take."""
    client = FakeClient()
    made = fakes.runtime(client)
    for informer in made.cache.informers.values():
        informer.synced.set()
    client.fail = lambda *_: ApiError(503, "ServiceUnavailable", "down")
    await made.events.post(involved("u1"), "R", "m")
    return client, made


async def cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def assert_posted_while_leading(client: FakeClient, made: runtime.Runtime) -> None:
    """The Event waiting for a try, "m", is posted once the replica leads (then it stops)."""
    leading = asyncio.create_task(made._lead())
    try:
        for _ in range(100):
            if client.events:
                break
            await asyncio.sleep(0)
        assert [e["message"] for e in client.events] == ["m"]
    finally:
        await cancelled(leading)


async def test_the_controllers_scope_tries_the_events_again(clock: Clock) -> None:
    """Retries run while this replica leads (``Runtime._lead``), beside the controllers."""
    client, made = await runtime_with_one_event_unposted()
    client.fail = lambda *_: None
    clock.now += runtime.EVENT_RETRY_DELAYS_S[0]
    await assert_posted_while_leading(client, made)


async def test_an_event_waiting_for_a_try_is_dropped_when_a_newer_one_is_posted(
    clock: Clock,
) -> None:
    """While the server was away the pod waited; now it is allocated: the old Warning is
    never posted after the new Event (kubectl describe would show it as the latest)."""
    client = FakeClient()
    events = EventRecorder(client)  # type: ignore[arg-type]
    client.fail = lambda *_: ApiError(503, "ServiceUnavailable", "down")
    await events.post(involved("u1"), "R", "no room", warning=True)
    client.fail = lambda *_: None
    await events.post(involved("u1"), "R", "allocated")
    clock.now += 60.0
    await run_due(events)
    assert [e["message"] for e in client.events] == ["allocated"]
    assert events.pending == 0
    await events.post(involved("u1"), "R", "no room", warning=True)  # new news again
    assert [e["message"] for e in client.events] == ["allocated", "no room"]


async def test_an_event_is_given_up_on_once_its_window_has_passed(clock: Clock) -> None:
    client = FakeClient()
    events = EventRecorder(client)  # type: ignore[arg-type]
    client.fail = lambda *_: ApiError(503, "ServiceUnavailable", "down")
    await events.post(involved("u1"), "R", "m")
    clock.now += runtime.EVENT_RETRY_WINDOW_S  # the replica was stalled meanwhile
    await run_due(events)
    assert events.pending == 0  # failed again, and too late for another try


async def test_an_event_waiting_while_the_replica_stands_by_is_posted_when_it_leads_again(
    clock: Clock,
) -> None:
    """Leadership is lost while the server is away (they go together): the Event waits, and
    is posted in the next term (the controllers would not post it again: an unchanged
    condition is not rewritten)."""
    client, made = await runtime_with_one_event_unposted()
    leading = asyncio.create_task(made._lead())
    for _ in range(20):
        await asyncio.sleep(0)
    await cancelled(leading)  # leadership lost
    assert made.events.pending == 1 and client.events == []
    client.fail = lambda *_: None
    clock.now += runtime.EVENT_RETRY_DELAYS_S[0]
    await assert_posted_while_leading(client, made)
