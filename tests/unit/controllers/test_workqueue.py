"""The work queue: de-duplication, no concurrent processing of a key, delays, backoff."""

from __future__ import annotations

import asyncio

from operators.controllers.workqueue import WorkQueue


async def test_dedup_and_fifo() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a"):
        queue.add(key)
    assert [await queue.get(), await queue.get()] == ["a", "b"]
    assert len(queue) == 0


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
