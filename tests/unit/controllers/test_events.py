"""Event de-duplication (EventRecorder): one Event per object, reason and message until
``repeat_after`` has passed; a post that failed is not counted; the memory stays bounded."""

from __future__ import annotations

import types
from typing import Any

import aiohttp
import pytest

from operators.controllers import runtime
from operators.controllers.runtime import EventRecorder
from operators.kube import ApiError, JsonDict

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


@pytest.mark.parametrize(
    "error", [ApiError(503, "ServiceUnavailable", "down"), aiohttp.ServerDisconnectedError()]
)
async def test_a_failed_post_is_forgotten_so_the_next_one_is_sent(error: BaseException) -> None:
    client = FakeClient()
    events = EventRecorder(client)  # type: ignore[arg-type]
    client.fail = lambda *_: error
    await events.post(involved("u1"), "R", "m")  # best effort: no exception
    assert client.events == []
    client.fail = lambda *_: None
    await events.post(involved("u1"), "R", "m")
    assert len(client.events) == 1
