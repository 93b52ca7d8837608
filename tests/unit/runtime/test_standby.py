"""Losing the Lease is not fatal: the controllers stop, the replica stands by, and they start
again when it leads again (the process ends only on a configuration error)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from operators import metrics
from operators.controllers.runtime import Runtime
from operators.settings import Settings

from ..controllers.fakes import FakeClient


class FlakyElector:
    """Leads for a moment, loses the Lease, and leads again (``terms`` times)."""

    identity = "test-replica"

    def __init__(self, terms: int) -> None:
        self.terms = terms
        self.started = 0

    async def run_while_leader(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.started += 1
        if self.started > self.terms:
            await asyncio.Event().wait()  # stands by for good
        task = asyncio.create_task(work())
        await asyncio.sleep(0.05)
        task.cancel()  # the renewal deadline passed
        with pytest.raises(asyncio.CancelledError):
            await task


def without_cluster(runtime: Runtime, monkeypatch: Any) -> None:
    """The shared cache as if synced and watching, with no API server behind it."""

    async def cache_forever(**_: Any) -> None:
        await asyncio.Event().wait()

    async def synced() -> None:
        return None

    monkeypatch.setattr(runtime.cache, "run", cache_forever)
    monkeypatch.setattr(runtime.cache, "wait_synced", synced)


@dataclasses.dataclass
class CountingController:
    name: str = "counting"
    runs: int = 0
    running: bool = False

    async def run(self) -> None:
        self.runs += 1
        self.running = True
        try:
            await asyncio.Event().wait()
        finally:
            self.running = False

    def health(self) -> dict[str, Any]:
        return {}


async def test_the_controllers_stop_and_start_again_with_the_lease(monkeypatch: Any) -> None:
    runtime = Runtime(dataclasses.replace(Settings(), leader_election=False), FakeClient())
    elector = FlakyElector(terms=3)
    runtime.elector = elector  # type: ignore[assignment]

    without_cluster(runtime, monkeypatch)
    controller = CountingController()
    runtime.add(controller)
    task = asyncio.create_task(runtime.run())
    for _ in range(100):
        if elector.started > 3:
            break
        await asyncio.sleep(0.02)
    assert not task.done(), "losing the Lease ended the runtime"
    assert controller.runs == 3, "the controllers did not start again with the Lease"
    assert not controller.running and not runtime.leading.is_set()
    assert runtime.leadership_losses == 3
    assert metrics.LEADER._value.get() == 0  # type: ignore[attr-defined]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_readiness_says_whether_this_replica_acts() -> None:
    import socket
    import urllib.error
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    metrics.serve(port, "127.0.0.1")
    url = f"http://127.0.0.1:{port}"
    metrics.set_acting(False)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{url}/readyz", timeout=5)
    assert refused.value.code == 503
    metrics.set_acting(True)
    with urllib.request.urlopen(f"{url}/readyz", timeout=5) as answer:
        assert answer.status == 200
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
        assert b"dralloc_leader 1.0" in answer.read()
    metrics.set_acting(False)


async def test_a_fence_stops_the_running_controllers(monkeypatch: Any) -> None:
    import time

    from operators.fencing import AllocationRecord, AllocatorMark

    runtime = Runtime(dataclasses.replace(Settings(), leader_election=False), FakeClient())

    class Leading:
        namespace, name, identity, term = "zzz", "dralloc-operator", "me", 0

        async def run_while_leader(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
            await work()
            await asyncio.Event().wait()

    runtime.elector = Leading()  # type: ignore[assignment]

    without_cluster(runtime, monkeypatch)
    controller = CountingController()
    runtime.add(controller)
    task = asyncio.create_task(runtime.run())
    for _ in range(100):
        if controller.running:
            break
        await asyncio.sleep(0.01)
    assert controller.running and runtime.leading.is_set()
    other = AllocationRecord(AllocatorMark("aaa/dralloc-operator", "them", 0), time.time())
    assert runtime.saw_allocation(other, "ns/p")
    for _ in range(100):
        if not controller.running:
            break
        await asyncio.sleep(0.01)
    assert not controller.running, "fenced, the controllers kept running"
    assert not runtime.leading.is_set()
    assert metrics.LEADER._value.get() == 0  # type: ignore[attr-defined]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
