"""The work queue: de-duplication, no concurrent processing of a key, delays, backoff, and
how a failed sync is requeued (conflict at once, unavailable with backoff, refused late)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import aiohttp
import pytest

from operators.controllers.workqueue import WorkQueue, work_once
from operators.kube import UNREACHABLE_RETRY_CAP_S, ApiError, Conflict, NotFound


async def test_dedup_and_fifo() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a"):
        queue.add(key)
    assert [await queue.get(), await queue.get()] == ["a", "b"]
    assert len(queue) == 0


async def test_shares_take_turns_each_in_its_own_order() -> None:
    """One share's burst (a namespace's thousand gang members) delays another share's next
    key by one key: shares alternate, each share's keys in the order added."""
    queue: WorkQueue[tuple[str, int]] = WorkQueue(share=lambda key: key[0])
    for index in range(1000):
        queue.add(("hostile", index))
    queue.add(("team-a", 0))
    queue.add(("team-b", 0))
    queue.add(("team-a", 1))
    taken = [await queue.get() for _ in range(6)]
    assert taken == [
        ("hostile", 0), ("team-a", 0), ("team-b", 0), ("hostile", 1), ("team-a", 1),
        ("hostile", 2),
    ]  # fmt: skip
    assert len(queue) == 1000 - 3
    # A share that emptied joins at the back when it has a key again.
    queue.add(("team-b", 1))
    assert [await queue.get() for _ in range(2)] == [("hostile", 3), ("team-b", 1)]


def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The running loop's clock, moved only by the test (the queue times its keys by it)."""
    loop = asyncio.get_running_loop()
    now = [loop.time()]
    monkeypatch.setattr(loop, "time", lambda: now[0])
    return now


async def work(queue: WorkQueue[tuple[str, int]], now: list[float], cost: dict[str, float],
               count: int) -> list[str]:  # fmt: skip
    """Take ``count`` keys one after another, each holding the worker ``cost[share]`` s."""
    shares = []
    for _ in range(count):
        key = await queue.get()
        now[0] += cost[key[0]]
        queue.done(key)
        shares.append(key[0])
    return shares


async def test_a_share_whose_keys_take_long_gets_as_much_time_not_as_many_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A namespace whose decisions take 1 s each (costly selectors, a large gang) beside one
    whose take 0.25 s: the second gets four keys for each of the first's, so that each gets
    half of the worker's time."""
    now = frozen_clock(monkeypatch)
    queue: WorkQueue[tuple[str, int]] = WorkQueue(share=lambda key: key[0])
    for index in range(30):
        queue.add(("slow", index))
        queue.add(("quick", index))
    taken = await work(queue, now, {"slow": 1.0, "quick": 0.25}, 15)
    assert taken == (["slow"] + ["quick"] * 4) * 3


async def test_a_share_back_from_idle_banks_no_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A namespace that had nothing to do while another used the worker for a while does not
    get the worker to itself when it comes back: they take turns from then on."""
    now = frozen_clock(monkeypatch)
    queue: WorkQueue[tuple[str, int]] = WorkQueue(share=lambda key: key[0])
    for index in range(20):
        queue.add(("busy", index))
    cost = {"busy": 0.25, "late": 0.25}
    assert await work(queue, now, cost, 10) == ["busy"] * 10
    for index in range(10):
        queue.add(("late", index))
    assert sorted(await work(queue, now, cost, 4)) == ["busy", "busy", "late", "late"]


async def test_without_shares_keys_come_in_the_order_added() -> None:
    queue: WorkQueue[tuple[str, int]] = WorkQueue()
    for key in (("hostile", 0), ("hostile", 1), ("team-a", 0)):
        queue.add(key)
    assert [await queue.get() for _ in range(3)] == [("hostile", 0), ("hostile", 1), ("team-a", 0)]


async def test_readded_while_processing_runs_again_afterwards() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    key = await queue.get()
    queue.add("a")
    assert len(queue) == 0  # not handed out twice at once
    queue.done(key)
    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_add_after_and_earliest_wins() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 5.0)
    queue.add_after("a", 0.02)
    started = asyncio.get_running_loop().time()
    assert await asyncio.wait_for(queue.get(), 1) == "a"
    assert asyncio.get_running_loop().time() - started < 1.0


async def test_retry_backs_off_per_key_and_forget_resets() -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=0.01, max_delay=0.04)
    assert [queue.retry("a") for _ in range(4)] == [0.01, 0.02, 0.04, 0.04]
    queue.forget("a")
    assert queue.retry("a") == 0.01
    assert queue.failures("a") == 1


async def test_retry_first_at_once_then_backs_off() -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=0.01, max_delay=1.0)
    assert queue.retry("a", first_at_once=True) == 0.0
    assert queue.due_in("a") == 0.0
    assert queue.retry("a", first_at_once=True) == 0.02  # the second in a row waits


def failing(error: BaseException) -> Callable[[str], Awaitable[None]]:
    async def sync(_key: str) -> None:
        raise error

    return sync


@pytest.mark.parametrize(
    ("error", "expect_min", "expect_max"),
    [
        (Conflict(409, "Conflict", "the object has been modified"), 0.0, 0.0),
        (NotFound(404, "NotFound", "gone"), 0.0, 0.0),
        (ApiError(503, "ServiceUnavailable", "not all HTTP paths installed"), 0.5, 1.0),
        (ApiError(429, "TooManyRequests", "slow down"), 0.5, 1.0),
        (aiohttp.ClientConnectionError("refused"), 0.5, 1.0),
        (TimeoutError(), 0.5, 1.0),
        (ApiError(422, "Invalid", "spec.devices: Invalid value"), 50.0, 60.0),
        (ApiError(403, "Forbidden", "quota exceeded"), 50.0, 60.0),
        # refusals that pass by themselves: a Lease the API server's cache has not caught
        # up with, a policy whose parameter is not there yet
        (ApiError(403, "Forbidden", "only the dralloc operator that holds the Lease"), 0.5, 1.0),
        (ApiError(403, "Forbidden", "no params found for policy binding with `Deny`"), 0.5, 1.0),
        (RuntimeError("a bug"), 0.5, 1.0),
    ],
)
async def test_a_failed_sync_is_requeued_as_the_failure_deserves(
    error: BaseException, expect_min: float, expect_max: float
) -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=1.0, max_delay=10.0, rejected_delay=60.0)
    queue.add("a")
    assert await work_once(queue, failing(error)) == "a"
    due = queue.due_in("a")
    assert due is not None, "the key was dropped"
    assert expect_min <= due <= expect_max


async def test_a_key_that_keeps_failing_keeps_coming_back() -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=0.001, max_delay=0.004)
    queue.add("a")
    sync = failing(ApiError(503, "ServiceUnavailable", "down"))
    for _ in range(5):
        await asyncio.wait_for(work_once(queue, sync), 1)
    assert queue.failures("a") == 5


async def test_a_key_waits_a_few_seconds_at_most_while_the_api_server_refuses_connections() -> None:
    """Down, not busy: retried within the short cap however long it lasts (the key is tried
    soon after the server is back); a server answering 503 still gets the full backoff."""
    import types

    key = types.SimpleNamespace(host="apiserver", port=6443, ssl=True)
    refused = aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "refused"))  # type: ignore[arg-type]
    queue: WorkQueue[str] = WorkQueue(base_delay=0.5, max_delay=30.0)
    delays = [queue.retry_after_failure("a", refused) for _ in range(10)]
    assert delays[:3] == [0.5, 1.0, 2.0]
    assert max(delays) == UNREACHABLE_RETRY_CAP_S < 30.0
    busy = ApiError(503, "ServiceUnavailable", "too busy")
    assert queue.retry_after_failure("a", busy) == 30.0


async def test_a_key_wakes_one_waiting_worker_not_all() -> None:
    queue: WorkQueue[str] = WorkQueue()
    workers = [asyncio.create_task(queue.get()) for _ in range(5)]
    await asyncio.sleep(0)
    queue.add("a")
    for _ in range(3):
        await asyncio.sleep(0)
    assert [w.result() for w in workers if w.done()] == ["a"]
    assert len(queue._waiters) == 4  # the others were never woken (no re-queued waiters)
    queue.add("b")
    for _ in range(3):
        await asyncio.sleep(0)
    assert sorted(w.result() for w in workers if w.done()) == ["a", "b"]
    for worker in workers:
        worker.cancel()
    await asyncio.gather(*workers, return_exceptions=True)


async def test_a_woken_worker_that_is_cancelled_passes_the_key_on() -> None:
    queue: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add("a")  # wakes the first
    first.cancel()  # before it runs
    assert await asyncio.wait_for(second, 1) == "a"
    with contextlib.suppress(asyncio.CancelledError):
        await first


async def test_a_waiting_worker_takes_a_delayed_key_when_it_is_due() -> None:
    queue: WorkQueue[str] = WorkQueue()
    worker = asyncio.create_task(queue.get())
    await asyncio.sleep(0)  # waiting with nothing due: no timeout
    queue.add_after("later", 0.05)
    assert await asyncio.wait_for(worker, 1) == "later"
