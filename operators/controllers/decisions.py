"""What one pod's allocation decision can come to, and the thread decisions run in.

A decision has two halves (see allocation.py): the node filter, on the event loop, and the
device decision (CEL, searches, explanations), which can take seconds on a hostile selector.
That half runs in :class:`DecisionThread`, so admission, probes, metrics, Lease renewal and the
watches never wait on it. The allocator state it reads is frozen meanwhile: changes to it queue
up and are applied in event order when the decision is done.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from operators.allocator.nodes import NodeInfo
from operators.cache.core import Node
from operators.controllers import claimstatus

T = TypeVar("T")


class NotReady(Exception):
    """The pod cannot be considered yet (its claims are not all there); no message."""


class AlreadyAllocated(NotReady):
    """A bound pod whose claims are all allocated and reserved for it: nothing to allocate
    (the claim controller keeps its devices annotation in step with the claims)."""


@dataclasses.dataclass(frozen=True)
class Candidates:
    """The node filter's answer for one pod: what the device decision chooses among."""

    total: int
    """Nodes considered at all (all nodes; the pod's own node if it is bound)."""
    rejections: list[str]
    """Why the other nodes are out (the scheduler's words; a node may give several)."""
    nodes: list[Node]
    infos: Sequence[NodeInfo]
    """The allocator's view of ``nodes``; the one tuple of every node when all are in, so
    the allocator can keep what it learnt about them from pod to pod (first-fit's floor)."""
    admits: Callable[[NodeInfo], bool] | None = None
    """Set when the filter has not run yet (``nodes`` and ``rejections`` are empty, ``infos``
    are all nodes): the filter's verdict on one node, asked by the allocator only of nodes
    that could hold the devices. Reads the loop's caches, so only for a decision on the loop."""


class StillWaiting(Exception):
    """No node fits, as when last explained; the explanation is not recomputed yet."""


class ClaimBusy(Exception):
    """A claim of the pod is being written for another pod; look again in a moment."""


class Unallocatable(Exception):
    """No node fits now: a one-line summary (pod condition), per-node-group details (Event),
    and what each claim concerned is told (its condition; by claim ``namespace/name``)."""

    def __init__(
        self,
        summary: str,
        details: list[str] | None = None,
        *,
        reason: str = claimstatus.REASON_UNSCHEDULABLE,
        claims: dict[str, str] | None = None,
    ) -> None:
        super().__init__(summary)
        self.summary = summary
        self.details = details or []
        self.reason = reason
        self.claims = claims or {}


class NeedsThread(Exception):
    """The decision did not end within the event loop's short slice: make it in the thread."""


class SliceUsed(Exception):
    """The pod's decision used up one slice of its budget; it goes to the back of the queue."""


class TooSlow(Unallocatable):
    """The decision ran out of its wall-clock budget: the pod is told and backs off (it is
    not woken by cluster changes, which would spend the budget again at once)."""


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
