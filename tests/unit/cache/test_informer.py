"""The informer store: events, relist diffs, indexes, bad objects, and the list+watch loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from operators.cache.backoff import Backoff
from operators.cache.informer import Change, Informer, Key
from operators.kube import PODS, UNREACHABLE_RETRY_CAP_S, Gone, JsonDict, WatchEvent


def obj(name: str, rv: str, uid: str = "", node: str = "", ns: str = "default") -> JsonDict:
    return {
        "metadata": {
            "namespace": ns,
            "name": name,
            "resourceVersion": rv,
            "uid": uid or f"u-{name}",
        },
        "spec": {"nodeName": node},
    }


def parse(raw: JsonDict) -> dict[str, Any]:
    if raw["metadata"]["name"].startswith("bad"):
        raise ValueError("invalid")
    return {
        "name": raw["metadata"]["name"],
        "node": raw["spec"]["nodeName"],
        "uid": raw["metadata"]["uid"],
    }


def make() -> tuple[Informer[dict[str, Any]], list[Change[Any]]]:
    informer: Informer[dict[str, Any]] = Informer(None, PODS, parse)  # type: ignore[arg-type]
    changes: list[Change[Any]] = []
    informer.add_handler(changes.append)
    return informer, changes


def summary(changes: list[Change[Any]]) -> list[tuple[str, str]]:
    kinds = []
    for change in changes:
        kind = "del" if change.new is None else ("add" if change.old is None else "mod")
        kinds.append((kind, change.key.name))
    return kinds


def test_events_update_store_and_notify() -> None:
    informer, changes = make()
    informer.apply("ADDED", obj("a", "1"))
    informer.apply("MODIFIED", obj("a", "2", node="n1"))
    informer.apply("MODIFIED", obj("a", "2", node="n1"))  # same version: no change
    informer.apply("DELETED", obj("a", "3"))
    informer.apply("DELETED", obj("a", "3"))  # unknown: no change
    assert summary(changes) == [("add", "a"), ("mod", "a"), ("del", "a")]
    assert changes[1].old == {"name": "a", "node": "", "uid": "u-a"}
    assert informer.get(Key("default", "a")) is None


def test_relist_emits_deletions_for_vanished_objects() -> None:
    informer, changes = make()
    informer.replace([obj("a", "1"), obj("b", "1"), obj("c", "1")])
    changes.clear()
    informer.replace([obj("a", "1"), obj("b", "5"), obj("d", "6")])
    assert sorted(summary(changes)) == [("add", "d"), ("del", "c"), ("mod", "b")]
    assert sorted(k.name for k in informer) == ["a", "b", "d"]


def test_same_name_new_uid_is_a_delete_then_add() -> None:
    informer, changes = make()
    informer.apply("ADDED", obj("a", "1", uid="one"))
    informer.apply("MODIFIED", obj("a", "7", uid="two"))
    assert summary(changes) == [("add", "a"), ("del", "a"), ("add", "a")]


def test_invalid_object_is_treated_as_absent() -> None:
    informer, changes = make()
    informer.apply("ADDED", obj("bad-1", "1"))
    assert informer.get(Key("default", "bad-1")) is None
    assert changes == []


def test_index_follows_updates_and_deletes() -> None:
    informer, _ = make()
    informer.add_index("node", lambda o: [o["node"]] if o["node"] else [])
    informer.apply("ADDED", obj("a", "1", node="n1"))
    informer.apply("ADDED", obj("b", "1", node="n1"))
    assert [o["name"] for o in informer.by_index("node", "n1")] == ["a", "b"]
    informer.apply("MODIFIED", obj("a", "2", node="n2"))
    informer.apply("DELETED", obj("b", "3", node="n1"))
    assert informer.by_index("node", "n1") == []
    assert [o["name"] for o in informer.by_index("node", "n2")] == ["a"]


def test_late_subscriber_sees_existing_objects() -> None:
    informer, _ = make()
    informer.apply("ADDED", obj("a", "1"))
    late: list[Change[Any]] = []
    informer.add_handler(late.append)
    assert summary(late) == [("add", "a")]


def test_failing_handler_does_not_stop_others() -> None:
    informer, changes = make()

    def broken(change: Change[Any]) -> None:
        raise RuntimeError("boom")

    informer._handlers.insert(0, broken)
    informer.apply("ADDED", obj("a", "1"))
    assert summary(changes) == [("add", "a")]


class ScriptedClient:
    """Lists and watch streams played from a script; records what was asked."""

    def __init__(self, lists: list[tuple[list[JsonDict], str]], watches: list[Any]) -> None:
        self.lists = lists
        self.watches = watches
        self.watched_from: list[str] = []

    async def list(self, resource: Any) -> tuple[list[JsonDict], str]:
        return self.lists.pop(0)

    async def list_pages(self, resource: Any, **_: Any) -> AsyncIterator[Any]:
        yield await self.list(resource)

    async def watch(self, resource: Any, rv: str, **_: Any) -> AsyncIterator[WatchEvent]:
        self.watched_from.append(rv)
        step = self.watches.pop(0) if self.watches else None
        if step is None:
            await asyncio.sleep(3600)
            return
        for item in step:
            if isinstance(item, Exception):
                raise item
            yield item


async def test_run_relists_on_gone_and_diffs() -> None:
    client = ScriptedClient(
        lists=[([obj("a", "1"), obj("b", "2")], "10"), ([obj("a", "1")], "20")],
        watches=[
            [
                WatchEvent("ADDED", obj("c", "11")),
                WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "15"}}),
            ],
            [Gone(410, "Expired", "too old")],
        ],
    )
    informer: Informer[dict[str, Any]] = Informer(client, PODS, parse, backoff=Backoff(0.001, 0.01))  # type: ignore[arg-type]
    changes: list[Change[Any]] = []
    informer.add_handler(changes.append)
    task = asyncio.create_task(informer.run())
    try:
        for _ in range(200):
            await asyncio.sleep(0.005)
            if len(client.watched_from) >= 3:
                break
    finally:
        task.cancel()
    assert informer.synced.is_set()
    # first watch from the list's version, the second from the bookmark, then a relist
    assert client.watched_from == ["10", "15", "20"]
    assert informer.seen_version == 20  # the lists' and the bookmark's versions count too
    assert sorted(k.name for k in informer) == ["a"]
    assert ("del", "c") in summary(changes) and ("del", "b") in summary(changes)
    assert informer.relists == 1  # the first list is a sync, not a relist


async def test_a_cache_is_not_whole_from_its_watch_expiring_until_it_has_listed_again() -> None:
    relist = asyncio.Event()

    class SlowRelist(ScriptedClient):
        async def list(self, resource: Any) -> tuple[list[JsonDict], str]:
            if len(self.lists) == 1:  # the relist after the 410
                await relist.wait()
            return await super().list(resource)

    client = SlowRelist(
        lists=[([obj("a", "1")], "10"), ([obj("a", "1")], "20")],
        watches=[[WatchEvent("ADDED", obj("c", "11")), Gone(410, "Expired", "too old")]],
    )
    informer: Informer[dict[str, Any]] = Informer(client, PODS, parse, backoff=Backoff(0.001, 0.01))  # type: ignore[arg-type]
    assert not informer.whole
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.sleep(0.02)
        assert informer.synced.is_set() and not informer.whole, "whole while the relist waits"
        relist.set()
        await asyncio.sleep(0.02)
        assert informer.whole
    finally:
        task.cancel()


async def test_a_list_in_pages_is_stored_at_once_when_its_last_page_is_in() -> None:
    """Between pages nothing of the new list shows: a reader never sees half of one list
    beside half of the cache before it (a device freed on one page, taken on the next)."""
    second_page = asyncio.Event()

    class Paged(ScriptedClient):
        async def list_pages(self, resource: Any, **_: Any) -> AsyncIterator[Any]:
            if not self.lists:  # the relist: two pages, the second held back
                yield [obj("a", "21")], "30"
                await second_page.wait()
                yield [obj("c", "25")], "30"
                return
            async for page in super().list_pages(resource):
                yield page

    client = Paged(
        lists=[([obj("a", "1"), obj("b", "2")], "10")],
        watches=[[Gone(410, "Expired", "too old")]],
    )
    informer: Informer[dict[str, Any]] = Informer(client, PODS, parse, backoff=Backoff(0.001, 0.01))  # type: ignore[arg-type]
    changes: list[Change[Any]] = []
    informer.add_handler(changes.append)
    task = asyncio.create_task(informer.run())
    try:
        for _ in range(200):
            await asyncio.sleep(0.005)
            if informer.synced.is_set() and not informer.whole:
                break
        await asyncio.sleep(0.02)  # the relist's first page is in by now
        assert summary(changes) == [("add", "a"), ("add", "b")], "a page showed before the list"
        assert informer.meta(Key("default", "a")).resource_version == "1"  # type: ignore[union-attr]
        second_page.set()
        for _ in range(200):
            await asyncio.sleep(0.005)
            if informer.whole:
                break
    finally:
        task.cancel()
    assert summary(changes)[2:] == [("mod", "a"), ("add", "c"), ("del", "b")]
    assert informer.seen_version == 30


async def test_run_backs_off_on_errors() -> None:
    client = ScriptedClient(
        lists=[([], "1")],
        watches=[[ValueError("broken json")]],
    )
    informer: Informer[dict[str, Any]] = Informer(client, PODS, parse, backoff=Backoff(0.001, 0.01))  # type: ignore[arg-type]
    task = asyncio.create_task(informer.run())
    await asyncio.sleep(0.05)
    task.cancel()
    # one failure counted, and the watch resumed from the same version (no relist)
    assert informer.backoff.failures == 1
    assert client.watched_from == ["1", "1"]


def test_backoff_doubles_and_caps() -> None:
    backoff = Backoff(base=1.0, cap=5.0)
    assert [backoff.next() for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.reset()
    assert backoff.next() == 1.0


@pytest.mark.parametrize("rv", ["abc", ""])
def test_non_numeric_versions_still_apply(rv: str) -> None:
    informer, changes = make()
    informer.apply("ADDED", obj("a", rv))
    assert summary(changes) == [("add", "a")]


def test_seen_version_is_the_newest_event_applied() -> None:
    informer: Informer[dict[str, Any]] = Informer(None, PODS, parse)  # type: ignore[arg-type]
    assert informer.seen_version == 0
    informer.apply("ADDED", obj("a", "7"))
    informer.apply("DELETED", obj("a", "9"))
    informer.apply("ADDED", obj("b", "8"))  # a list's items come in any order
    assert informer.seen_version == 9


async def test_refused_connections_are_retried_a_few_seconds_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An API server that is down (connections refused) is tried again within the short cap,
    however long it has been down; other errors back off to the full cap."""
    import types

    import aiohttp

    from operators.cache import informer as informer_module

    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr(informer_module.asyncio, "sleep", sleep)
    informer: Informer[dict[str, Any]] = Informer(None, PODS, parse, backoff=Backoff(0.2, 30.0))  # type: ignore[arg-type]
    key = types.SimpleNamespace(host="apiserver", port=6443, ssl=True)
    refused = aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "refused"))  # type: ignore[arg-type]
    for _ in range(12):
        await informer._back_off(refused)
    assert slept[:4] == [0.2, 0.4, 0.8, 1.6]
    assert max(slept) == UNREACHABLE_RETRY_CAP_S < 30.0
    await informer._back_off(aiohttp.ClientPayloadError("cut"))
    assert slept[-1] == 30.0, "an answering server still gets the full backoff"
