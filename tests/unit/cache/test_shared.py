"""The shared cache's fan-out: one decode per event, whatever the number of subscribers; the
same change to each; the informers run together (synced together, stopped together)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from operators.cache.informer import Change, Key
from operators.cache.shared import SharedCache
from operators.controllers.allocation import AllocationController
from operators.controllers.claims import ClaimController
from operators.controllers.taints import TaintController
from operators.kube import NODES, PODS, JsonDict, WatchEvent

from ..controllers.fakes import FakeClient, pod, runtime


def raw(name: str, rv: str = "1") -> JsonDict:
    return {
        "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv, "uid": f"u-{name}"}
    }


class CountingParse:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, raw: JsonDict) -> dict[str, Any]:
        self.calls += 1
        return {"name": raw["metadata"]["name"]}


def test_one_event_is_decoded_once_and_the_same_change_reaches_every_subscriber() -> None:
    parse_pods, parse_nodes = CountingParse(), CountingParse()
    cache = SharedCache(None, {PODS: parse_pods, NODES: parse_nodes})  # type: ignore[arg-type]
    first: list[Change[Any]] = []
    second: list[Change[Any]] = []
    both: list[Change[Any]] = []
    cache[PODS].add_handler(first.append)
    cache[PODS].add_handler(second.append)
    cache.subscribe([PODS, NODES], both.append)
    cache[PODS].apply("ADDED", raw("a"))
    assert parse_pods.calls == 1
    assert len(first) == len(second) == 1
    assert first[0] is second[0] is both[0]
    assert first[0].new is cache[PODS].get(Key("ns", "a"))  # the cached object, not a copy
    cache[NODES].apply("ADDED", {"metadata": {"name": "n1", "resourceVersion": "1", "uid": "u"}})
    assert [c.resource for c in both] == [PODS, NODES]
    assert len(first) == 1 and parse_nodes.calls == 1


def test_controllers_share_one_assume_cache_per_kind() -> None:
    cache = SharedCache(None, {PODS: CountingParse()})  # type: ignore[arg-type]
    assert cache.assumed(PODS) is cache.assumed(PODS)
    assert cache.assumed(PODS).informer is cache[PODS]


def test_a_pod_event_reaches_every_controller_from_one_decode() -> None:
    made = runtime(FakeClient())
    pods = made.cache[PODS]
    allocation, claims, taints = (
        AllocationController(made),
        ClaimController(made),
        TaintController(made),
    )
    decode = pods.parse
    decoded = [0]

    def counted(raw: JsonDict) -> Any:
        decoded[0] += 1
        return decode(raw)

    pods.parse = counted
    bound = pod("ns", "p", [{"name": "dev", "resourceClaimTemplateName": "t"}])
    bound["spec"]["nodeName"] = "n1"
    pods.apply("ADDED", bound)
    assert decoded[0] == 1
    key = Key("ns", "p")
    assert allocation.queue.due_in(key) == 0.0
    assert claims.queue.due_in(("pod", key)) == 0.0
    assert taints.queue.due_in(key) == 0.0


class Lists:
    """list answers one object per kind; watch streams what a test puts in its queue."""

    def __init__(self, *, fail: bool = False) -> None:
        self.streams: dict[str, asyncio.Queue[WatchEvent | BaseException]] = {}
        self.listed: list[str] = []
        self.gate = asyncio.Event()  # the pods' list waits for it
        self.fail = fail

    async def list_pages(self, *args: Any, shape: Any = None, **kwargs: Any) -> AsyncIterator[Any]:
        yield await self.list(*args, **kwargs)

    async def list(self, resource: Any) -> tuple[list[JsonDict], str]:
        if resource.plural == "pods":
            await self.gate.wait()
        self.listed.append(resource.plural)
        return [raw(f"{resource.plural}-0")], "1"

    async def watch(self, resource: Any, rv: str, **_: Any) -> AsyncIterator[WatchEvent]:
        stream = self.streams.setdefault(resource.plural, asyncio.Queue())
        while True:
            item = await stream.get()
            if isinstance(item, BaseException):
                raise item
            yield item


async def test_the_informers_sync_together_and_on_synced_runs_once_after_all() -> None:
    client = Lists()
    cache = SharedCache(client, {PODS: CountingParse(), NODES: CountingParse()})  # type: ignore[arg-type]
    synced: list[list[str]] = []
    seen: list[str] = []
    cache.subscribe([PODS, NODES], lambda change: seen.append(change.key.name))
    task = asyncio.create_task(cache.run(on_synced=lambda: synced.append(list(client.listed))))
    try:
        for _ in range(100):
            if client.listed:
                break
            await asyncio.sleep(0.01)
        assert client.listed == ["nodes"] and not cache.synced and synced == []
        client.gate.set()
        await asyncio.wait_for(cache.wait_synced(), 5)
        for _ in range(100):
            if synced:
                break
            await asyncio.sleep(0.01)
        assert synced == [["nodes", "pods"]] and cache.sync_seconds is not None
        client.streams.setdefault("pods", asyncio.Queue()).put_nowait(
            WatchEvent("ADDED", raw("late", "2"))
        )
        for _ in range(100):
            if "late" in seen:
                break
            await asyncio.sleep(0.01)
        assert sorted(seen) == ["late", "nodes-0", "pods-0"]
        assert synced == [["nodes", "pods"]], "on_synced ran again"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_an_informer_failing_unexpectedly_stops_them_all() -> None:
    client = Lists()
    client.gate.set()
    cache = SharedCache(client, {PODS: CountingParse(), NODES: CountingParse()})  # type: ignore[arg-type]
    task = asyncio.create_task(cache.run())
    await asyncio.wait_for(cache.wait_synced(), 5)
    await asyncio.sleep(0.05)
    client.streams["pods"].put_nowait(RuntimeError("a bug"))
    with pytest.raises(ExceptionGroup) as failed:
        await asyncio.wait_for(task, 5)
    assert failed.group_contains(RuntimeError, match="a bug")
