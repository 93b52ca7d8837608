"""One pod's decision: its claims read, the nodes kube-scheduler would bind it to, and the
devices there, each half where it may run (see :mod:`.controller`).

:class:`Decider` keeps what a pod's decisions carry from one to the next: when it was last
explained, since when no node could take it, the budget it has spent, and the list of nodes
shared by every pod until a node changes.
"""

from __future__ import annotations

import time

from operators.allocator.errors import DecisionTimeout
from operators.allocator.nodes import (
    OPTIONAL_NODE_OPERATIONS,
    NodeInfo,
    NodeSelector,
    NodeSelectorError,
)
from operators.allocator.results import ClaimAllocation
from operators.allocator.state import AllocatorState
from operators.api.limits import RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE
from operators.api.models import ResourceClaim
from operators.cache.assume import AssumeCache
from operators.cache.core import Namespace, Node, Pod, PodResourceClaim
from operators.cache.informer import Informer, Key
from operators.controllers import claimrules, claimstatus, placerules
from operators.controllers.allocation.outcomes import (
    AlreadyAllocated,
    Candidates,
    ClaimBusy,
    Entries,
    NeedsThread,
    NotReady,
    SliceUsed,
    StillWaiting,
    TooSlow,
    Unallocatable,
)
from operators.controllers.allocation.thread import DecisionThread
from operators.controllers.allocation.writes import ClaimWriter
from operators.controllers.claimrules import claim_key, is_allocated, pending
from operators.controllers.runtime import Runtime
from operators.kube import NAMESPACES, NODES
from operators.scheduling import filters
from operators.scheduling.usage import ClusterUsage

EXPLAIN_PERIOD = 10.0  # seconds between explanations of one waiting pod
EXPLAIN_GRACE = 1.0  # seconds a pod waits for room before it is explained at all
DECISION_SLICE = 0.5  # seconds of one decision attempt; a pod's budget spans several
INLINE_SLICE = 0.02  # seconds a decision may take on the event loop before it moves off it


class Decider:
    """The decisions of the allocation controller, one pod at a time."""

    def __init__(
        self,
        runtime: Runtime,
        state: AllocatorState,
        usage: ClusterUsage,
        claims: AssumeCache[ResourceClaim],
        writer: ClaimWriter,
        thread: DecisionThread,
    ) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.state = state
        self.usage = usage
        self.claims = claims
        self.writer = writer
        self.thread = thread
        cache = runtime.cache
        self.nodes: Informer[Node] = cache[NODES]
        self.namespaces: Informer[Namespace] = cache[NAMESPACES]
        self.explained_at: dict[Key, float] = {}
        self.failing_since: dict[Key, float] = {}  # pods no node could take, since when
        self.missing_since: dict[Key, float] = {}  # pods naming a claim that does not exist
        self.decision_spent: dict[Key, float] = {}  # seconds of budget used, per pod
        # In-tree beside kcm's claim controller (ours off), see ``claim_name``.
        self._statuses_by_others = (
            runtime.protocol.claims_in_spec and not self.settings.claims_controller
        )
        # Every node in name order with its allocator view, shared by all pods until a node
        # changes: rebuilding it per pod sorted the labels of every node for every pod.
        self._node_list: list[tuple[Node, NodeInfo]] | None = None
        self._node_infos: tuple[NodeInfo, ...] = ()  # of _node_list, in its order
        self._node_of: dict[str, Node] = {}  # of _node_list, by name

    def nodes_changed(self) -> None:
        """A node was added, changed or deleted: the shared node list is made again."""
        self._node_list = None

    def forget(self, key: Key) -> None:
        """A pod is gone: nothing of its decisions is kept."""
        self.explained_at.pop(key, None)
        self.failing_since.pop(key, None)
        self.decision_spent.pop(key, None)
        self.missing_since.pop(key, None)

    def decide_now(self, pod: Pod, entries: Entries) -> tuple[str, list[ClaimAllocation]]:
        """A quick decision, right on the event loop: :class:`NeedsThread` if it needs more
        than a few milliseconds (a hand-off costs a GIL switch)."""
        return self.decide(pod, entries, self.candidates(pod, entries, lazy=True), inline=True)

    async def decide_off_loop(
        self, pod: Pod, entries: Entries
    ) -> tuple[str, list[ClaimAllocation]]:
        """The node filter here (it reads the loop's caches), then ``decide`` in the decision
        thread, while the event loop goes on."""
        candidates = self.candidates(pod, entries)
        return await self.thread.run(self.decide, pod, entries, candidates)

    def resolve_claims(self, pod: Pod) -> Entries:
        entries = []
        for entry in pod.claims:
            name = self.claim_name(pod, entry)
            if not name:
                raise NotReady()
            if Key(pod.namespace, name) in self.writer.claims_in_flight:
                raise ClaimBusy()
            if Key(pod.namespace, name) in self.writer.unanswered:
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

    def claim_name(self, pod: Pod, entry: PodResourceClaim) -> str | None:
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

    def sorted_nodes(self) -> list[tuple[Node, NodeInfo]]:
        """Every cached node in name order with its allocator view (see ``node_list``)."""
        if self._node_list is None:
            nodes = sorted(self.nodes.values(), key=lambda n: n.name)
            self._node_list = [(node, node.info()) for node in nodes]
            self._node_infos = tuple(info for _, info in self._node_list)
            self._node_of = {node.name: node for node in nodes}
        return self._node_list

    def namespace_labels(self, name: str) -> dict[str, str]:
        namespace: Namespace | None = self.namespaces.get(Key("", name))
        return dict(namespace.labels) if namespace is not None else {}

    def choose(self, pod: Pod, entries: Entries) -> tuple[str, list[ClaimAllocation]]:
        """The node and the new allocations (one per unallocated claim, in order).

        The loop itself runs the two halves apart: the node filter here, on the event
        loop (it reads caches the loop changes), the device decision in the decision
        thread (see ``decide_off_loop``).
        """
        return self.decide(pod, entries, self.candidates(pod, entries))

    def candidates(self, pod: Pod, entries: Entries, *, lazy: bool = False) -> Candidates:
        """The nodes kube-scheduler would bind the pod to, and why the others are out.

        ``lazy``: for a decision made on the loop, the filter is left to the allocator, which
        asks it only about nodes with room for the devices. Filtering every node for every
        pod costs more than the decision itself on a cluster of thousands of nodes, and the
        first node with room is usually the answer.
        """
        selectors: list[NodeSelector] = []
        # An allocated claim with a device that skips node operations: like kube-scheduler's
        # DRA Filter, only nodes whose kubelet declares it can do without them.
        skips_node_operations = False
        for _, claim in entries:
            allocation = claim.status.allocation if claim.status else None
            if allocation is None:
                continue
            skips_node_operations = skips_node_operations or any(
                result.skip_node_operations for result in allocation.devices.results
            )
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
        all_nodes = self.sorted_nodes()
        key = Key(pod.namespace, pod.name)
        rejections: list[str] = []
        candidates: list[Node] = []
        infos: list[NodeInfo] = []
        if pod.node_name:
            # Bound already: kube-scheduler chose; only the claims' own nodes matter.
            bound = self.nodes.get(Key("", pod.node_name))
            all_nodes = [(bound, bound.info())] if bound is not None else []
            for node, info in all_nodes:
                if any(not s.matches(info) for s in selectors):
                    rejections.append(placerules.REASON_CLAIM_ELSEWHERE)
                elif (
                    skips_node_operations and OPTIONAL_NODE_OPERATIONS not in info.declared_features
                ):
                    rejections.append(placerules.REASON_NODE_OPERATIONS)
                else:
                    candidates.append(node)
                    infos.append(info)
            return Candidates(len(all_nodes), rejections, candidates, infos)
        pod_filter = filters.prepare(
            pod.needs,
            self.usage,
            (node for node, _ in all_nodes),
            self.namespace_labels,
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
                found = [placerules.REASON_CLAIM_ELSEWHERE]
            if (
                not found
                and skips_node_operations
                and OPTIONAL_NODE_OPERATIONS not in info.declared_features
            ):
                found = [placerules.REASON_NODE_OPERATIONS]
            if not found and node.name in refused:
                found = [placerules.REASON_REFUSED_HERE]
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

    def decide(
        self,
        pod: Pod,
        entries: Entries,
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
                raise Unallocatable(placerules.summarize(total, rejections))
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
            candidates = self.candidates(pod, entries)
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
        claims = dict.fromkeys(refs, placerules.summarize(total, reasons))
        if explanation is not None:
            reasons += [r.summary for r in explanation.reasons]
            details = explanation.lines()[1:]
            claims = claimstatus.claim_messages(explanation, refs, rejections, total)
        raise Unallocatable(placerules.summarize(total, reasons), details, claims=claims)
