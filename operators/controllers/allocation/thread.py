"""The thread decisions run in.

A decision has two halves (see :mod:`.controller`): the node filter, on the event loop, and
the device decision (CEL, searches, explanations), which can take seconds on a hostile
selector. That half runs in :class:`DecisionThread`, so admission, probes, metrics, Lease
renewal and the watches never wait on it. The allocator state it reads is frozen meanwhile:
changes to it queue up and are applied in event order when the decision is done.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class DecisionThread:
    """One thread for a controller's lifetime, so that decisions never overlap (not even
    across a lost and regained leadership); the thread holds the GIL for at most the
    interpreter's switch interval at a time, so the event loop keeps its turns."""

    def __init__(self) -> None:
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._running = 0
        self.deferred: list[Callable[[], object]] = []
        self._settled: asyncio.Event | None = None  # set while nothing runs or waits

    @property
    def busy(self) -> bool:
        """Whether the thread reads the state now (changes are being deferred)."""
        return self._running > 0

    async def settled(self) -> None:
        """Until the thread is idle and every deferred change has been applied.

        A decision must see every change made before it, above all the assumptions of the
        decisions before it: those are deferred while anything else reads in the thread (a
        quota status read, say), and a decision made past them hands the same device out
        twice. So the one decider waits here before each decision, inline or not.
        """
        while self._running:
            if self._settled is None:
                self._settled = asyncio.Event()
            self._settled.clear()
            await self._settled.wait()

    def mutate(self, change: Callable[..., object], *args: Any) -> None:
        """Change the state now, or, while a decision reads it, right after that decision
        (in the order the changes came)."""
        if self._running:
            self.deferred.append(functools.partial(change, *args))
        else:
            change(*args)

    async def run(self, decide: Callable[..., T], *args: Any) -> T:
        """``decide(*args)`` in the thread. The state thaws when the thread is really done,
        even if the caller's await is cancelled first."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="dralloc-decide"
            )
        loop = asyncio.get_running_loop()
        self._running += 1
        work = self._executor.submit(decide, *args)
        work.add_done_callback(lambda _: _call_soon(loop, self._done))
        return await asyncio.wrap_future(work)

    def _done(self) -> None:
        self._running -= 1
        if self._running:
            return
        deferred, self.deferred = self.deferred, []
        try:
            for change in deferred:
                change()
        finally:
            if self._settled is not None:
                self._settled.set()


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: the process is ending
        loop.call_soon_threadsafe(callback)
