"""A de-duplicating work queue with per-key backoff, as client-go's rate-limited queue.

kopf has per-object workers but no queue keyed by *our* notion of work (a pod to allocate, a
claim to clean up) with coalescing and exponential retry, so the controllers use this one.
Semantics:

* a key is queued at most once; adding it while it waits does nothing;
* a key being processed that is added again is processed once more afterwards (never twice
  concurrently);
* ``add_after`` delays (the earliest requested time wins); ``retry`` delays by the key's own
  exponential backoff, and ``forget`` resets that backoff after a success;
* with a ``share`` function (a key's namespace, say), the next ready key is from the share
  whose keys have held a worker the least time, each share's keys in the order added: a
  share that queues a thousand keys (one namespace's hostile gang) delays another share's
  next key by one key, not a thousand, and a share whose keys take long decisions (costly
  selectors, large gangs) gets as much of the workers' time as another, not as many turns.

:func:`run_workers` owns what happens when a sync raises, by :func:`operators.kube.failure_kind`:
a stale read (conflict) is retried at once and then with backoff, an unavailable API server
with backoff (a few seconds at most while it refuses connections), a refused request only
after ``rejected_delay`` (someone must fix something first; the controller that knows who
tells them) unless its cause passes by itself (:func:`operators.kube.passing_refusal`), and
anything else is logged as a bug and retried with backoff. A sync that handles its own failures simply does not raise.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

import structlog

from operators import metrics
from operators.cache.backoff import Backoff
from operators.kube import (
    UNREACHABLE_RETRY_CAP_S,
    FailureKind,
    failure_kind,
    passing_refusal,
    unreachable,
)

K = TypeVar("K", bound=Hashable)

log = structlog.get_logger(__name__)


class _Turns(Generic[K]):
    """Ready keys by share; the next key comes from the share that has used the least time.

    A share's time is the time its keys held a worker (charged when a key is done); shares
    that used the same time take turns in the order they became ready, so without charges
    this is plain round robin. A share that becomes ready again starts at the time of the
    share served last, not at what it used long ago: an idle namespace banks no credit that
    would let it hold the workers later. Keys of one share come in the order added.
    """

    def __init__(self, share: Callable[[K], Hashable] | None) -> None:
        self._share = share
        self._lines: dict[Hashable, collections.deque[K]] = {}
        """Shares with ready keys."""
        self._used: dict[Hashable, float] = {}
        """Seconds each share's keys held a worker, from the floor when it became ready."""
        self._floor = 0.0
        """The time of the share served last (the least of the ready ones then)."""
        self._order: list[tuple[float, int, Hashable]] = []
        """(used, sequence, share) of each share with ready keys; an entry whose sequence is
        not its share's in ``_entries`` is stale and skipped."""
        self._entries: dict[Hashable, int] = {}
        self._sequence = itertools.count()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def share_of(self, key: K) -> Hashable:
        return self._share(key) if self._share is not None else None

    def append(self, key: K) -> None:
        share = self.share_of(key)
        line = self._lines.get(share)
        if line is None:
            line = self._lines[share] = collections.deque()
            self._used[share] = max(self._used.get(share, 0.0), self._floor)
            self._enter(share)
        line.append(key)
        self._size += 1

    def _enter(self, share: Hashable) -> None:
        sequence = next(self._sequence)
        self._entries[share] = sequence
        heapq.heappush(self._order, (self._used[share], sequence, share))

    def charge(self, key: K, seconds: float) -> None:
        """Add the time a key of this share held a worker."""
        if self._share is None:
            return
        share = self.share_of(key)
        self._used[share] = self._used.get(share, self._floor) + seconds
        if share in self._lines:
            self._enter(share)  # its place moves back by what it used
        elif len(self._used) > 2 * len(self._lines) + 64:
            # Shares with nothing ready that owe nothing would start at the floor anyway.
            for idle in [s for s, t in self._used.items() if t <= self._floor]:
                if idle not in self._lines:
                    del self._used[idle]

    def clear(self) -> None:
        self._lines.clear()
        self._order.clear()
        self._entries.clear()
        self._size = 0

    def popleft(self) -> K:
        while True:
            used, sequence, share = heapq.heappop(self._order)
            if self._entries.get(share) == sequence:
                break
        line = self._lines[share]
        key = line.popleft()
        self._floor = max(self._floor, used)
        if line:
            self._enter(share)  # behind the shares that used as little
        else:
            del self._lines[share]
            del self._entries[share]
        self._size -= 1
        return key


class WorkQueue(Generic[K]):
    def __init__(
        self,
        *,
        base_delay: float = 0.2,
        max_delay: float = 30.0,
        rejected_delay: float = 300.0,
        share: Callable[[K], Hashable] | None = None,
    ) -> None:
        self._ready: _Turns[K] = _Turns(share)
        self._started: dict[K, float] = {}
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._delayed: list[tuple[float, int, K]] = []
        self._delayed_at: dict[K, float] = {}
        self._backoffs: dict[K, Backoff] = {}
        self._counter = itertools.count()
        # Workers waiting in get(), each woken alone: a key added wakes one worker, not all
        # of them (each would look, find the key taken and wait again).
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.rejected_delay = rejected_delay

    def __len__(self) -> int:
        return len(self._ready)

    def pending(self) -> int:
        """Keys waiting now or later, or being processed."""
        return len(self._queued | set(self._delayed_at) | self._processing)

    def add(self, key: K) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._ready.append(key)
        self._wake_one()

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        when = asyncio.get_running_loop().time() + delay
        current = self._delayed_at.get(key)
        if current is not None and current <= when:
            return
        self._delayed_at[key] = when
        heapq.heappush(self._delayed, (when, next(self._counter), key))
        if self._delayed[0][2] == key:  # now the first due: a waiting worker times its wait anew
            self._wake_one()

    def retry(self, key: K, *, first_at_once: bool = False, cap: float | None = None) -> float:
        """Requeue after this key's next backoff delay; returns the delay.

        With ``first_at_once`` the first failure in a row is retried without delay (a stale
        read is usually fresh by then) and only repeated ones back off; ``cap`` lowers the
        ceiling of this delay.
        """
        backoff = self._backoffs.setdefault(key, Backoff(self.base_delay, self.max_delay))
        if first_at_once and backoff.failures == 0:
            backoff.failures += 1
            self.add(key)
            return 0.0
        delay = backoff.next(cap)
        self.add_after(key, delay)
        return delay

    def retry_after_failure(self, key: K, error: BaseException, *, controller: str = "") -> float:
        """Requeue a key whose sync raised ``error``, as fits the failure; returns the delay."""
        kind = failure_kind(error)
        context = {"controller": controller, "key": str(key), "error": _brief(error)}
        if kind is FailureKind.STALE:
            delay = self.retry(key, first_at_once=True)
            log.info("stale write; requeued", retry_in=delay, **context)
        elif kind is FailureKind.UNAVAILABLE:
            delay = self.retry(key, cap=UNREACHABLE_RETRY_CAP_S if unreachable(error) else None)
            log.warning("API unavailable; retrying", retry_in=delay, **context)
        elif kind is FailureKind.REJECTED and passing_refusal(error):
            delay = self.retry(key)
            log.warning("request refused for now; retrying", retry_in=delay, **context)
        elif kind is FailureKind.REJECTED:
            delay = self.rejected_delay
            self.add_after(key, delay)
            log.warning("request refused; retrying later", retry_in=delay, **context)
        else:
            delay = self.retry(key)
            log.error("sync failed", retry_in=delay, exc_info=error, **context)
        return delay

    def forget(self, key: K) -> None:
        self._backoffs.pop(key, None)

    def due_in(self, key: K) -> float | None:
        """Seconds until a delayed key is due (0 if ready now, None if not queued)."""
        if key in self._queued:
            return 0.0
        when = self._delayed_at.get(key)
        if when is None:
            return None
        return max(0.0, when - asyncio.get_running_loop().time())

    def failures(self, key: K) -> int:
        backoff = self._backoffs.get(key)
        return backoff.failures if backoff else 0

    def _promote_due(self) -> float | None:
        """Move due delayed keys to the ready list; returns seconds until the next one."""
        now = asyncio.get_running_loop().time()
        while self._delayed:
            when, _, key = self._delayed[0]
            if self._delayed_at.get(key) != when:
                heapq.heappop(self._delayed)  # superseded by an earlier time
                continue
            if when > now:
                return when - now
            heapq.heappop(self._delayed)
            del self._delayed_at[key]
            self.add(key)
        return None

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def get(self) -> K:
        while True:
            wait = self._promote_due()
            if self._ready:
                key = self._ready.popleft()
                self._queued.discard(key)
                self._processing.add(key)
                self._started[key] = asyncio.get_running_loop().time()
                if self._ready:
                    self._wake_one()  # more ready than this worker takes: another one may
                return key
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                if wait is None:
                    await waiter
                else:
                    async with asyncio.timeout(wait):
                        await waiter
            except TimeoutError:
                pass  # a delayed key is due
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken for a key it will not take: pass it on
                raise
            finally:
                if not waiter.done():
                    waiter.cancel()  # out of the line: _wake_one skips it

    def done(self, key: K) -> None:
        started = self._started.pop(key, None)
        if started is not None:
            self._ready.charge(key, asyncio.get_running_loop().time() - started)
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)


def _brief(error: BaseException) -> str:
    return (str(error) or type(error).__name__)[:300]


async def work_once(
    queue: WorkQueue[K], sync: Callable[[K], Awaitable[None]], *, name: str = "worker"
) -> K:
    """Take the next key, sync it, requeue it if that failed; returns the key."""
    key = await queue.get()
    try:
        await sync(key)
    except asyncio.CancelledError:
        raise
    except Exception as error:
        queue.retry_after_failure(key, error, controller=name)
    finally:
        queue.done(key)
    return key


async def run_workers(
    queue: WorkQueue[K],
    sync: Callable[[K], Awaitable[None]],
    *,
    workers: int = 1,
    name: str = "worker",
) -> None:
    """Process keys forever with ``workers`` tasks; ``sync`` owns retries via the queue.
    Its depth is ``dralloc_workqueue_depth{controller=name}`` meanwhile."""
    metrics.register_queue(name, queue.pending)

    async def worker() -> None:
        while True:
            await work_once(queue, sync, name=name)
            # A ready key is returned without suspending; yield so that nothing else
            # (watches, lease renewal) starves behind a long queue.
            await asyncio.sleep(0)

    async with asyncio.TaskGroup() as group:
        for index in range(workers):
            group.create_task(worker(), name=f"{name}-{index}")
