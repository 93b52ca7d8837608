"""Committing a decision: one path for a pod alone and for a gang.

A decision places one pod, or the members of a gang (:mod:`.gangdecision`), each on a node with
devices. Its commit:

1. counts the devices (and each pod's cpu, ports and the like on its node) as used at once,
   before any write, so that the next decision never hands them out again, after checking
   that they are still free (:meth:`Commits.start`);
2. writes in the background, under one of ``MAX_CONCURRENT_WRITES`` slots: first every
   placed pod's claims (allocation and ``reservedFor``, each conditional), and only when all
   of them landed, each pod (devices, pin, gate removed; :class:`.writes.ClaimWriter`).

For a gang the pods are written only if every member is still there, read live right before
the first gate is lifted (one deleted meanwhile keeps the whole gang gated, to be decided
again), and then at once: a member deleted in that last round trip is the one way left to run
short, and the released members are told (``GangIncomplete``). A failure of a claim write
gives back what was counted but not written; the next decision reads what was written from the
claims (truth lives in claims).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable

import structlog

from operators import metrics
from operators.allocator.results import ClaimAllocation
from operators.allocator.state import AllocatorState
from operators.api.models import AllocationResult
from operators.cache.core import Pod, parse_pod
from operators.cache.informer import Informer, Key
from operators.controllers.allocation.outcomes import Entries
from operators.controllers.allocation.reporting import REASON_FAILED
from operators.controllers.allocation.thread import DecisionThread
from operators.controllers.allocation.writes import ClaimWriter
from operators.controllers.claimrules import claim_key, pending
from operators.controllers.runtime import Runtime
from operators.controllers.workqueue import WorkQueue
from operators.kube import PODS, FailureKind, NotFound, failure_kind
from operators.scheduling.usage import ClusterUsage

log = structlog.get_logger("operators.controllers.allocation")

MAX_CONCURRENT_WRITES = 64  # decisions whose writes are in flight at once
BUSY_DELAY = 0.05  # seconds before a pod whose devices were taken meanwhile is decided again
REASON_GANG_INCOMPLETE = "GangIncomplete"

_FAILURE_RESULT: dict[FailureKind | None, str] = {
    FailureKind.STALE: "conflict",
    FailureKind.UNAVAILABLE: "unavailable",
    FailureKind.REJECTED: "refused",
}


@dataclasses.dataclass(frozen=True)
class Placed:
    """A pod a decision placed: its node, and an allocation per claim not allocated yet (in
    the order of ``pending(entries)``)."""

    pod: Pod
    entries: Entries
    node: str
    results: list[ClaimAllocation]

    @property
    def key(self) -> Key:
        return Key(self.pod.namespace, self.pod.name)


class Commits:
    """The decisions being committed, and the commit path they share."""

    def __init__(
        self,
        runtime: Runtime,
        pods: Informer[Pod],
        state: AllocatorState,
        usage: ClusterUsage,
        thread: DecisionThread,
        writer: ClaimWriter,
        queue: WorkQueue[Key],
        waiting: set[Key],
        name: str,
    ) -> None:
        self.runtime = runtime
        self.pods = pods
        self.state = state
        self.usage = usage
        self.thread = thread
        self.writer = writer
        self.queue = queue
        self.waiting = waiting
        """The controller's pods waiting for room (an allocated pod waits no more)."""
        self.name = name
        self.in_flight: set[Key] = set()
        """Pods whose writes are under way."""
        self.resync: set[Key] = set()
        """Pods that came up in the queue while in flight: decided again once written."""
        self.slots = asyncio.Semaphore(MAX_CONCURRENT_WRITES)
        self.writers: asyncio.TaskGroup | None = None
        """Owns the writes (and other background writes of the controller) while it runs."""
        self.allocated_pods = 0

    async def devices_free(self, key: Key, results: Iterable[ClaimAllocation]) -> bool:
        """Whether the decided devices are still free, checked right before they are
        assumed (with every change the thread deferred applied, so the assumption is never
        deferred itself). A decision is made on the current state, so a clash means a change
        it did not see: the pod is decided again rather than handed a device in use."""
        await self.thread.settled()
        clashes = self.state.clashes(results)
        if not clashes:
            return True
        metrics.ALLOCATIONS.labels(result="clash").inc()
        log.error(
            "decided devices are in use; deciding again",
            pod=str(key),
            devices=sorted("/".join(d) for d in set(clashes)),
        )
        self.queue.add_after(key, BUSY_DELAY)
        return False

    async def start(self, placed: list[Placed], gang: str | None = None) -> None:
        """Count what the decision chose as used and hand its writes to a background task
        (a gang, named ``namespace/name``, takes one slot: its writes run one by one)."""
        # A write slot first: cancelled while waiting for one, nothing is left assumed.
        await self.slots.acquire()
        # A claim that members share comes once per member, with the same allocation.
        decided = {result.claim: result for p in placed for result in p.results}
        if not await self.devices_free(placed[0].key, decided.values()):
            self.slots.release()
            return
        # The devices (and the node's cpu, ports, ...) count as used from now on, even
        # before the API answers.
        claim_keys: set[Key] = set()
        for p in placed:
            for (_, claim), chosen in zip(pending(p.entries), p.results, strict=True):
                self.thread.mutate(self.state.assume, claim, chosen)
            if not p.pod.node_name:  # gated, or passed the gate by: it goes where we chose
                self.usage.assume(p.key, p.pod.needs, p.node)
            claim_keys |= {claim_key(claim) for _, claim in p.entries}
            self.in_flight.add(p.key)
            # A decision that found room starts its writes afresh: the backoff its waiting
            # built up is not theirs (a stale write is retried at once, not after 3 s; seen
            # in the preemption latency benchmark).
            self.queue.forget(p.key)
        self.writer.claims_in_flight |= claim_keys
        assert self.writers is not None
        self.writers.create_task(self._commit(placed, claim_keys, gang))

    async def _commit(self, placed: list[Placed], claim_keys: set[Key], gang: str | None) -> None:
        """Every placed pod's claims, then every pod. A failure before the pods leaves them
        gated: the written claims are read back by the next decision."""
        keys = [p.key for p in placed]
        departed: list[Key] = []
        attempted: list[Placed] = []  # the pod whose write failed is the last
        done = False
        try:
            written = await self._write_claims(placed, attempted)
            if gang is not None:
                departed = await self._departed([p for p, _ in written])
                if departed:
                    log.info(
                        "gang member left before the gang was released; deciding again",
                        members=[str(k) for k in keys], departed=[str(k) for k in departed],
                    )  # fmt: skip
                    written = []  # nothing released: the next decision sees the gang short
            await self._release_all(written, gang, attempted)
            done = True
        except asyncio.CancelledError:
            for key in keys:
                self.usage.forget(key)  # the pod counts where the watch says (pinned or not)
            raise
        except Exception as error:
            await self._failed(placed, gang, error, attempted[-1] if attempted else placed[0])
        else:
            if departed:
                metrics.ALLOCATIONS.labels(result="gang-member-left").inc()
                for key in keys:
                    self.usage.forget(key)
                return  # (finally requeues the members)
            metrics.ALLOCATIONS.labels(result="allocated").inc(len(placed))
            self.allocated_pods += len(placed)
            for p in placed:
                if p.pod.gated:
                    waited = metrics.age_seconds(p.pod.created)
                    if waited is not None:
                        metrics.GATED_SECONDS.observe(waited)
                self.waiting.discard(p.key)
                self.queue.forget(p.key)
        finally:
            self.in_flight.difference_update(keys)
            self.writer.claims_in_flight -= claim_keys
            self.slots.release()
            for key in keys:
                # It came up while in flight (its deletion, say): decide again now, once it is
                # written or a member left; after a failure its retry keeps the backoff.
                if departed or (done and key in self.resync):
                    self.queue.add(key)
                self.resync.discard(key)

    async def _write_claims(
        self, placed: list[Placed], attempted: list[Placed]
    ) -> list[tuple[Placed, dict[str, AllocationResult]]]:
        """Each pod's claim writes, one pod after another (each appended to ``attempted``
        first); a failure gives back what was counted for the pods not attempted. The failed
        pod's claims are its writer's to give back, or to keep while the write is unanswered
        (it may have landed), so a claim it shares with a pod not attempted is left to it."""
        written: list[tuple[Placed, dict[str, AllocationResult]]] = []
        handled: set[Key] = set()  # claims written, or left to the failed pod's writer
        try:
            for p in placed:
                attempted.append(p)
                entries, results = self._after_earlier_writes(p, handled)
                allocations = await self.writer.write_claims(p.pod, p.node, entries, results)
                written.append((p, allocations))
                handled |= {claim_key(claim) for _, claim in entries}
        except BaseException:
            if len(attempted) > len(written):
                handled |= {claim_key(claim) for _, claim in attempted[-1].entries}
            for p in placed[len(attempted) :]:  # never attempted
                for _, claim in pending(p.entries):
                    key = claim_key(claim)
                    if key not in handled and key not in self.writer.unanswered:
                        handled.add(key)  # a claim two of them share is given back once
                        self.thread.mutate(self.state.release, claim)
            raise
        return written

    def _after_earlier_writes(
        self, placed: Placed, written_claims: set[Key]
    ) -> tuple[Entries, list[ClaimAllocation]]:
        """The pod's entries and its claims' allocations to write, after the earlier pods'
        writes: a claim shared with one of them is allocated already (the cache holds the
        written claim), so this pod only reserves it."""
        if not written_claims.intersection(claim_key(claim) for _, claim in placed.entries):
            return placed.entries, placed.results
        decided = {
            claim_key(claim): result
            for (_, claim), result in zip(pending(placed.entries), placed.results, strict=True)
        }
        entries: Entries = []
        for entry, claim in placed.entries:
            key = claim_key(claim)
            current = self.writer.claims.get(key) if key in written_claims else None
            entries.append((entry, current if current is not None else claim))
        return entries, [decided[claim_key(claim)] for _, claim in pending(entries)]

    async def _departed(self, members: list[Placed]) -> list[Key]:
        """Members that are gone, read live (the cache may not have seen a deletion that
        landed between the claim writes): deleted, replaced, being deleted or finished."""

        async def gone(member: Placed) -> bool:
            try:
                raw = await self.runtime.client.get(PODS, member.pod.name, member.pod.namespace)
            except NotFound:
                return True
            live = parse_pod(raw, self.runtime.protocol)
            return live.uid != member.pod.uid or live.deleting or live.done

        found = await asyncio.gather(*(gone(member) for member in members))
        return [member.key for member, is_gone in zip(members, found, strict=True) if is_gone]

    async def _release_all(
        self,
        written: list[tuple[Placed, dict[str, AllocationResult]]],
        gang: str | None,
        attempted: list[Placed],
    ) -> None:
        """Every pod written at once: devices, pin, gate lifted (the first that failed is
        appended to ``attempted``)."""
        outcomes = await asyncio.gather(
            *(self._release(p, allocations, gang) for p, allocations in written),
            return_exceptions=True,
        )
        failed = [
            p for (p, _), o in zip(written, outcomes, strict=True) if isinstance(o, BaseException)
        ]
        if failed:
            attempted.append(failed[0])
            lifted = [
                p
                for (p, _), o in zip(written, outcomes, strict=True)
                if not isinstance(o, BaseException)
            ]
            if gang is not None and lifted:
                await self._report_torn(gang, lifted, failed)
            raise next(o for o in outcomes if isinstance(o, BaseException))

    async def _release(
        self, placed: Placed, allocations: dict[str, AllocationResult], gang: str | None
    ) -> None:
        pod = placed.pod
        if gang is not None:
            # The freshest view of a member: our own condition writes (and the claim
            # controller's) change it while the gang waits, and a stale version conflicts.
            current = self.pods.get(placed.key)
            if current is not None and current.uid == pod.uid:
                pod = current
        await self.writer.write_pod(pod, placed.node, placed.entries, allocations)
        log.info(
            "pod allocated",
            pod=pod.ref,
            node=placed.node,
            claims=[claim.metadata.name for _, claim in placed.entries],
            **({"gang": gang} if gang is not None else {}),
        )

    async def _report_torn(self, gang: str, lifted: list[Placed], missing: list[Placed]) -> None:
        """Some members were released and others not (deleted or changed just then): the
        gang runs short. Said on each released member, with what the user can do."""
        names = ", ".join(member.pod.name for member in missing)
        message = (
            f"gang {gang}: released without {names} (deleted or changed while the gang's "
            "gates were being lifted), so it runs short; delete the gang's pods to run it "
            "whole again"
        )
        metrics.ALLOCATIONS.labels(result="gang-torn").inc()
        log.warning(
            "gang released short", gang=gang, released=[str(m.key) for m in lifted],
            missing=[str(m.key) for m in missing],
        )  # fmt: skip
        for member in lifted:
            await self.runtime.events.post(
                member.pod.involved(), REASON_GANG_INCOMPLETE, message, warning=True
            )

    async def _failed(
        self, placed: list[Placed], gang: str | None, error: Exception, failing: Placed
    ) -> None:
        """A write failed (``failing``'s): what was counted for the pods is forgotten, and
        they are decided again after a backoff (the next decision reads back what was
        written)."""
        keys = [p.key for p in placed]
        kind = failure_kind(error)
        metrics.ALLOCATIONS.labels(result=_FAILURE_RESULT.get(kind, "error")).inc()
        if gang is not None:
            log.warning("gang write failed", members=[str(k) for k in keys], error=str(error))
        if await self.runtime.refused_by_fencing(error, failing.pod.ref):
            pass  # not this replica's to allocate (it stops), or retried soon
        elif kind is FailureKind.REJECTED:
            await self.runtime.events.post(
                failing.pod.involved(),
                REASON_FAILED,
                f"the API server refused the allocation on node {failing.node}: {error}",
                warning=True,
            )
        for key in keys:
            self.usage.forget(key)
            self.queue.retry_after_failure(key, error, controller=self.name)
