"""The claim allocator loop: choose a node and devices for gated pods, write, ungate.

Pods enter the queue when they carry the scheduling gate (or are bound) and all their
claims exist. For each, the loop decides in two halves:

1. on the event loop, the node filter (:mod:`operators.scheduling`): the nodes kube-scheduler
   would bind the pod to (selector, affinity, taints, cpu/memory/pods, host ports, inter-pod
   affinity, topology spread), and those its allocated claims allow;
2. in the decision thread (:mod:`.thread`), the device decision among them by the node
   policy, with a wall-clock budget spent in slices so that a costly pod never holds up the
   pods behind it for long (both halves: :mod:`.decide`).

A gang is decided whole (:mod:`.gangdecision`). Then it commits (:mod:`.commit`, one path for a pod
and a gang; the writes themselves in :mod:`.writes`: claims first, the pod last, each write
conditional on what it read) or tells the user why not (:mod:`.reporting`). A conflict
requeues at once, an unavailable API server with backoff, a refused write with an Event and a
long delay.

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
from operators.allocator.features import GATE_TO_FIELD, Features
from operators.allocator.state import AllocatorState
from operators.api.models import ResourceClaim
from operators.api.podgroup import PodGroup
from operators.cache.core import (
    POD_CLAIMS_INDEX,
    POD_GANG_INDEX,
    Namespace,
    Node,
    Pod,
    PodResourceClaim,
)
from operators.cache.informer import Change, Key
from operators.controllers import claimrules
from operators.controllers.allocation import gangdecision
from operators.controllers.allocation.commit import BUSY_DELAY, Commits, Placed
from operators.controllers.allocation.decide import Decider
from operators.controllers.allocation.outcomes import (
    ClaimBusy,
    NeedsThread,
    NotReady,
    SliceUsed,
    StillWaiting,
    TooSlow,
    Unallocatable,
)
from operators.controllers.allocation.preemption import Preemption
from operators.controllers.allocation.reporting import Reporter
from operators.controllers.allocation.thread import DecisionThread
from operators.controllers.allocation.writes import ClaimWriter
from operators.controllers.claimrules import is_allocated
from operators.controllers.quotastatus import QuotaStatusWriter
from operators.controllers.runtime import Runtime, register_controller, retry_forever
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
    NotFound,
)
from operators.scheduling.usage import ClusterUsage
from operators.settings import FeatureGates

log = structlog.get_logger(__name__)

RELIST_DELAY = 0.2
"""Seconds before a pod is looked at again while a cache relists (its watch expired)."""
REASON_OTHER_ALLOCATOR = "AnotherAllocator"
WAKE_DELAY = 0.02  # coalesces a burst of cluster changes into one retry of waiting pods


def _namespace_of(key: Key) -> str:
    return key.namespace


def allocator_features(gates: FeatureGates) -> Features:
    """The allocator's flags from the operator's gates (gates it does not know keep defaults)."""
    return Features.from_gates(
        {name: gates.enabled[name] for name in GATE_TO_FIELD if name in gates.enabled}
    )


class AllocationController:
    """Keeps the allocator state and the queue current from the watches, and decides for the
    pods in the queue one at a time; its parts do the rest (see the module docstring)."""

    name = "allocation"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
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
        # Namespaces share the worker by time: one namespace's burst (a hostile gang's
        # thousand members) does not delay another's next pod for long.
        self.queue: WorkQueue[Key] = WorkQueue(
            base_delay=self.settings.requeue_base_delay,
            max_delay=self.settings.requeue_max_delay,
            share=_namespace_of,
        )
        self.waiting: set[Key] = set()
        """Pods no node could take: cluster changes retry them (see ``_wake``)."""
        self.wakes = 0
        """How many times cluster changes woke the waiting pods (see ``_wait``)."""
        # What the pods on each node hold (cpu, ports, ...), moved by pod events: the
        # scheduler's filters read it for every candidate node.
        self.usage = ClusterUsage()
        # Decisions run in one thread of their own, one at a time.
        self.thread = DecisionThread()
        self.reporter = Reporter(runtime, self.claims, self._claim_name)
        self.writer = ClaimWriter(
            runtime, self.pods, self.claims, self.state, self.thread, self.queue,
            self.reporter, self._wake,
        )  # fmt: skip
        self.decider = Decider(
            runtime, self.state, self.usage, self.claims, self.writer, self.thread
        )
        self.commits = Commits(
            runtime, self.pods, self.state, self.usage, self.thread, self.writer, self.queue,
            self.waiting, self.name,
        )  # fmt: skip
        self.preemption: Preemption | None = None
        """Priority preemption for devices (``--preemption``)."""
        if self.settings.preemption:
            self.preemption = Preemption(
                runtime, self.state, self.usage, self.pods, self.claims, self.thread,
                self.decider,
            )  # fmt: skip
        self.pod_groups_told: set[str] = set()  # pod UIDs told no PodGroup is read here
        # What the last full look at a gang told every member, by (namespace, gang), while
        # newcomers may be told the same without another (gangdecision.GangTold).
        self.gangs_told: dict[tuple[str, str], gangdecision.GangTold] = {}
        # Background tasks telling the members behind a gang's search (gangdecision).
        self.gangs_telling: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.pod_group_missing_since: dict[Key, float] = {}  # pods whose PodGroup is missing
        self.pods.ensure_index(POD_CLAIMS_INDEX, Pod.claim_keys)
        self.pods.ensure_index(POD_GANG_INDEX, Pod.gang_keys)
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
            runtime.client, cache[DEVICE_QUOTAS], self.state.quotas, self.thread.run,
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
        if change.key not in self.writer.claims_in_flight:  # else the write's answer decides
            self.writer.settle_if_newer(change.key, change.new)
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
        self.decider.nodes_changed()  # any add, update or delete changes the candidates
        old, new = change.old, change.new
        if new is not None and (
            old is None
            or old.labels != new.labels
            or old.taints != new.taints
            or old.unschedulable != new.unschedulable
            or old.allocatable != new.allocatable
            # A kubelet that starts declaring DRAOptionalNodeOperations makes devices that
            # skip node operations usable there.
            or old.declared_features != new.declared_features
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
        labels = self.decider.namespace_labels(pod.namespace) if labeled else None
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
        if gangdecision.member_changed(change.old, pod):
            self._gang_changed(change, pod)
        if pod is None:
            if change.old is not None:
                self.pod_groups_told.discard(change.old.uid)
            self.pod_group_missing_since.pop(change.key, None)
            self.waiting.discard(change.key)
            self.writer.saw_pod(change.key, None)
            self.decider.forget(change.key)
            if self.preemption is not None:
                self.preemption.forget(change.key)
            return
        self.writer.saw_pod(change.key, pod)
        if self._wants_allocation(pod):
            self.queue.add(change.key)

    def _gang_changed(self, change: Change[Pod], pod: Pod | None) -> None:
        """A member left, was released, or came never gated (no claims): the gang decides
        again (and gives back what a gang that can no longer be completed holds), unless it
        was told already and a gated one left (``gangdecision.gated_member_left``). One gated
        member decides for all of them: requeueing each of a thousand members on each of a
        thousand departures (a namespace deleted) would cost a million."""
        changed = change.old if change.old is not None else pod
        assert changed is not None
        namespace, gang = changed.gang_keys()[0]
        if gangdecision.told_already(self, namespace, gang) and gangdecision.gated_member_left(
            change.old, pod
        ):
            gangdecision.carrier_left(self, namespace, gang, change.key)
            if change.key in self.waiting:
                self._stand_in(namespace, gang, change.key)
            return
        gangdecision.forget_told(self, namespace, gang)
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
        return self.writer.writing(claim, pods, self.commits.in_flight)

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
        self.wakes += 1
        for key in self.waiting:
            self.queue.add_after(key, WAKE_DELAY)
        self.waiting.clear()

    def _wait(self, key: Key, wakes: int) -> None:
        """The pod waits for room: cluster changes wake it, its backoff is the safety net. A
        change while its decision was being made (before it was among the waiting) wakes it
        too: the decision may not have seen it (a victim's claim released while the
        preemptor's decision ran left it to a 3 s backoff in the latency benchmark)."""
        self.waiting.add(key)
        self.queue.retry(key)
        if self.wakes != wakes:
            self.queue.add_after(key, WAKE_DELAY)

    def _mutate(self, change: Callable[..., object], *args: Any) -> None:
        """Change the allocator state, after the running decision if there is one."""
        self.thread.mutate(change, *args)

    def _claim_name(self, pod: Pod, entry: PodResourceClaim) -> str | None:
        return self.decider.claim_name(pod, entry)

    # --- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        # Leading anew: every gang gets a full look again (what a member was told by a
        # look of an earlier term, its Events above all, may not have landed).
        self.gangs_told.clear()
        for key, pod in self.pods.items():
            if self._wants_allocation(pod):
                self.queue.add(key)
        async with asyncio.TaskGroup() as writers:
            self.commits.writers = writers
            writers.create_task(retry_forever("confirm-writes", self.writer.confirm_unanswered))
            writers.create_task(retry_forever("quota-status", self.quota_status.run))
            await run_workers(self.queue, self.sync, workers=1, name=self.name)

    def health(self) -> dict[str, Any]:
        return {
            "queued": self.queue.pending(),
            "waiting": len(self.waiting),
            "unanswered_writes": len(self.writer.unanswered),
            "allocated_pods": self.commits.allocated_pods,
        }

    async def sync(self, key: Key) -> None:
        """Decide for one pod (serially), then hand its writes to a background task."""
        # Every change made so far first, above all the assumptions of the pods decided
        # before this one (deferred while a quota status read holds the thread).
        await self.thread.settled()
        if not self.runtime.cache.whole:
            # A watch expired and its kind is being listed again: the changes in between
            # are not known yet (another allocator's, a deletion). Decide on the whole view.
            self.queue.add_after(key, RELIST_DELAY)
            return
        pod = self.pods.get(key)
        if pod is None or not self._wants_allocation(pod):
            self.queue.forget(key)
            self.waiting.discard(key)
            if self.preemption is not None:
                self.preemption.forget(key)
            return
        if key in self.writer.written:
            return  # our own write is on its way through the watch; its event requeues
        if key in self.commits.in_flight:
            self.commits.resync.add(key)
            return
        entries: list[tuple[PodResourceClaim, ResourceClaim]] = []
        wakes = self.wakes
        try:
            gang = await gangdecision.gang_of(self, pod) if pod.gated else None
            if gang is not None:
                await gangdecision.sync_gang(self, pod, gang)  # the whole gang, all or nothing
                return
            # (A member placed with its gang and released is done here: AlreadyAllocated.)
            entries = self.decider.resolve_claims(pod)
            if pod.gang is not None and not pod.gated and not pod.node_name:
                gangdecision.check_member_alone(pod, pod.gang)
            started = time.perf_counter()
            nominated = None
            if self.preemption is not None:
                nominated = await self.preemption.decide_nominated(pod, entries)
            if nominated is not None:
                node, results = nominated  # the devices it preempted for are free now
            else:
                try:
                    node, results = self.decider.decide_now(pod, entries)
                except NeedsThread:
                    node, results = await self.decider.decide_off_loop(pod, entries)
            metrics.ALLOCATION_SECONDS.observe(time.perf_counter() - started)
        except NotReady:
            return  # an event about the missing claim will requeue it
        except ClaimBusy:
            self.queue.add_after(key, BUSY_DELAY)
            return
        except StillWaiting:
            self._wait(key, wakes)
            return
        except SliceUsed:
            self.queue.add(key)  # behind the pods already waiting (it is being processed)
            return
        except TooSlow as reason:
            metrics.ALLOCATIONS.labels(result="timeout").inc()
            log.warning("allocation decision over budget", pod=pod.ref, reason=reason.summary)
            with contextlib.suppress(Conflict, NotFound):
                await self.reporter.explain(pod, reason)
            self.queue.retry(key)
            return
        except Unallocatable as reason:
            metrics.ALLOCATIONS.labels(result="unallocatable").inc()
            told = reason
            if self.preemption is not None and entries:
                told = await self.preemption.after_no_fit(pod, entries, reason)
            with contextlib.suppress(Conflict, NotFound):
                await self.reporter.explain(pod, told)
            if self.preemption is not None:
                await self.preemption.announce(pod)
            # A preemption frees devices while it awaits: its victims' claims may be gone
            # before it returns, a change that must wake this pod (see ``_wait``).
            self._wait(key, wakes)
            return
        if self.preemption is not None:
            self.preemption.taken(key)  # what was held for it is its own allocation now
        await self.commits.start([Placed(pod, entries, node, results)])


register_controller(
    AllocationController.name,
    lambda runtime: (
        AllocationController(runtime) if runtime.settings.allocation_controller else None
    ),
)
