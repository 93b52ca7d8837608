"""Priority preemption in the operator: a pod no node can take has lower-priority pods removed
to free the devices it needs (``--preemption``; kube-scheduler's own preemption frees none).

For a pod the decision found no room for (:class:`.outcomes.Unallocatable`):

1. the plan: the running pods that ask for devices are the units (a gang's or PodGroup's
   members together, wherever they run); their claims and who else reserves them say what
   removing them frees. The choice (:func:`operators.scheduling.preemption.choose`, upstream's
   DefaultPreemption) runs in the decision thread over what-ifs of each node holding a unit:
   the victims' devices freed on a copy of the counted usage, their cpu and ports given back.
   Pods being deleted count as gone already: a pod never preempts twice for the same devices,
   also after an operator restart (its nomination lived in memory).
2. the nomination: the allocation found on the chosen node with the victims gone is held for
   the pod in the allocator state (:meth:`AllocatorState.nominate`), beside the victims'
   claims: no other pod gets those devices while the victims terminate, graceful or not.
3. the victims go: the DisruptionTarget condition with upstream's reason, then a delete with
   the UID precondition (``eviction_mode=evict``: the Eviction API, whose budgets may refuse),
   and an Event on each naming the preemptor and the node. The preemptor gets
   ``status.nominatedNodeName`` and its condition says what it waits for.
4. the preemptor's next decisions try its node with its nomination counted free: once the
   victims' claims are released it fits, and the nomination ends as its allocation is
   assumed. It ends as well when the pod goes, is allocated elsewhere, or no longer fits
   once its victims are gone (something else changed: it plans afresh).
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Sequence

import structlog

from operators import metrics
from operators.allocator.nodes import NodeInfo, NodeSelector, NodeSelectorError
from operators.allocator.results import ClaimAllocation
from operators.allocator.state import AllocatorState
from operators.allocator.whatif import FreedDevices
from operators.api.models import ResourceClaim, ResourceClaimStatus
from operators.cache.assume import AssumeCache
from operators.cache.core import Node, Pod
from operators.cache.informer import Informer, Key
from operators.controllers import eviction
from operators.controllers.allocation.decide import Decider
from operators.controllers.allocation.outcomes import Entries, Unallocatable
from operators.controllers.allocation.thread import DecisionThread
from operators.controllers.claimrules import is_allocated, pending
from operators.controllers.runtime import Runtime
from operators.kube import DISRUPTION_BUDGETS, PODS, ApiError, Conflict, NotFound
from operators.scheduling import filters
from operators.scheduling.freeing import (
    Holdings,
    NodeWhatIf,
    group_units,
    holdings,
    leaving_claims,
    victim_of,
)
from operators.scheduling.preemption import Choice, NodeVictims, Unit, VictimPod, choose
from operators.scheduling.usage import ClusterUsage, NodeTotals
from operators.settings import EvictionMode

log = structlog.get_logger(__name__)

REASON_PREEMPTING = "Preempting"
"""The preemptor's DevicesAllocated=False reason while its victims go."""
REASON_PREEMPTED = "Preempted"
"""The Event on a victim (upstream's reason)."""
DISRUPTION_REASON = "PreemptionByScheduler"
"""The victim's DisruptionTarget reason: upstream's, so that Jobs' pod failure policies and
controllers treat dralloc's preemption as kube-scheduler's."""
NOMINATION_SETTLE = 10.0
"""Seconds a preemptor may still not fit once its victims are gone (their claims are being
released) before its nomination is dropped and it plans afresh."""


@dataclasses.dataclass
class Nomination:
    node: str
    victims: tuple[VictimPod, ...]
    devices: tuple[str, ...]
    """``driver/pool/device`` held for the pod."""
    gone_at: float | None = None
    """When the last victim was seen gone (monotonic; None: some are still there)."""
    announced: bool = False
    """Whether the pod's nominatedNodeName was written."""
    removed: bool = False
    """Whether every victim's eviction (or deletion) was answered. One cut short (the API
    server restarting, no answer) is sent again when the pod is looked at again: else the
    victims stay and the pod waits for them for good (seen in the robustness suite)."""


class Preemption:
    """The allocation controller's preemption: plans, nominations, victims."""

    def __init__(
        self,
        runtime: Runtime,
        state: AllocatorState,
        usage: ClusterUsage,
        pods: Informer[Pod],
        claims: AssumeCache[ResourceClaim],
        thread: DecisionThread,
        decider: Decider,
    ) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.state = state
        self.usage = usage
        self.pods = pods
        self.claims = claims
        self.thread = thread
        self.decider = decider
        self.budgets = runtime.cache[DISRUPTION_BUDGETS]
        self.nominations: dict[Key, Nomination] = {}

    # --- the nominated pod's own decision ---------------------------------------------------

    async def decide_nominated(
        self, pod: Pod, entries: Entries
    ) -> tuple[str, list[ClaimAllocation]] | None:
        """The pod's allocation on its nominated node, its nomination counted free (None: it
        does not fit there yet, or has no nomination)."""
        key = Key(pod.namespace, pod.name)
        nomination = self.nominations.get(key)
        if nomination is None:
            return None
        if not nomination.removed:
            # Its victims' removal was cut short: finish it first (nothing else changes on
            # a refused request, so the decision below would only wait, for good).
            await self._remove(pod, nomination)
        claims = [claim for _, claim in pending(entries)]
        candidates = self.decider.candidates(pod, entries)
        node = next((n for n in candidates.nodes if n.name == nomination.node), None)
        if node is None:
            return None
        info = node.info()

        def allocate() -> list[ClaimAllocation] | None:
            freed = FreedDevices(self.state)
            freed.free_nomination(pod.ref)
            return freed.allocate(claims, info)

        results = await self.thread.run(allocate)
        if results is None:
            return None
        return node.name, results

    def taken(self, key: Key) -> None:
        """The pod's allocation is about to be assumed (anywhere): its nomination ends."""
        if self.nominations.pop(key, None) is not None:
            self.thread.mutate(self.state.drop_nomination, str(key))

    def forget(self, key: Key) -> None:
        """The pod is gone, or no longer ours to allocate: its nomination ends."""
        self.taken(key)

    # --- after no fit -----------------------------------------------------------------------

    async def after_no_fit(
        self, pod: Pod, entries: Entries, reason: Unallocatable
    ) -> Unallocatable:
        """Preempt for the pod if that makes room; what to tell the pod either way."""
        key = Key(pod.namespace, pod.name)
        refusal = self._not_eligible(pod, entries)
        if refusal is not None:
            return _with(reason, refusal) if refusal else reason
        nomination = self.nominations.get(key)
        if nomination is not None:
            waiting = self._still_waiting(pod, nomination)
            if waiting is not None:
                return waiting
            self.taken(key)  # its victims are gone and it still does not fit: plan afresh
        choice, allocation = await self._plan(pod, entries)
        chosen = choice.victims
        if chosen is None:
            if pod.needs.priority == 0:
                return reason  # the default priority: nothing worth saying about preemption
            return _with(reason, f"no preemption: {choice.reason}")
        if len(chosen.pods) > self.settings.preemption_max_victims:
            return _with(
                reason,
                f"no preemption: it would need to preempt {len(chosen.pods)} pods on node "
                f"{chosen.node}, more than preemption_max_victims "
                f"({self.settings.preemption_max_victims})",
            )
        assert allocation is not None
        devices = tuple(f"{r.driver}/{r.pool}/{r.device}" for a in allocation for r in a.devices)
        self.thread.mutate(self.state.nominate, pod.ref, allocation)
        nomination = Nomination(chosen.node, chosen.pods, devices)
        self.nominations[key] = nomination
        if chosen.pods:
            metrics.PREEMPTIONS.inc()
        log.info(
            "preempting",
            pod=pod.ref,
            node=chosen.node,
            victims=[p.ref for p in chosen.pods],
            devices=list(devices),
        )
        await self._remove(pod, nomination)
        return self._waiting_reason(pod, nomination, chosen.pods)

    async def announce(self, pod: Pod) -> None:
        """``status.nominatedNodeName`` of a pod that just preempted, as kube-scheduler sets
        it (after the pod was told why it waits: that write is made on the version read)."""
        nomination = self.nominations.get(Key(pod.namespace, pod.name))
        if nomination is None or nomination.announced:
            return
        nomination.announced = True
        await self._set_nominated_node(pod, nomination.node)

    def _not_eligible(self, pod: Pod, entries: Entries) -> str | None:
        """Why the pod may not preempt: a reason to add to what it is told ('' = nothing to
        add), or None when it may."""
        if not pod.needs.preempts:
            return "no preemption: its preemptionPolicy is Never"
        if pod.gang is not None or pod.pod_group:
            return ""  # a gang waits for room as a whole (gang preemption is not done)
        classes = self.settings.preemption_classes
        if classes:
            wanted = {name for _, claim in pending(entries) for name in _requested_classes(claim)}
            outside = sorted(wanted - classes)
            if outside:
                return (
                    f"no preemption: DeviceClass {', '.join(outside)} is not among "
                    "preemption_device_classes"
                )
        return None

    def _still_waiting(self, pod: Pod, nomination: Nomination) -> Unallocatable | None:
        """What the pod is told while its victims go (None: the nomination is stale)."""
        remaining = tuple(v for v in nomination.victims if self._still_there(v))
        if remaining:
            nomination.gone_at = None
            return self._waiting_reason(pod, nomination, remaining)
        now = time.monotonic()
        if nomination.gone_at is None:
            nomination.gone_at = now
        if now - nomination.gone_at < NOMINATION_SETTLE:
            return Unallocatable(
                f"the pods it preempted are gone; waiting for their devices on node "
                f"{nomination.node} to be released",
                pod_reason=REASON_PREEMPTING,
            )
        return None

    def _still_there(self, victim: VictimPod) -> bool:
        pod = self.pods.get(Key(victim.namespace, victim.name))
        return pod is not None and pod.uid == victim.uid and not pod.done

    def _waiting_reason(
        self, pod: Pod, nomination: Nomination, remaining: Sequence[VictimPod]
    ) -> Unallocatable:
        if not nomination.victims:
            return Unallocatable(
                f"pods on their way out on node {nomination.node} free the devices it needs: "
                f"{', '.join(nomination.devices)} are held for this pod (priority "
                f"{pod.needs.priority}) meanwhile, preempting nobody",
                pod_reason=REASON_PREEMPTING,
            )
        names = ", ".join(f"{v.ref} (priority {v.priority})" for v in remaining)
        return Unallocatable(
            f"preempting {len(remaining)} lower-priority pod(s) on node {nomination.node}: "
            f"{names}; devices {', '.join(nomination.devices)} are held for this pod "
            f"(priority {pod.needs.priority}) meanwhile",
            pod_reason=REASON_PREEMPTING,
        )

    # --- the plan ---------------------------------------------------------------------------

    async def _plan(
        self, pod: Pod, entries: Entries
    ) -> tuple[Choice, list[ClaimAllocation] | None]:
        """The choice and, if it names victims, the pod's allocation with them gone. The
        inputs are read here on the loop; the searches run in the decision thread."""
        now = datetime.datetime.now(datetime.UTC).timestamp()
        kept = [f"{pod.namespace}/{c.metadata.name}" for _, c in entries if is_allocated(c)]
        units, on_node, gone, freeing = self._units(pod, now, kept)
        held = self._holdings(units, kept)
        claims = [claim for _, claim in pending(entries)]
        nodes = self.decider.sorted_nodes()
        node_of = {node.name: (node, info) for node, info in nodes}
        names = [name for name in sorted({*on_node, *freeing}) if name in node_of]
        if pod.node_name:
            names = [name for name in names if name == pod.node_name]
        pod_filter = filters.prepare(
            pod.needs,
            self.usage,
            (node for node, _ in nodes),
            self.decider.namespace_labels,
            key=Key(pod.namespace, pod.name),
        )
        totals = {name: _copy(self.usage.on_node(name)) for name in names}
        budgets = [b for b in self.budgets.values() if b.weighs_on_preemption]

        def what_if(name: str) -> NodeWhatIf:
            node, info = node_of[name]
            freed = FreedDevices(self.state)
            for claim in gone:
                freed.free(claim)
            return NodeWhatIf(freed, claims, node, info, pod_filter, totals[name], held, _member)

        def decide() -> tuple[Choice, list[ClaimAllocation] | None]:
            choice = choose(
                pod.needs.priority,
                names,
                lambda n: on_node.get(n, []),
                what_if,
                budgets,
                freeing=freeing,
            )
            chosen = choice.victims
            if chosen is None:
                return choice, None
            allocation = _allocation_without(chosen, what_if(chosen.node), claims, node_of)
            if allocation is None:
                return Choice(None, "the devices freed did not make room after all"), None
            return choice, allocation

        return await self.thread.run(decide)

    def _units(
        self, preemptor: Pod, now: float, kept: Sequence[str]
    ) -> tuple[dict[str, Unit], dict[str, list[Unit]], list[str], set[str]]:
        """Every running pod that asks for devices, alone or with its gang (none with a
        member the preemptor's required affinity asks for); which units hold something on
        each node; the claims only pods on their way out hold (free in the what-if; never
        ``kept``, the preemptor's own), and the nodes of those."""
        running: list[tuple[VictimPod, str | None]] = []
        leaving: set[str] = set()  # the UIDs of pods on their way out
        named: set[str] = set()  # the claims they name
        for key, node, needs in list(self.usage.placed()):
            pod = self.pods.get(key) if isinstance(key, Key) else None
            if pod is None or not pod.claims or pod.done:
                continue
            if pod.deleting:
                leaving.add(pod.uid)
                named.update(f"{pod.namespace}/{name}" for name in pod.claim_names())
                continue
            group = pod.gang_keys()
            gang = f"{group[0][0]}/{group[0][1]}" if group else None
            running.append((victim_of(needs, node, pod.uid, now), gang))
        units, on_node = group_units(running, preemptor.needs, self.decider.namespace_labels)
        statuses: dict[str, ResourceClaimStatus] = {}
        for claim_ref in named:
            namespace, _, name = claim_ref.partition("/")
            claim = self.claims.get(Key(namespace, name))
            if claim is not None and claim.status is not None and is_allocated(claim):
                statuses[claim_ref] = claim.status
        holders = {ref: [r.uid for r in status.reserved_for] for ref, status in statuses.items()}
        gone = leaving_claims(holders, leaving, kept)
        freeing = {node for claim_ref in gone for node in self._nodes_of(statuses[claim_ref])}
        return units, on_node, gone, freeing

    def _nodes_of(self, status: ResourceClaimStatus) -> list[str]:
        """The nodes a claim's allocation can be used from: those its node selector names,
        every node without one (devices reachable from anywhere)."""
        allocation = status.allocation
        if allocation is None:
            return []
        nodes = [info for _, info in self.decider.sorted_nodes()]
        if allocation.node_selector is None:
            return [info.name for info in nodes]
        try:
            selector = NodeSelector.parse(allocation.node_selector.to_kube())
        except NodeSelectorError:
            return []
        return [info.name for info in nodes if selector.matches(info)]

    def _holdings(self, units: dict[str, Unit], kept: Sequence[str]) -> Holdings:
        """What the units hold; ``kept``: the preemptor's own allocated claims."""
        claims_of: dict[str, dict[str, int]] = {}
        holders: dict[str, int] = {}
        for unit in units.values():
            mine: dict[str, int] = {}
            for victim in unit.pods:
                pod = self.pods.get(Key(victim.namespace, victim.name))
                for name in pod.claim_names() if pod is not None else ():
                    claim = self.claims.get(Key(victim.namespace, name))
                    if claim is None or claim.status is None or claim.status.allocation is None:
                        continue
                    if not any(r.uid == victim.uid for r in claim.status.reserved_for):
                        continue
                    ref = f"{victim.namespace}/{name}"
                    mine[ref] = mine.get(ref, 0) + 1
                    holders[ref] = len(claim.status.reserved_for)
            if mine:
                claims_of[unit.key] = mine
        return holdings(claims_of, holders, kept)

    # --- acting -----------------------------------------------------------------------------

    async def _set_nominated_node(self, pod: Pod, node: str) -> None:
        """``status.nominatedNodeName``, as kube-scheduler sets it for its preemptors."""
        try:
            await self.runtime.client.merge_patch(
                PODS,
                pod.name,
                {"metadata": {"uid": pod.uid}, "status": {"nominatedNodeName": node}},
                namespace=pod.namespace,
                subresource="status",
            )
        except (Conflict, NotFound):
            pass
        except ApiError as error:
            log.warning("nominatedNodeName not written", pod=pod.ref, error=str(error)[:200])

    async def _remove(self, pod: Pod, nomination: Nomination) -> None:
        """Evict (or delete) the nomination's victims still there; a failure without an
        answer raises (the work queue retries the pod, and with it this)."""
        now = datetime.datetime.now(datetime.UTC)
        client = self.runtime.client
        message = (
            f"Preempted by pod {pod.ref} (priority {pod.needs.priority}) on node "
            f"{nomination.node} for devices {', '.join(nomination.devices)}"
        )
        held_by_budget = False
        for victim in nomination.victims:
            view = self.pods.get(Key(victim.namespace, victim.name))
            if view is None or view.uid != victim.uid or view.deleting:
                # Gone, replaced, or on its way out already (removed by an earlier pass whose
                # answer was lost, or by someone else): nothing to remove, nothing to count.
                continue
            try:
                if self.settings.eviction_mode is EvictionMode.EVICT:
                    await eviction.evict_through_api(client, view)
                else:
                    await eviction.delete_as_disruption(
                        client,
                        view,
                        DISRUPTION_REASON,
                        "dralloc: preempting to accommodate a higher priority pod",
                        now,
                    )
            except (Conflict, NotFound):
                continue  # gone or replaced meanwhile: nothing to remove
            except eviction.BudgetRefused as refused:
                held_by_budget = True
                await self.runtime.events.post(
                    view.involved(),
                    REASON_PREEMPTED,
                    f"{message}: the eviction was refused by a disruption budget "
                    f"({refused.budget}); retried when the preemptor is looked at again",
                    warning=True,
                )
                continue
            metrics.PREEMPTION_VICTIMS.inc()
            await self.runtime.events.post(view.involved(), REASON_PREEMPTED, message)
        # A budget's refusal is tried again on the next look, as the victim is told.
        nomination.removed = not held_by_budget


def _member(victim: VictimPod) -> Key:
    """A victim's key in the usage (the informer's keys)."""
    return Key(victim.namespace, victim.name)


def _copy(totals: NodeTotals) -> NodeTotals:
    return NodeTotals(
        dict(totals.requested), totals.pods, totals.ports.copy(), dict(totals.members)
    )


def _allocation_without(
    chosen: NodeVictims,
    what_if: NodeWhatIf,
    claims: Sequence[ResourceClaim],
    node_of: dict[str, tuple[Node, NodeInfo]],
) -> list[ClaimAllocation] | None:
    """The pod's allocation on the chosen node with the victims gone."""
    for unit in chosen.units:
        what_if.remove(unit)
    _, info = node_of[chosen.node]
    return what_if.freed.allocate(claims, info)


def _requested_classes(claim: ResourceClaim) -> list[str]:
    """The DeviceClass of each request and of each of its alternatives."""
    out: list[str] = []
    for request in claim.spec.devices.requests:
        if request.exactly is not None:
            out.append(request.exactly.device_class_name)
        out.extend(sub.device_class_name for sub in request.first_available or ())
    return out


def _with(reason: Unallocatable, more: str) -> Unallocatable:
    """The same reason, with what preemption says added to its summary."""
    return Unallocatable(
        f"{reason.summary}; {more}" if reason.summary else more,
        reason.details,
        reason=reason.reason,
        claims=reason.claims,
    )
