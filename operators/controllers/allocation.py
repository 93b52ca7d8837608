"""The claim allocator loop: choose a node and devices for gated pods, write, ungate.

Pods enter the queue when they carry the scheduling gate (or are bound) and all their
claims exist. For each, the loop decides in two halves:

1. on the event loop, the node filter (:mod:`operators.scheduling`): the nodes kube-scheduler
   would bind the pod to (selector, affinity, taints, cpu/memory/pods, host ports, inter-pod
   affinity, topology spread), and those its allocated claims allow;
2. in the decision thread (:mod:`.decisions`), the device decision among them by the node
   policy, with a wall-clock budget spent in slices so that a costly pod never holds up the
   pods behind it for long.

Then it writes (:mod:`.allocwrites`: claims first, the pod last, each write conditional on
what it read) or tells the user why not (:mod:`.allocexplain`). A conflict requeues at once,
an unavailable API server with backoff, a refused write with an Event and a long delay.

Claims requesting adminAccess are allocated only with the DRAAdminAccess gate on and in a
namespace labelled for it (upstream refuses other such claims at admission; claims from
templates are already refused by the claim controller, this covers claims written directly).

Devices, and the node's cpu, ports and the like, are counted as used from the moment they are
chosen (the allocator state's and the usage's assumptions), so the loop never hands a device
out twice while the watch catches up. Decisions are made one at a time, deterministically;
the writes of several pods then overlap (a claim being written blocks other pods that use
it until its writes are done).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from operators import metrics
from operators.allocator.errors import DecisionTimeout
from operators.allocator.features import GATE_TO_FIELD, Features
from operators.allocator.nodes import NodeInfo, NodeSelector, NodeSelectorError
from operators.allocator.results import ClaimAllocation
from operators.allocator.state import AllocatorState
from operators.api.annotations import SCHEDULING_GATE, GangRef
from operators.api.limits import RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE
from operators.api.models import ResourceClaim
from operators.api.podgroup import PodGroup
from operators.cache.core import (
    POD_CLAIMS_INDEX,
    POD_GANG_INDEX,
    Namespace,
    Node,
    Pod,
    PodClaim,
)
from operators.cache.informer import Change, Key, version_number
from operators.controllers import (
    allocgang,
    claimrules,
    claimstatus,
    placement,
    podcondition,
)
from operators.controllers.allocexplain import REASON_FAILED, Explanations
from operators.controllers.allocwrites import (
    ClaimWrites,
    UnansweredWrite,
    claim_key,
    is_allocated,
    pending,
)
from operators.controllers.base import Runtime, register_controller, retry_forever
from operators.controllers.decisions import (
    AlreadyAllocated,
    Candidates,
    ClaimBusy,
    DecisionThread,
    NeedsThread,
    NotReady,
    SliceUsed,
    StillWaiting,
    TooSlow,
    Unallocatable,
)
from operators.controllers.quotastatus import QuotaStatusWriter
from operators.controllers.workqueue import WorkQueue, run_workers
from operators.fencing import ALLOCATED_BY_ANNOTATION, AllocationRecord
from operators.kube import (
    DEVICE_CLASSES,
    DEVICE_QUOTAS,
    DEVICE_TAINT_RULES,
    NAMESPACES,
    NODES,
    POD_GROUPS,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Conflict,
    FailureKind,
    NotFound,
    failure_kind,
)
from operators.scheduling import filters
from operators.scheduling.usage import ClusterUsage
from operators.settings import FeatureGates

log = structlog.get_logger(__name__)

CONDITION_TYPE = podcondition.CONDITION_TYPE
BUSY_DELAY = 0.05
RELIST_DELAY = 0.2
"""Seconds before a pod is looked at again while a cache relists (its watch expired)."""
EXPLAIN_PERIOD = 10.0  # seconds between explanations of one waiting pod
EXPLAIN_GRACE = 1.0  # seconds a pod waits for room before it is explained at all
MAX_CONCURRENT_WRITES = 64  # pods whose writes are in flight at once
REASON_OTHER_ALLOCATOR = "AnotherAllocator"
WAKE_DELAY = 0.02  # coalesces a burst of cluster changes into one retry of waiting pods
DECISION_SLICE = 0.5  # seconds of one decision attempt; a pod's budget spans several
INLINE_SLICE = 0.02  # seconds a decision may take on the event loop before it moves off it


def _namespace_of(key: Key) -> str:
    return key.namespace


def _check_member_alone(pod: Pod, gang: GangRef) -> None:
    """Raise :class:`Unallocatable` unless a gang member neither gated nor bound may be
    allocated on its own.

    One that passed the gate by may not: allocated alone, kube-scheduler would bind it while
    the others wait (a gang released in part). One dralloc released with its gang (its
    allocation record says so: only the operator may write it) and whose claims were cleared
    since may, as any released pod: kube-scheduler's PostFilter clears a claim when its view
    has no node for the pod (a node it has not seen yet), and the gang was placed already.
    Unless the gang has a topology: placed alone, the member could land outside the value its
    gang shares, so it is told instead."""
    if AllocationRecord.parse(pod.annotations.get(ALLOCATED_BY_ANNOTATION)) is None:
        raise Unallocatable(
            f"gang {gang.name}: this member has no {SCHEDULING_GATE} gate (created while the "
            "webhook was away, or the gate removed by hand); a gang is placed only while all "
            "its members are gated, so this pod is not allocated alone: delete it and create "
            "it again"
        )
    if gang.topology is not None:
        raise Unallocatable(
            f"gang {gang.name}: this member's claims were cleared after its gang was placed "
            "(kube-scheduler does that to a pod it finds no node for); placed alone it could "
            f"leave the {gang.topology.describe()} its gang shares, so it is not: delete it "
            "and create it again (its controller, if it has one, makes it anew at the gate)"
        )


def allocator_features(gates: FeatureGates) -> Features:
    """The allocator's flags from the operator's gates (gates it does not know keep defaults)."""
    return Features.from_gates(
        {name: gates.enabled[name] for name in GATE_TO_FIELD if name in gates.enabled}
    )


class AllocationController(ClaimWrites, Explanations):
    name = "allocation"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.client = runtime.client
        self.settings = runtime.settings
        cache = runtime.cache
        self.pods = cache[PODS]
        self.nodes = cache[NODES]
        self.namespaces = cache[NAMESPACES]
        self.claims = cache.assumed(RESOURCE_CLAIMS)
        self.state = AllocatorState(
            allocator_features(self.settings.feature_gates),
            device_policy=str(self.settings.device_policy),
        )
        # Namespaces take turns: one namespace's burst (a hostile gang's thousand members)
        # does not delay another's next pod by more than one decision.
        self.queue: WorkQueue[Key] = WorkQueue(
            base_delay=self.settings.requeue_base_delay,
            max_delay=self.settings.requeue_max_delay,
            share=_namespace_of,
        )
        self.waiting: set[Key] = set()
        # Pods we patched, by the resourceVersion the API returned: older cached versions
        # of them are stale, and acting on one would only produce a conflict.
        self.written: dict[Key, int] = {}
        # Decisions are serial; the writes of up to MAX_CONCURRENT_WRITES pods overlap.
        self.in_flight: set[Key] = set()
        self.resync: set[Key] = set()
        self.claims_in_flight: set[Key] = set()
        self.unanswered: dict[Key, UnansweredWrite] = {}
        self.explained_at: dict[Key, float] = {}
        self.failing_since: dict[Key, float] = {}  # pods no node could take, since when
        self.missing_since: dict[Key, float] = {}  # pods naming a claim that does not exist
        self.pod_groups_told: set[str] = set()  # pod UIDs told no PodGroup is read here
        # What the last full look at a gang told every member, by (namespace, gang), while
        # newcomers may be told the same without another (allocgang.GangTold).
        self.gangs_told: dict[tuple[str, str], allocgang.GangTold] = {}
        # Background tasks telling the members behind a gang's search (allocgang).
        self.gangs_telling: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.pod_group_missing_since: dict[Key, float] = {}  # pods whose PodGroup is missing
        self.slots = asyncio.Semaphore(MAX_CONCURRENT_WRITES)
        self._writers: asyncio.TaskGroup | None = None
        self.allocated_pods = 0
        # Every node in name order with its allocator view, shared by all pods until a node
        # changes: rebuilding it per pod sorted the labels of every node for every pod.
        self._node_list: list[tuple[Node, NodeInfo]] | None = None
        self._node_infos: tuple[NodeInfo, ...] = ()  # of _node_list, in its order
        self._node_of: dict[str, Node] = {}  # of _node_list, by name
        # What the pods on each node hold (cpu, ports, ...), moved by pod events: the
        # scheduler's filters read it for every candidate node.
        self.usage = ClusterUsage()
        # Decisions run in one thread of their own (see decisions.py).
        self.decisions = DecisionThread()
        self.decision_spent: dict[Key, float] = {}  # seconds of budget used, per pod
        self.pods.ensure_index(POD_CLAIMS_INDEX, Pod.claim_keys)
        self.pods.ensure_index(POD_GANG_INDEX, Pod.gang_keys)
        self._statuses_by_others = (
            runtime.protocol.claims_in_spec and not self.settings.claims_controller
        )
        self._serves_ungated = runtime.protocol.allocates_ungated and self.settings.allocate_ungated
        # Claims generated for a pod are found through their owner until the pod records
        # their names (we record them in our own pod write; see claims.py).
        self.pods.ensure_index(claimrules.PODS_BY_UID_INDEX, claimrules.pod_uid_keys)
        self.claims.ensure_index(claimrules.CLAIMS_BY_OWNER_INDEX, claimrules.owner_uid_keys)
        self.pods.add_handler(self._on_pod)
        self.nodes.add_handler(self._on_node)
        self.claims.informer.add_handler(self._on_claim)
        self.claims.add_listener(self._on_claim_written)
        cache[RESOURCE_SLICES].add_handler(self._on_slice)
        cache[DEVICE_CLASSES].add_handler(self._on_class)
        cache[DEVICE_TAINT_RULES].add_handler(self._on_rule)
        cache[DEVICE_QUOTAS].add_handler(self._on_quota)
        cache[POD_GROUPS].add_handler(self._on_pod_group)
        self.quota_status = QuotaStatusWriter(
            self.client, cache[DEVICE_QUOTAS], self.state.quotas, self.decisions.run,
            events=runtime.events,
        )  # fmt: skip
        self.namespaces.add_handler(self._on_namespace)
        metrics.register_gated_gauge(self._gated_created)

    def _gated_created(self) -> list[str]:
        """Creation times of the pods waiting at dralloc's gate (for the gated-pods gauges)."""
        return [pod.created for pod in self.pods.values() if pod.gated and not pod.deleting]

    # --- keeping the allocator state current, and queueing hints ---------------------------

    def _on_slice(self, change: Change[Any]) -> None:
        if change.new is not None:
            self._mutate(self.state.upsert_slice, change.new)
        elif change.old is not None:
            self._mutate(self.state.remove_slice, change.old.metadata.uid or change.key.name)
        self._wake()

    def _on_class(self, change: Change[Any]) -> None:
        if change.new is not None:
            self._mutate(self.state.upsert_class, change.new)
        else:
            self._mutate(self.state.remove_class, change.key.name)
        self._wake()

    def _on_rule(self, change: Change[Any]) -> None:
        if change.new is not None:
            self._mutate(self.state.upsert_taint_rule, change.new)
        else:
            self._mutate(self.state.remove_taint_rule, change.key.name)
        self._wake()

    def _on_quota(self, change: Change[Any]) -> None:
        if change.new is not None:
            self._mutate(self.state.upsert_quota, change.new)
        else:
            self._mutate(self.state.remove_quota, change.key.namespace, change.key.name)
        self._wake()  # a raised limit lets waiting pods in

    def _on_pod_group(self, change: Change[PodGroup]) -> None:
        """A PodGroup appeared, went, or changed what dralloc reads of it (the view ignores
        status updates): its pods decide again (a gang size, or whether they are a gang)."""
        if change.old == change.new:
            return
        bucket = (change.key.namespace, change.key.name)
        for key in self.pods.index_keys(POD_GANG_INDEX, bucket):
            pod = self.pods.get(key)
            if pod is not None and pod.pod_group == change.key.name and self._wants_allocation(pod):
                self.queue.add(key)

    def _on_claim(self, change: Change[ResourceClaim]) -> None:
        if change.new is not None:
            self._mutate(self.state.upsert_claim, change.new)
        elif change.old is not None:
            self._mutate(self.state.remove_claim, change.old)
        was = is_allocated(change.old)
        now = is_allocated(change.new)
        if was and not now:
            self._wake()  # devices were freed
        if change.key not in self.claims_in_flight:  # else the write's own answer decides
            self._settle_if_newer(change.key, change.new)
        pods = set(self.pods.index_keys(POD_CLAIMS_INDEX, (change.key.namespace, change.key.name)))
        claim = change.new or change.old
        if claim is not None:
            pods.update(self._owner_pods(claim))
        for key in sorted(pods):
            self.queue.add(key)
            pod = self.pods.get(key) if now else None
            if pod is not None and ALLOCATED_BY_ANNOTATION in pod.annotations:
                self._check_allocator(pod)  # the claim may come after its pod

    def _on_claim_written(self, key: Key, claim: ResourceClaim) -> None:
        """A claim just created for a pod (by the claim controller): its pod can be decided
        now, without waiting for the watch to show the claim."""
        if not is_allocated(claim):
            for pod_key in self._owner_pods(claim):
                self.queue.add(pod_key)

    def _owner_pods(self, claim: ResourceClaim) -> list[Key]:
        """The pod a claim was generated for (which may not record the claim's name yet)."""
        owner = claimrules.owner_pod_uid(claim)
        return self.pods.index_keys(claimrules.PODS_BY_UID_INDEX, owner) if owner else []

    def _on_node(self, change: Change[Node]) -> None:
        self._node_list = None  # any add, update or delete changes the candidates
        old, new = change.old, change.new
        if new is not None and (
            old is None
            or old.labels != new.labels
            or old.taints != new.taints
            or old.unschedulable != new.unschedulable
            or old.allocatable != new.allocatable
        ):
            self._wake()

    def _wants_allocation(self, pod: Pod) -> bool:
        """Whether the pod's claims are this controller's to allocate (and its pod to write).

        Gated pods, and bound ones (whose claims must be allocated on their node). In-tree,
        also every other pod with claims in a namespace dralloc serves: a pod that passed the
        gate by (the webhook down or failing open, a pod older than the operator, one created
        with a gate of its own removed) is allocated here like any other, and kube-scheduler
        binds it where its claims are. The claim-allocation admission policy
        (manifests/base) keeps kube-scheduler from allocating those claims itself; the gate
        only spares it the refused attempts."""
        if not pod.claims or pod.done or pod.deleting:
            return False
        # A bound pod is looked at whatever its devices annotation says (anyone who may edit
        # the pod could have written it): its claims tell whether it is allocated.
        if pod.gated or pod.node_name:
            return True
        if not self._serves_ungated:
            return False
        labeled = self.settings.gate_namespace_selector is not None
        labels = self._namespace_labels(pod.namespace) if labeled else None
        return self.settings.serves_namespace(pod.namespace, labels)

    def _on_namespace(self, change: Change[Namespace]) -> None:
        """The admin-access label may have been added (or removed) for the namespace's pods,
        or the label that puts its pods in dralloc's scope.

        A namespace the cache sees only after one of its pods is not looked at: walking every
        pod for every namespace listed at startup would cost pods x namespaces. Such a pod
        comes back with its next event (kube-scheduler marks it unschedulable when its own
        allocation is refused)."""
        if change.old is None or change.new is None or change.old.labels == change.new.labels:
            return
        for key, pod in self.pods.items():
            if key.namespace == change.key.name and self._wants_allocation(pod):
                self.queue.add(key)

    def _on_pod(self, change: Change[Pod]) -> None:
        pod = change.new
        if pod is not None and ALLOCATED_BY_ANNOTATION in pod.annotations:
            self._check_allocator(pod)
        left = self.usage.node_of(change.key)
        self.usage.update(change.key, pod.needs if pod is not None else None)
        if left and self.usage.node_of(change.key) != left:
            self._wake()  # what it held on its node is free for waiting pods
        if allocgang.member_changed(change.old, pod):
            self._gang_changed(change, pod)
        if pod is None:
            if change.old is not None:
                self.pod_groups_told.discard(change.old.uid)
            self.pod_group_missing_since.pop(change.key, None)
            self.waiting.discard(change.key)
            self.written.pop(change.key, None)
            self.explained_at.pop(change.key, None)
            self.failing_since.pop(change.key, None)
            self.decision_spent.pop(change.key, None)
            self.missing_since.pop(change.key, None)
            return
        written = self.written.get(change.key)
        if written is not None and version_number(pod.resource_version) >= written:
            del self.written[change.key]
        if self._wants_allocation(pod):
            self.queue.add(change.key)

    def _gang_changed(self, change: Change[Pod], pod: Pod | None) -> None:
        """A member left, was released, or came never gated (no claims): the gang decides
        again (and gives back what a gang that can no longer be completed holds), unless it
        was told already and a gated one left (``allocgang.gated_member_left``). One gated
        member decides for all of them: requeueing each of a thousand members on each of a
        thousand departures (a namespace deleted) would cost a million."""
        changed = change.old if change.old is not None else pod
        assert changed is not None
        namespace, gang = changed.gang_keys()[0]
        if allocgang.told_already(self, namespace, gang) and allocgang.gated_member_left(
            change.old, pod
        ):
            if change.key in self.waiting:
                self._stand_in(namespace, gang, change.key)
            return
        allocgang.forget_told(self, namespace, gang)
        # One that names the gang as the one that changed did (a member whose own
        # annotations are refused decides nothing for the gang); all where none does.
        others: list[Key] = []
        for key in self.pods.index_keys(POD_GANG_INDEX, (namespace, gang)):
            member = self.pods.get(key) if key != change.key else None
            if member is None or not member.gated:
                continue
            if member.gang == changed.gang:
                self.queue.add(key)
                break
            others.append(key)
        else:
            for key in others:
                self.queue.add(key)

    def _stand_in(self, namespace: str, gang: str, left: Key) -> None:
        """The member that stood for its gang among the waiting pods left: another gated one
        stands in, so that cluster changes still wake the gang (its decision then looks at
        all members again, the one that sorts first standing for them)."""
        for key in self.pods.index_iter(POD_GANG_INDEX, (namespace, gang)):
            member = self.pods.get(key) if key != left else None
            if member is not None and member.gated:
                self.waiting.add(key)
                return

    def writing(self, claim: Key, pods: Iterable[Key]) -> bool:
        """Whether this controller is still writing a claim's allocation or its pods (the
        watch has not shown the result yet): nobody else should undo it meanwhile."""
        return (
            claim in self.claims_in_flight
            or claim in self.unanswered
            or any(pod in self.in_flight or pod in self.written for pod in pods)
        )

    def _check_allocator(self, pod: Pod) -> None:
        """A pod allocated by another allocator while this one leads: one of them stops."""
        record = AllocationRecord.parse(pod.annotations.get(ALLOCATED_BY_ANNOTATION))
        if record is None or self.runtime.mark in (None, record.by):
            return
        # Only a record the claims bear out counts: a pod's own annotation (which the
        # admission policy guards, but that may not be installed) must not stop an operator.
        names = pod.claim_names()
        claims = [self.claims.get(Key(pod.namespace, name)) for name in names]
        if not names or not all(
            c is not None and claimrules.reserved_for(c, pod.uid) for c in claims
        ):
            return
        if not self.runtime.would_stand_down(record):
            return
        self.runtime.check_allocator(self._stand_down_for(record, pod))

    async def _stand_down_for(self, record: AllocationRecord, pod: Pod) -> None:
        if not await self.runtime.allocator_is_live(record.by):
            return  # no such allocator: a record someone made up
        if not self.runtime.saw_allocation(record, pod.ref):
            return
        ours = self.runtime.mark
        message = (
            f"allocated by another allocator ({record.by.describe()}) while "
            f"{ours.describe() if ours else 'this replica'} was acting: two operators are "
            "configured with different Leases; this one stops allocating while the other "
            "acts (give every operator the same --lease-namespace and --lease-name)"
        )
        await self.runtime.events.post(
            pod.involved(), REASON_OTHER_ALLOCATOR, message, warning=True
        )

    def _wake(self) -> None:
        for key in self.waiting:
            self.queue.add_after(key, WAKE_DELAY)
        self.waiting.clear()

    # --- the decision thread ---------------------------------------------------------------

    def _mutate(self, change: Callable[..., object], *args: Any) -> None:
        """Change the allocator state, after the running decision if there is one."""
        self.decisions.mutate(change, *args)

    async def _decide_off_loop(
        self, pod: Pod, entries: list[tuple[PodClaim, ResourceClaim]], candidates: Candidates
    ) -> tuple[str, list[ClaimAllocation]]:
        """``_decide`` in the decision thread, while the event loop goes on."""
        return await self.decisions.run(self._decide, pod, entries, candidates)

    # --- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        for key, pod in self.pods.items():
            if self._wants_allocation(pod):
                self.queue.add(key)
        async with asyncio.TaskGroup() as writers:
            self._writers = writers
            writers.create_task(retry_forever("confirm-writes", self._confirm_unanswered))
            writers.create_task(retry_forever("quota-status", self.quota_status.run))
            await run_workers(self.queue, self.sync, workers=1, name=self.name)

    def health(self) -> dict[str, Any]:
        return {
            "queued": self.queue.pending(),
            "waiting": len(self.waiting),
            "unanswered_writes": len(self.unanswered),
            "allocated_pods": self.allocated_pods,
        }

    async def sync(self, key: Key) -> None:
        """Decide for one pod (serially), then hand its writes to a background task."""
        # Every change made so far first, above all the assumptions of the pods decided
        # before this one (deferred while a quota status read holds the thread).
        await self.decisions.settled()
        if not self.runtime.cache.whole:
            # A watch expired and its kind is being listed again: the changes in between
            # are not known yet (another allocator's, a deletion). Decide on the whole view.
            self.queue.add_after(key, RELIST_DELAY)
            return
        pod = self.pods.get(key)
        if pod is None or not self._wants_allocation(pod):
            self.queue.forget(key)
            self.waiting.discard(key)
            return
        if key in self.written:
            return  # our own write is on its way through the watch; its event requeues
        if key in self.in_flight:
            self.resync.add(key)
            return
        try:
            gang = await allocgang.gang_of(self, pod) if pod.gated else None
            if gang is not None:
                await allocgang.sync_gang(self, pod, gang)  # the whole gang, all or nothing
                return
            # (A member placed with its gang and released is done here: AlreadyAllocated.)
            entries = self._resolve_claims(pod)
            if pod.gang is not None and not pod.gated and not pod.node_name:
                _check_member_alone(pod, pod.gang)
            started = time.perf_counter()
            try:
                # Quick decisions are made right here; only one that needs more than a few
                # milliseconds moves to the decision thread (a hand-off costs a GIL switch),
                # with the node filter run beforehand (it reads the loop's caches).
                candidates = self._candidates(pod, entries, lazy=True)
                node, results = self._decide(pod, entries, candidates, inline=True)
            except NeedsThread:
                candidates = self._candidates(pod, entries)
                node, results = await self._decide_off_loop(pod, entries, candidates)
            metrics.ALLOCATION_SECONDS.observe(time.perf_counter() - started)
        except NotReady:
            return  # an event about the missing claim will requeue it
        except ClaimBusy:
            self.queue.add_after(key, BUSY_DELAY)
            return
        except StillWaiting:
            self.waiting.add(key)
            self.queue.retry(key)
            return
        except SliceUsed:
            self.queue.add(key)  # behind the pods already waiting (it is being processed)
            return
        except TooSlow as reason:
            metrics.ALLOCATIONS.labels(result="timeout").inc()
            log.warning("allocation decision over budget", pod=pod.ref, reason=reason.summary)
            with contextlib.suppress(Conflict, NotFound):
                await self._explain(pod, reason)
            self.queue.retry(key)
            return
        except Unallocatable as reason:
            metrics.ALLOCATIONS.labels(result="unallocatable").inc()
            self.waiting.add(key)
            with contextlib.suppress(Conflict, NotFound):
                await self._explain(pod, reason)
            self.queue.retry(key)  # safety net; cluster changes wake it sooner
            return
        # A write slot first: cancelled while waiting for one, nothing is left assumed.
        await self.slots.acquire()
        if not await self.devices_free(key, results):
            self.slots.release()
            return
        # The devices (and the node's cpu, ports, ...) count as used from now on, even
        # before the API answers.
        for (_, claim), chosen in zip(pending(entries), results, strict=True):
            self._mutate(self.state.assume, claim, chosen)
        if not pod.node_name:  # gated, or passed the gate by: it goes where we chose
            self.usage.assume(key, pod.needs, node)
        claim_keys = {Key(pod.namespace, claim.metadata.name or "") for _, claim in entries}
        self.claims_in_flight |= claim_keys
        self.in_flight.add(key)
        assert self._writers is not None
        self._writers.create_task(self._commit(key, pod, node, entries, results, claim_keys))

    async def devices_free(self, key: Key, results: Iterable[ClaimAllocation]) -> bool:
        """Whether the decided devices are still free, checked right before they are
        assumed (with every change the thread deferred applied, so the assumption is never
        deferred itself). A decision is made on the current state, so a clash means a change
        it did not see: the pod is decided again rather than handed a device in use."""
        await self.decisions.settled()
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

    async def _commit(
        self,
        key: Key,
        pod: Pod,
        node: str,
        entries: list[tuple[PodClaim, ResourceClaim]],
        results: list[ClaimAllocation],
        claim_keys: set[Key],
    ) -> None:
        try:
            await self._write_all(pod, node, entries, results)
        except asyncio.CancelledError:
            self.usage.forget(key)  # the pod counts where the watch says (pinned or not)
            raise
        except Exception as error:
            kind = failure_kind(error)
            metrics.ALLOCATIONS.labels(result=_FAILURE_RESULT.get(kind, "error")).inc()
            if await self.runtime.refused_by_fencing(error, pod.ref):
                pass  # not this replica's to allocate (it stops), or retried soon
            elif kind is FailureKind.REJECTED:
                await self.runtime.events.post(
                    pod.involved(),
                    REASON_FAILED,
                    f"the API server refused the allocation on node {node}: {error}",
                    warning=True,
                )
            self.usage.forget(key)
            self.queue.retry_after_failure(key, error, controller=self.name)
        else:
            metrics.ALLOCATIONS.labels(result="allocated").inc()
            if pod.gated:
                waited = metrics.age_seconds(pod.created)
                if waited is not None:
                    metrics.GATED_SECONDS.observe(waited)
            self.allocated_pods += 1
            self.waiting.discard(key)
            self.queue.forget(key)
        finally:
            self.in_flight.discard(key)
            self.claims_in_flight -= claim_keys
            self.slots.release()
            if key in self.resync:
                self.resync.discard(key)
                self.queue.add(key)

    # --- reading ---------------------------------------------------------------------------

    def _resolve_claims(self, pod: Pod) -> list[tuple[PodClaim, ResourceClaim]]:
        entries = []
        for entry in pod.claims:
            name = self._claim_name(pod, entry)
            if not name:
                raise NotReady()
            if Key(pod.namespace, name) in self.claims_in_flight:
                raise ClaimBusy()
            if Key(pod.namespace, name) in self.unanswered:
                raise NotReady()  # settled by the watch or a live read, which requeue the pod
            claim = self.claims.get(Key(pod.namespace, name))
            if claim is None:
                if entry.resource_claim_name is not None:
                    self._missing_claim(pod, entry.name, name)
                raise NotReady()  # generated: the claim controller creates it, or says why
            if not is_allocated(claim):
                namespace: Namespace | None = self.namespaces.get(Key("", pod.namespace))
                refusal = claimrules.admin_access_refusal(
                    claim.spec, namespace, self.settings.feature_gates["DRAAdminAccess"]
                )
                if refusal:
                    raise Unallocatable(
                        f'resourceclaim "{name}": {refusal}',
                        reason=claimstatus.REASON_FAILED,
                        claims={str(Key(pod.namespace, name)): refusal},
                    )
            if claim.metadata.deletion_timestamp is not None and (
                pod.gated or not claimrules.reserved_for(claim, pod.uid)
            ):
                # A pod placed already keeps the devices it has until it ends (the claim's
                # finalizer waits for it): it is not told it has none.
                raise Unallocatable(f'resourceclaim "{name}" is being deleted')
            if (
                entry.resource_claim_template_name is not None
                and claimrules.owner_pod_uid(claim) != pod.uid
            ):
                raise Unallocatable(
                    f"ResourceClaim {pod.namespace}/{name} was not created for Pod {pod.ref} "
                    "(Pod is not owner)"
                )
            entries.append((entry, claim))
        self.missing_since.pop(Key(pod.namespace, pod.name), None)
        if not pod.gated and all(claimrules.reserved_for(c, pod.uid) for _, c in entries):
            raise AlreadyAllocated()
        return entries

    def _missing_claim(self, pod: Pod, entry_name: str, claim_name: str) -> None:
        """A claim the pod names does not exist: after EXPLAIN_GRACE (it may be created just
        after the pod), the pod is told which one, on its condition and in an Event. A name
        always means the pod's own namespace; the claim's creation requeues the pod."""
        key = Key(pod.namespace, pod.name)
        now = time.monotonic()
        if now - self.missing_since.setdefault(key, now) < EXPLAIN_GRACE:
            raise StillWaiting()
        raise Unallocatable(
            f'claim entry "{entry_name}": resourceclaim "{claim_name}" not found in '
            f'namespace "{pod.namespace}"'
        )

    def _claim_name(self, pod: Pod, entry: PodClaim) -> str | None:
        """The claim an entry refers to: recorded on the pod, or generated for it (found
        through its owner while the pod does not record it yet).

        In-tree beside kcm's claim controller (ours off), the pod's recorded name is waited
        for: kcm records it right after creating the claim, and our own statuses write
        would race with that one (a conflict, or the same names written twice)."""
        name = pod.claim_name(entry)
        if not name and self._statuses_by_others:
            return None
        if not name and entry.resource_claim_template_name is not None:
            name = claimrules.generated_claim_name(
                self.claims.by_index(claimrules.CLAIMS_BY_OWNER_INDEX, pod.uid),
                entry.name,
                self.runtime.protocol,
            )
        return name

    def _sorted_nodes(self) -> list[tuple[Node, NodeInfo]]:
        """Every cached node in name order with its allocator view (see ``_node_list``)."""
        if self._node_list is None:
            nodes = sorted(self.nodes.values(), key=lambda n: n.name)
            self._node_list = [(node, NodeInfo(node.name, node.labels)) for node in nodes]
            self._node_infos = tuple(info for _, info in self._node_list)
            self._node_of = {node.name: node for node in nodes}
        return self._node_list

    def _namespace_labels(self, name: str) -> dict[str, str]:
        namespace: Namespace | None = self.namespaces.get(Key("", name))
        return dict(namespace.labels) if namespace is not None else {}

    def _choose(
        self, pod: Pod, entries: list[tuple[PodClaim, ResourceClaim]]
    ) -> tuple[str, list[ClaimAllocation]]:
        """The node and the new allocations (one per unallocated claim, in order).

        The loop itself runs the two halves apart: the node filter here, on the event
        loop (it reads caches the loop changes), the device decision in the decision
        thread (see ``_decide_off_loop``).
        """
        return self._decide(pod, entries, self._candidates(pod, entries))

    def _candidates(
        self, pod: Pod, entries: list[tuple[PodClaim, ResourceClaim]], *, lazy: bool = False
    ) -> Candidates:
        """The nodes kube-scheduler would bind the pod to, and why the others are out.

        ``lazy``: for a decision made on the loop, the filter is left to the allocator, which
        asks it only about nodes with room for the devices. Filtering every node for every
        pod costs more than the decision itself on a cluster of thousands of nodes, and the
        first node with room is usually the answer.
        """
        selectors: list[NodeSelector] = []
        for _, claim in entries:
            allocation = claim.status.allocation if claim.status else None
            if allocation is None:
                continue
            reserved = claim.status.reserved_for if claim.status else ()
            if (
                not any(r.uid == pod.uid for r in reserved)
                and len(reserved) >= RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE
            ):
                raise Unallocatable(
                    f'resourceclaim "{claim.metadata.name}" is already reserved for the '
                    f"maximum of {RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE} consumers"
                )
            if allocation.node_selector is not None:
                try:
                    selectors.append(NodeSelector.parse(allocation.node_selector.to_kube()))
                except NodeSelectorError as error:
                    raise Unallocatable(
                        f'resourceclaim "{claim.metadata.name}": {error}'
                    ) from error
        all_nodes = self._sorted_nodes()
        key = Key(pod.namespace, pod.name)
        rejections: list[str] = []
        candidates: list[Node] = []
        infos: list[NodeInfo] = []
        if pod.node_name:
            # Bound already: kube-scheduler chose; only the claims' own nodes matter.
            bound = self.nodes.get(Key("", pod.node_name))
            all_nodes = [(bound, NodeInfo(bound.name, bound.labels))] if bound is not None else []
            for node, info in all_nodes:
                if any(not s.matches(info) for s in selectors):
                    rejections.append(placement.REASON_CLAIM_ELSEWHERE)
                else:
                    candidates.append(node)
                    infos.append(info)
            return Candidates(len(all_nodes), rejections, candidates, infos)
        pod_filter = filters.prepare(
            pod.needs,
            self.usage,
            (node for node, _ in all_nodes),
            self._namespace_labels,
            key=key,
        )
        refused = (
            self.runtime.refusals.nodes(pod.namespace, pod.controller, time.monotonic())
            if pod.controller
            else set()
        )

        def reasons(node: Node, info: NodeInfo) -> list[str]:
            found = pod_filter.reasons(node, info)
            if not found and any(not s.matches(info) for s in selectors):
                found = [placement.REASON_CLAIM_ELSEWHERE]
            if not found and node.name in refused:
                found = [placement.REASON_REFUSED_HERE]
            return found

        if lazy and any(True for _ in pending(entries)):
            node_of = self._node_of
            return Candidates(
                len(all_nodes),
                rejections,
                candidates,
                self._node_infos,
                admits=lambda info: not reasons(node_of[info.name], info),
            )
        for node, info in all_nodes:
            found = reasons(node, info)
            if found:
                rejections += found
            else:
                candidates.append(node)
                infos.append(info)
        if len(infos) == len(all_nodes):
            return Candidates(len(all_nodes), rejections, candidates, self._node_infos)
        return Candidates(len(all_nodes), rejections, candidates, infos)

    def _decide(
        self,
        pod: Pod,
        entries: list[tuple[PodClaim, ResourceClaim]],
        candidates: Candidates,
        *,
        inline: bool = False,
    ) -> tuple[str, list[ClaimAllocation]]:
        """The device decision among the candidates (the costly half: CEL, searches).

        Off the loop (``inline`` false) it reads only the allocator state (whose changes
        wait while it runs) and this pod's own bookkeeping. Lazy candidates come only from
        the loop, and only there is the informer read again to complete them.
        """
        key = Key(pod.namespace, pod.name)
        total, rejections, infos = candidates.total, candidates.rejections, candidates.infos
        waiting_claims = [claim for _, claim in pending(entries)]
        if not waiting_claims:
            if not candidates.nodes:
                raise Unallocatable(placement.summarize(total, rejections))
            return candidates.nodes[0].name, []
        # Explaining looks at every node and writes to the pod and its claims. A pod that
        # finds no room at first usually gets it moments later (devices of a pod that just
        # ended are being released), so it is explained only once it has waited
        # EXPLAIN_GRACE, and then every EXPLAIN_PERIOD while it keeps waiting.
        now = time.monotonic()
        waited = now - self.failing_since.get(key, now)
        explain = (
            waited >= EXPLAIN_GRACE
            and now - self.explained_at.get(key, -EXPLAIN_PERIOD) >= EXPLAIN_PERIOD
        )
        # A costly pod decides in slices: when one runs out it goes to the back of the
        # queue, keeping what it computed (selector results stay cached), so the pods behind
        # it wait for one slice, not for its whole budget.
        budget = self.settings.decision_budget
        spent = self.decision_spent.get(key, 0.0)
        # Each slice as long as all before it together: a search that restarts from scratch
        # (only selector results are kept) still gets through within the budget.
        attempt = min(max(DECISION_SLICE, spent), budget - spent) if budget else None
        if inline:  # a first try on the loop itself: most decisions take a few milliseconds
            attempt = min(attempt, INLINE_SLICE) if attempt is not None else INLINE_SLICE
        if explain and candidates.admits is not None:
            # To explain, every node's verdict: the filter runs on all of them first, and
            # the one search both decides and explains (a pod due for an explanation has
            # been failing; searching lazily first would usually only fail again).
            assert inline, "lazy candidates are only made on the event loop"
            candidates = self._candidates(pod, entries)
            total, rejections, infos = candidates.total, candidates.rejections, candidates.infos
        try:
            found = self.state.find_node(
                waiting_claims,
                infos,
                str(self.settings.node_policy),
                explain=explain,
                budget_seconds=attempt,
                admits=candidates.admits,
            )
        except DecisionTimeout as error:
            if inline:
                raise NeedsThread() from error  # nothing charged: the thread starts afresh
            assert attempt is not None
            spent += attempt
            if spent < budget:
                self.decision_spent[key] = spent
                raise SliceUsed() from error
            self.decision_spent.pop(key, None)
            summary = f"0/{total} nodes: allocation search exceeded {budget:g}s; trying again later"
            refs = [str(claim_key(claim)) for claim in waiting_claims]
            raise TooSlow(
                summary, reason=claimstatus.REASON_FAILED, claims=dict.fromkeys(refs, summary)
            ) from error
        self.decision_spent.pop(key, None)
        if found.node is not None:
            self.explained_at.pop(key, None)
            self.failing_since.pop(key, None)
            return found.node, list(found.allocations)
        fatal = found.explanation is not None and bool(found.explanation.fatal_error)
        if not explain and not fatal:  # an error in the claims is reported at once
            self.failing_since.setdefault(key, now)
            raise StillWaiting()
        self.explained_at[key] = time.monotonic()
        explanation = found.explanation
        refs = [str(claim_key(claim)) for claim in waiting_claims]
        if explanation is not None and explanation.fatal_error:
            summary = f"0/{total} nodes: {explanation.fatal_error}"
            raise Unallocatable(
                summary, reason=claimstatus.REASON_FAILED, claims=dict.fromkeys(refs, summary)
            )
        reasons = list(rejections)
        details: list[str] = []
        claims = dict.fromkeys(refs, placement.summarize(total, reasons))
        if explanation is not None:
            reasons += [r.summary for r in explanation.reasons]
            details = explanation.lines()[1:]
            claims = claimstatus.claim_messages(explanation, refs, rejections, total)
        raise Unallocatable(placement.summarize(total, reasons), details, claims=claims)

    # --- writing ---------------------------------------------------------------------------


_FAILURE_RESULT: dict[FailureKind | None, str] = {
    FailureKind.STALE: "conflict",
    FailureKind.UNAVAILABLE: "unavailable",
    FailureKind.REJECTED: "refused",
}


register_controller(
    AllocationController.name,
    lambda runtime: (
        AllocationController(runtime) if runtime.settings.allocation_controller else None
    ),
)
