"""What the controllers of one process share, and when they may act.

A :class:`Runtime` owns the API client, the shared cache and the leader elector. The cache
runs on every replica (so a standby takes over with a warm cache); the controllers' loops run
only while this replica holds the Lease, and are cancelled together the moment it is lost.
Each controller module adds its controller to the runtime from its own kopf startup handler
(see :func:`runtime_from`), so a module that is switched off, or not imported, simply does not
take part.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import re
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, Literal, Protocol

import kopf
import structlog

from operators import gcpause, metrics
from operators.api.podprotocol import PodProtocol, protocol_for
from operators.cache.kinds import (
    FORBIDDEN_AS_ABSENT,
    LISTED_FIELDS,
    OPTIONAL,
    OTHER_VERSIONS,
    RAW_KEPT,
    parsers,
)
from operators.cache.shared import SharedCache
from operators.controllers import placerules
from operators.credentials import CredentialSource
from operators.fencing import AllocationRecord, AllocatorMark, stands_down
from operators.kube import (
    LEASES,
    REQUEST_ERRORS,
    ApiError,
    Connection,
    FailureKind,
    JsonDict,
    KubeClient,
    NotFound,
    failure_kind,
    fencing_refusal,
)
from operators.leader import LeaderElector, default_identity
from operators.settings import Settings

log = structlog.get_logger(__name__)

MEMO_KEY = "dralloc_runtime"
CREDENTIALS_KEY = "dralloc_credentials"
MAX_CLOCK_SKEW = 60.0  # seconds an allocation record may be ahead of this replica's clock
FENCING_LEASE = re.compile(
    r'holds the Lease (?P<namespace>[^/\s]+)/(?P<name>\S+) allocates \(held by "(?P<holder>[^"]*)"'
)
"""The Lease a fencing refusal judged by, and its holder then."""
STALE_LEASE_PARAM_S = 30.0
"""Seconds of fencing refusals while this replica holds the Lease before it says that
kube-apiserver judges by a stale Lease (its parameter cache catches up within moments)."""


class Controller(Protocol):
    name: str

    async def run(self) -> None:
        """The controller's loop; runs only on the leader; cancelled when leadership ends."""

    def health(self) -> dict[str, Any]:
        """A small JSON-able summary for the liveness probe."""


EVENT_RETRY_DELAYS_S: Final = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 30.0, 30.0, 30.0, 30.0)
"""Waits before each new try of an Event whose post failed for a passing reason (the API
server down, restarting or busy): about three minutes in all, as client-go's recorder tries
an Event for about two. An Event lost to a restart would leave a waiting pod with a condition
and no Event, and nothing posts it again: the condition is only rewritten when it changes."""
EVENT_RETRY_WINDOW_S: Final = 180.0
"""Seconds after its first failed post that an Event is given up on, whatever tries are
left: later, it would tell something stale as news."""
MAX_EVENTS_PENDING: Final = 1000
"""Events waiting for another try at most; one more is dropped (and counted)."""


@dataclasses.dataclass(order=True)
class _Unposted:
    due: float
    seq: int
    tries: int = dataclasses.field(compare=False)
    involved: JsonDict = dataclasses.field(compare=False)
    reason: str = dataclasses.field(compare=False)
    message: str = dataclasses.field(compare=False)
    type_: Literal["Normal", "Warning"] = dataclasses.field(compare=False)
    first_failed: float = dataclasses.field(default=0.0, compare=False)
    superseded: bool = dataclasses.field(default=False, compare=False)
    """A newer Event of the same object and reason was posted: this one is dropped."""

    @property
    def key(self) -> tuple[str, str, str]:
        return ((self.involved.get("metadata") or {}).get("uid", ""), self.reason, self.message)


class EventRecorder:
    """Posts Kubernetes Events, skipping repeats of the same message about the same object,
    and trying again (``run``) those whose post failed while the API server was away."""

    def __init__(self, client: KubeClient, *, repeat_after: float = 600.0) -> None:
        self.client = client
        self.repeat_after = repeat_after
        self._last: dict[tuple[str, str, str], float] = {}
        self._unposted: list[_Unposted] = []  # a heap by due time
        self._unposted_by: dict[tuple[str, str], _Unposted] = {}  # by object UID and reason
        self._seq = 0
        self._more = asyncio.Event()

    def should_post(self, uid: str, reason: str, message: str, now: float) -> bool:
        key = (uid, reason, message)
        last = self._last.get(key)
        if last is not None and now - last < self.repeat_after:
            return False
        self._last[key] = now
        if len(self._last) > 10_000:
            cutoff = now - self.repeat_after
            self._last = {k: t for k, t in self._last.items() if t >= cutoff}
        return True

    @property
    def pending(self) -> int:
        """Events waiting for another try."""
        return len(self._unposted_by)

    async def post(
        self, involved: JsonDict, reason: str, message: str, *, warning: bool = False
    ) -> None:
        uid = (involved.get("metadata") or {}).get("uid", "")
        if not self.should_post(uid, reason, message, time.monotonic()):
            return
        older = self._unposted_by.pop((uid, reason), None)
        if older is not None:  # what it said is out of date: never posted after this one
            older.superseded = True
            self._last.pop(older.key, None)
        type_: Literal["Normal", "Warning"] = "Warning" if warning else "Normal"
        await self._send(_Unposted(0.0, 0, 0, involved, reason, message, type_))

    async def run(self) -> None:
        """Try again, when due, the Events whose post failed for a passing reason; runs
        while the controllers run (those waiting while this replica stands by are tried when
        it leads again, if their window has not passed)."""
        while True:
            if not self._unposted:
                self._more.clear()
                await self._more.wait()
                continue
            wait = self._unposted[0].due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(min(wait, 1.0))  # a newer Event may come due sooner
                continue
            event = heapq.heappop(self._unposted)
            if event.superseded:
                continue
            del self._unposted_by[(event.key[0], event.reason)]
            await self._send(event)

    async def _send(self, event: _Unposted) -> None:
        try:
            await self.client.post_event(
                event.involved, reason=event.reason, message=event.message, type_=event.type_
            )
        except REQUEST_ERRORS as error:
            if failure_kind(error) is FailureKind.UNAVAILABLE and self._try_again(event):
                return
            # Given up: forget it, so that the next attempt of a caller posts it.
            self._last.pop(event.key, None)
            metrics.EVENTS_NOT_RECORDED.inc()
            log.warning(
                "event not recorded",
                reason=event.reason,
                tries=event.tries + 1,
                error=str(error)[:200],
            )

    def _try_again(self, event: _Unposted) -> bool:
        now = time.monotonic()
        if event.tries == 0:
            event.first_failed = now
        if (
            event.tries >= len(EVENT_RETRY_DELAYS_S)
            or now - event.first_failed >= EVENT_RETRY_WINDOW_S
            or len(self._unposted_by) >= MAX_EVENTS_PENDING
        ):
            return False
        self._seq += 1
        event.due = now + EVENT_RETRY_DELAYS_S[event.tries]
        event.seq = self._seq
        event.tries += 1
        heapq.heappush(self._unposted, event)
        self._unposted_by[(event.key[0], event.reason)] = event
        self._more.set()
        return True


class Runtime:
    def __init__(self, settings: Settings, client: KubeClient) -> None:
        self.settings = settings
        self.client = client
        self.protocol: PodProtocol = protocol_for(settings.api_group)
        """How pods ask for devices and what the claims carry, in this API mode."""
        self.cache = SharedCache(
            client,
            parsers(self.protocol),
            watch_timeout=settings.watch_timeout,
            optional=OPTIONAL,
            other_versions=OTHER_VERSIONS,
            forbidden_as_absent=FORBIDDEN_AS_ABSENT,
            raw_kept=RAW_KEPT,
            listed_fields=LISTED_FIELDS,
        )
        self.events = EventRecorder(client)
        self.controllers: list[Controller] = []
        self.leading = asyncio.Event()
        self.leadership_losses = 0
        self.fenced_until = 0.0  # monotonic: standing by for another allocator until then
        self._fence = asyncio.Event()
        self._told_unfenceable = False
        self._told_misnamed = False
        self._stale_refusal_since = 0.0
        self._stale_refusal_last = -1e9
        self._live_allocators: dict[AllocatorMark, tuple[bool, float]] = {}
        self.refusals = placerules.RecentRefusals()
        self._checks: set[asyncio.Task[None]] = set()
        self.elector: LeaderElector | None = None
        if settings.leader_election:
            self.elector = LeaderElector(
                client,
                name=settings.lease_name,
                namespace=settings.effective_lease_namespace,
                identity=settings.identity or settings.process_name,
                lease_duration=settings.lease_duration,
                renew_deadline=settings.renew_deadline,
                retry_period=settings.retry_period,
            )

    @classmethod
    async def connect(
        cls, settings: Settings, credentials: CredentialSource | None = None
    ) -> Runtime:
        """With ``credentials`` loaded already (shared with kopf's login), else loaded here."""
        if credentials is None:
            credentials = await CredentialSource.load(settings.kubeconfig or None)
        client = KubeClient(
            Connection.from_source(credentials),
            request_timeout=settings.request_timeout,
            api_group=settings.api_group,
        )
        if settings.leader_election and not settings.identity:
            identity = await default_identity(client, settings.process_name)
            settings = dataclasses.replace(settings, identity=identity)
        return cls(settings, client)

    def add(self, controller: Controller) -> None:
        self.controllers.append(controller)

    async def run(self) -> None:
        """Cache always; controllers while leader, for as long as the process runs.

        Losing the Lease (or the API server, which loses the Lease once the renewal deadline
        passes) stops the controllers at once, and this replica stands by: the cache keeps
        relisting and the elector keeps trying, and the controllers start again from the
        cache when the Lease is held again. Only a configuration error ends the process.
        """
        async with asyncio.TaskGroup() as group:
            group.create_task(self.cache.run(on_synced=self._record_sync), name="shared-cache")
            if self.elector is None:
                await self._lead()
                return
            while True:
                await self.elector.run_while_leader(self._lead)
                while time.monotonic() < self.fenced_until:  # extended while they act
                    await asyncio.sleep(min(1.0, self.fenced_until - time.monotonic()))
                self._fence.clear()
                self.leadership_losses += 1
                metrics.LEADERSHIP_LOSSES.inc()
                log.warning(
                    "leadership lost; standing by until this replica holds the Lease again",
                    identity=self.elector.identity,
                    losses=self.leadership_losses,
                )

    def _record_sync(self) -> None:
        if self.cache.sync_seconds is not None:
            metrics.CACHE_SYNC_SECONDS.set(self.cache.sync_seconds)
        gcpause.settle()  # the cluster as first listed stays: no collection needs to walk it

    @property
    def mark(self) -> AllocatorMark | None:
        """This replica as an allocator while it leads (None without leader election)."""
        if self.elector is None:
            return None
        lease = f"{self.elector.namespace}/{self.elector.name}"
        return AllocatorMark(lease, self.elector.identity, self.elector.term)

    @property
    def allocator(self) -> AllocatorMark:
        """Who this replica is in the allocation records it writes: its :attr:`mark`, or,
        without leader election, a mark without a Lease."""
        mark = self.mark
        if mark is not None:
            return mark
        return AllocatorMark.without_lease(self.settings.identity or self.settings.process_name)

    def would_stand_down(self, record: AllocationRecord) -> bool:
        """Whether another allocator's record, if true, says this replica must stop (see
        :mod:`operators.fencing`)."""
        ours = self.mark
        if ours is None:
            return False
        # Records from the last two Lease durations tell of an allocator acting now (one
        # that acted long ago is history, and one from the future is made up). Another
        # Lease's records count before this replica leads, too, so that a replica starting
        # next to an active allocator never begins; its own Lease's records only while it
        # leads (a standby's term is not its leader's, and the Lease settles the rest).
        now = time.time()
        recent = now - 2 * self.settings.lease_duration <= record.at <= now + MAX_CLOCK_SKEW
        same_lease = record.by.lease == ours.lease
        if not recent or (same_lease and not self.leading.is_set()):
            return False
        return stands_down(ours, record.by)

    def saw_allocation(self, record: AllocationRecord, where: str) -> bool:
        """Another allocator's record on ``where`` (a pod): stand down if it wins. Returns
        True when this replica stops because of it just now (False also while it already
        stands by: the record only extends that)."""
        if not self.would_stand_down(record):
            return False
        ours = self.mark
        assert ours is not None
        until = time.monotonic() + self.settings.lease_duration
        first = not self._fence.is_set()
        self.fenced_until = max(self.fenced_until, until)
        self._fence.set()
        if first:
            metrics.FENCED.inc()
            log.error(
                "another allocator is acting; this replica stops allocating until it is gone",
                theirs=record.by.describe(),
                ours=ours.describe(),
                seen_on=where,
            )
        return first

    async def refused_by_fencing(self, error: BaseException, where: str) -> bool:
        """Whether ``error`` is the fencing policy refusing this replica; if the Lease, read
        live, is not this replica's, it stops allocating, as for another allocator's record,
        for a Lease duration at a time (its next write finds out again).

        A refusal while the Lease is this replica's is the API server's parameter cache
        lagging behind a takeover (it catches up within moments; the write is retried as
        any unavailable one), or the replica's identity not being the name the API server
        knows it by (said once, with the fix)."""
        if not fencing_refusal(error):
            return False
        if self.elector is None:
            if not self._told_unfenceable:
                self._told_unfenceable = True
                log.error(
                    "the API server's fencing policy refuses this operator, which runs without "
                    "leader election: no Lease names it. Turn leader election on, or delete "
                    "the ValidatingAdmissionPolicyBinding dralloc-claim-allocation-fencing",
                    seen_on=where,
                    refusal=error.message[:300],
                )
            return True
        identity = self.elector.identity
        named = FENCING_LEASE.search(error.message)
        ours = (self.elector.namespace, self.elector.name)
        holder = ""  # the fencing Lease is another than ours, or cannot be read: stop
        if named is None or (named["namespace"], named["name"]) == ours:
            try:
                lease = await self.client.get(LEASES, self.elector.name, self.elector.namespace)
                holder = (lease.get("spec") or {}).get("holderIdentity") or ""
            except REQUEST_ERRORS:
                pass
        if holder == identity:
            now = time.monotonic()
            if now - self._stale_refusal_last > 2 * self.settings.lease_duration:
                self._stale_refusal_since = now  # a new stretch of refusals
            self._stale_refusal_last = now
            if f'held by "{identity}"' in error.message:
                if not self._told_misnamed:
                    self._told_misnamed = True
                    log.error(
                        "the API server's fencing policy does not know this replica by its "
                        "identity: set the identity (DRALLOC_IDENTITY) to the pod's name, or "
                        "for a user outside the cluster to <user>/<anything>",
                        identity=identity,
                        refusal=error.message[:300],
                    )
            elif now - self._stale_refusal_since > STALE_LEASE_PARAM_S:
                self._stale_refusal_since = now  # said again after as long
                log.error(
                    "the API server's fencing policy keeps judging this replica by a stale "
                    "Lease although it holds it: kube-apiserver stops watching Leases for "
                    "policies once no binding names that kind, and does not start again "
                    "(kubernetes/kubernetes#130887; e.g. after the fencing binding was deleted "
                    "and made again). Restart kube-apiserver",
                    identity=identity,
                    refusal=error.message[:300],
                )
            return True
        first = not self._fence.is_set()
        self.fenced_until = max(self.fenced_until, time.monotonic() + self.settings.lease_duration)
        self._fence.set()
        if first:
            metrics.FENCED.inc()
            log.error(
                "the API server refuses this replica's claims and allocations: another "
                "replica holds the Lease; this one stops allocating",
                ours=self.mark.describe() if self.mark else "",
                holder=holder,
                seen_on=where,
                refusal=error.message[:300],
            )
        return True

    async def allocator_is_live(self, mark: AllocatorMark) -> bool:
        """Whether another allocator's Lease exists and ``mark.holder`` holds it now, so a
        record naming it is no invention (answers are kept for a few seconds). A Lease this
        replica may not read counts as live: the admission policy guards the records, and
        stopping is the safe side of a second allocator."""
        now = time.monotonic()
        known = self._live_allocators.get(mark)
        if known is not None and known[1] > now:
            return known[0]
        namespace, _, name = mark.lease.partition("/")
        try:
            lease = await self.client.get(LEASES, name, namespace)
            spec = lease.get("spec") or {}
            live = spec.get("holderIdentity") == mark.holder
        except NotFound:
            live = False
        except ApiError as error:
            live = error.status in (401, 403)
        except REQUEST_ERRORS:
            return False  # not now; the next record asks again
        self._live_allocators[mark] = (live, now + self.settings.retry_period)
        return live

    def check_allocator(self, check: Coroutine[Any, Any, None]) -> None:
        """Run a check of another allocator's record in the background; a replica about to
        lead waits for the checks of what its cache has shown so far (see _lead)."""
        task = asyncio.get_running_loop().create_task(check)
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _lead(self) -> None:
        await self.cache.wait_synced()
        if self._checks:  # another allocator's records in the cache: know before acting
            await asyncio.wait(list(self._checks), timeout=self.settings.retry_period)
        if self._fence.is_set():
            return  # another allocator acts: never start (run() waits for it to go)
        self.leading.set()
        metrics.set_acting(True)
        log.info("controllers starting", controllers=[c.name for c in self.controllers])
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(controller.run(), name=f"controller-{controller.name}")
                    for controller in self.controllers
                ]
                tasks.append(
                    group.create_task(
                        retry_forever("event-retries", self.events.run), name="event-retries"
                    )
                )
                # Until cancelled (leadership lost, shutdown) or fenced by another allocator;
                # the controllers never end by themselves, so a fence must stop them.
                await self._fence.wait()
                for task in tasks:
                    task.cancel()
        finally:
            # Events still waiting for a try are kept for when this replica leads again
            # (within their window): dropped, they would be lost, since the controllers write
            # an unchanged condition, and so its Event, only once.
            self.leading.clear()
            metrics.set_acting(False)

    def health(self) -> dict[str, Any]:
        return {
            "cache_synced": self.cache.synced,
            "leader": self.leading.is_set(),
            "controllers": {c.name: c.health() for c in self.controllers},
        }

    async def close(self) -> None:
        log.info("runtime stopping", gc_pause_seconds=round(gcpause.pause_seconds(), 3))
        await self.client.close()


_configured_settings: Settings | None = None


def configure(settings: Settings) -> None:
    """Settings chosen by ``main()``; without it (``kopf run``) they come from the environment."""
    global _configured_settings
    _configured_settings = settings


def current_settings() -> Settings:
    return _configured_settings or Settings.from_sources()


async def runtime_from(memo: Any) -> Runtime:
    """The process's runtime, created by whichever startup handler asks first."""
    runtime: Runtime | None = memo.get(MEMO_KEY)
    if runtime is None:
        runtime = await Runtime.connect(current_settings(), await credentials_from(memo))
        memo[MEMO_KEY] = runtime
    return runtime


async def credentials_from(memo: Any) -> CredentialSource:
    """The process's credentials, loaded once for both its API clients: dralloc's (the
    runtime's) and kopf's (the login handler). kopf runs its login handler while the startup
    handlers run, so whichever asks second waits for the load the first started: an exec
    plugin runs once, not once per client. A failed load is tried again by the next caller
    (kopf retries a failed startup or login handler)."""
    loading: asyncio.Future[CredentialSource] | None = memo.get(CREDENTIALS_KEY)
    if loading is None or (
        loading.done() and (loading.cancelled() or loading.exception() is not None)
    ):
        settings = current_settings()
        loading = asyncio.ensure_future(CredentialSource.load(settings.kubeconfig or None))
        memo[CREDENTIALS_KEY] = loading
    # Shielded: a caller cancelled while the load runs does not cancel it for the other.
    return await asyncio.shield(loading)


def register_controller(name: str, build: Callable[[Runtime], Controller | None]) -> None:
    """kopf handlers for one controller module: a probe, and a startup handler that adds the
    controller ``build`` returns (None: switched off by its settings) to the runtime."""

    async def startup(memo: kopf.Memo, **_: Any) -> None:
        runtime = await runtime_from(memo)
        controller = build(runtime)
        if controller is not None:
            runtime.add(controller)

    def probe(memo: kopf.Memo, **_: Any) -> dict[str, Any]:
        return controller_health(memo, name)

    kopf.on.startup(id=f"dralloc.{name}")(startup)
    kopf.on.probe(id=f"dralloc.{name}")(probe)


def controller_health(memo: Any, name: str) -> dict[str, Any]:
    """One controller's probe result ({"enabled": False} when it does not run here)."""
    runtime: Runtime | None = memo.get(MEMO_KEY)
    for controller in runtime.controllers if runtime is not None else ():
        if controller.name == name:
            return {"enabled": True, "leader": runtime.leading.is_set(), **controller.health()}  # type: ignore[union-attr]
    return {"enabled": False}


async def retry_forever(
    what: str, action: Callable[[], Awaitable[None]], delay: float = 1.0
) -> None:
    """Keep a background loop alive across unexpected errors (logged, then restarted)."""
    while True:
        try:
            await action()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loop crashed; restarting", loop=what)
            await asyncio.sleep(delay)
