"""The allocator's view of the cluster, updated incrementally.

Watch events feed it (slices, classes, claims, taint rules added, changed,
removed) and the operator tells it about in-flight allocations (``assume``)
before their write is confirmed, so a device is never handed out twice.
Objects are compiled once per change; per-node pool lists and selector
results are cached until the slices they depend on change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from operators.allocator.allocated import AllocatedDevices, UsedDevice
from operators.allocator.capacity import qualified
from operators.allocator.compiled import (
    CompiledClaim,
    CompiledClass,
    CompiledSlice,
    CompiledTaintRule,
    DeviceId,
    PoolId,
    SpecCache,
    Taint,
    compile_claim,
    compile_class,
    compile_slice,
    compile_taint_rule,
)
from operators.allocator.constraints import AttributePin
from operators.allocator.errors import AllocationError
from operators.allocator.features import Features
from operators.allocator.funnel import Explainer, Explanation
from operators.allocator.index import DeviceIndex
from operators.allocator.nodes import NodeInfo
from operators.allocator.objects import as_dict, object_ref
from operators.allocator.packing import DEVICE_POLICIES, pack_pools
from operators.allocator.placement import (
    NodeCheck,
    Placement,
    PlanCache,
    find_node,
    reasons_for,
)
from operators.allocator.pools import Pool, gather_pools
from operators.allocator.quantities import to_nanos
from operators.allocator.quota import (
    Charge,
    CompiledQuota,
    LazyCharges,
    QuotaBook,
    allocation_charges,
    status_charges,
)
from operators.allocator.results import ClaimAllocation
from operators.allocator.search import DEFAULT_BUDGET, Search, SearchInputs
from operators.allocator.selectors import SelectorEvaluator

ClaimLike = Any  # a ResourceClaim model, its dict, or a CompiledClaim
NOMINATION_PREFIX = "nominated:"
"""Keys of nominations among the assumed usage (no claim key has a colon)."""
NodeLike = Any  # NodeInfo, a Node dict/model, or a node name


def _node_infos(nodes: Iterable[NodeLike]) -> Sequence[NodeInfo]:
    """NodeInfo list. A list whose first item is a NodeInfo is taken as a list of
    NodeInfo and used as is: find_node runs per pod over every node (hot path)."""
    if isinstance(nodes, (list, tuple)) and nodes and isinstance(nodes[0], NodeInfo):
        return nodes
    return [NodeInfo.from_object(n) for n in nodes]


def claim_key(claim: ClaimLike) -> str:
    """ "namespace/name" of a claim in any accepted form."""
    if isinstance(claim, CompiledClaim):
        return claim.ref
    if isinstance(claim, str):
        return claim
    namespace, name, _ = object_ref(claim)
    return f"{namespace}/{name}" if namespace else name


def _version(claim: ClaimLike) -> int:
    """A claim's resourceVersion as a number (etcd's revision); -1 when it has none."""
    return _number(
        claim.resource_version if isinstance(claim, CompiledClaim) else object_ref(claim)[2]
    )


def _number(version: str) -> int:
    try:
        return int(version)
    except ValueError:
        return -1


def usage_from_status(claim: ClaimLike) -> tuple[UsedDevice, ...]:
    """Devices used by a claim according to its status.allocation."""
    data = as_dict(claim)
    allocation = (data.get("status") or {}).get("allocation") or {}
    out = []
    for result in (allocation.get("devices") or {}).get("results") or ():
        driver = str(result.get("driver", ""))
        consumed = result.get("consumedCapacity")
        out.append(
            UsedDevice(
                device=(driver, str(result.get("pool", "")), str(result.get("device", ""))),
                share_id=result.get("shareID"),
                consumed=(
                    {qualified(k, driver): to_nanos(v) for k, v in consumed.items()}
                    if consumed
                    else None
                ),
                admin_access=bool(result.get("adminAccess")),
            )
        )
    return tuple(out)


class AllocatorState:
    """Cluster state for allocation: inventory, classes, allocations, caches."""

    def __init__(
        self,
        features: Features | None = None,
        *,
        budget: int = DEFAULT_BUDGET,
        device_policy: str = "first-fit",
    ) -> None:
        if device_policy not in DEVICE_POLICIES:
            raise ValueError(
                f"unknown device policy {device_policy!r}; use one of {', '.join(DEVICE_POLICIES)}"
            )
        self.features = features or Features()
        self.budget = budget
        # Which devices a search is shown first (packing.py); first-fit = upstream's order.
        self.device_policy = device_policy
        self.evaluator = SelectorEvaluator(self.features)
        self._slices: dict[str, CompiledSlice] = {}
        self._node_slices: dict[str, dict[str, CompiledSlice]] = {}
        self._shared_slices: dict[str, CompiledSlice] = {}
        self._pool_slices: dict[PoolId, dict[str, CompiledSlice]] = {}
        self._classes: dict[str, CompiledClass] = {}
        self._rules: dict[str, CompiledTaintRule] = {}
        self._rule_taints: dict[DeviceId, tuple[Taint, ...]] | None = None
        self._confirmed: dict[str, tuple[UsedDevice, ...]] = {}
        self._assumed: dict[str, tuple[UsedDevice, ...]] = {}
        # The claim each assumption was decided on (its version is the write's
        # precondition): only a watched allocation newer than that is the write landing (or
        # overtaken). An older one is the watch lagging behind our own writes, and must not
        # end the assumption. Its version is read only when a watch event asks.
        self._assumed_over: dict[str, ClaimLike] = {}
        # The version our write of the claim was answered at (see ``landed``).
        self._landed: dict[str, int] = {}
        self.allocated = AllocatedDevices()
        self._default_inputs: SearchInputs | None = None
        # The compiled form of each claim's latest version seen (one per claim: an older
        # version is never asked for again once a newer one has been, and a claim's
        # unallocated version would otherwise stay for as long as it is allocated).
        self._claim_cache: dict[str, CompiledClaim] = {}
        self._spec_cache = SpecCache()
        self.plans = PlanCache()  # find_node's demands per template (placement.py)
        self._pool_cache: dict[tuple[str, tuple[tuple[str, str], ...]], list[Pool]] = {}
        self.slices_version = 0
        self.classes_version = 0
        self.allocations_version = 0
        self._listeners: list[Any] = []
        self._index: DeviceIndex | None = None
        self._devices: dict[DeviceId, Any] | None = None
        self.quotas = QuotaBook(self.evaluator, self.device)
        self.quotas.classes = self._classes.get

    # --- inventory -----------------------------------------------------------

    def upsert_slice(self, obj: Any) -> CompiledSlice:
        compiled = obj if isinstance(obj, CompiledSlice) else compile_slice(obj)
        key = compiled.key
        old = self._slices.get(key)
        if old is not None:
            if old.resource_version and old.resource_version == compiled.resource_version:
                return old
            self._drop_slice(old)
        self._slices[key] = compiled
        if compiled.node_name:
            self._node_slices.setdefault(compiled.node_name, {})[key] = compiled
        else:
            self._shared_slices[key] = compiled
        self._pool_slices.setdefault(compiled.pool_id, {})[key] = compiled
        self._slices_changed()
        return compiled

    def remove_slice(self, key: str) -> None:
        """Remove by UID (or by name for objects without one)."""
        old = self._slices.get(key)
        if old is not None:
            self._drop_slice(old)
            self._slices_changed()

    def _drop_slice(self, old: CompiledSlice) -> None:
        key = old.key
        del self._slices[key]
        if old.node_name:
            node = self._node_slices.get(old.node_name, {})
            node.pop(key, None)
            if not node:
                self._node_slices.pop(old.node_name, None)
        else:
            self._shared_slices.pop(key, None)
        pool = self._pool_slices.get(old.pool_id, {})
        pool.pop(key, None)
        if not pool:
            self._pool_slices.pop(old.pool_id, None)

    def _slices_changed(self) -> None:
        self.slices_version += 1
        self._pool_cache.clear()
        self._rule_taints = None
        self._devices = None
        self.quotas.devices_changed()  # cheap; a later quota must not read stale devices

    def device(self, device_id: DeviceId) -> Any:
        """The compiled device with this id in any slice, or None."""
        if self._devices is None:
            self._devices = {d.id: d for s in self._slices.values() for d in s.devices}
        return self._devices.get(device_id)

    # --- quotas --------------------------------------------------------------

    def upsert_quota(self, obj: Any) -> CompiledQuota:
        """A DeviceQuota added or changed (see allocator/quota.py)."""
        quota = self.quotas.upsert_quota(obj)
        self.allocations_version += 1
        return quota

    def remove_quota(self, namespace: str, name: str) -> None:
        self.quotas.remove_quota(namespace, name)
        self.allocations_version += 1

    def upsert_class(self, obj: Any) -> CompiledClass:
        compiled = obj if isinstance(obj, CompiledClass) else compile_class(obj)
        self._classes[compiled.name] = compiled
        self.classes_version += 1
        return compiled

    def remove_class(self, name: str) -> None:
        if self._classes.pop(name, None) is not None:
            self.classes_version += 1

    def upsert_taint_rule(self, obj: Any) -> CompiledTaintRule:
        compiled = obj if isinstance(obj, CompiledTaintRule) else compile_taint_rule(obj)
        self._rules[compiled.name] = compiled
        self._rule_taints = None
        self.slices_version += 1
        return compiled

    def remove_taint_rule(self, name: str) -> None:
        if self._rules.pop(name, None) is not None:
            self._rule_taints = None
            self.slices_version += 1

    def get_class(self, name: str) -> CompiledClass | None:
        return self._classes.get(name)

    @property
    def slices(self) -> Mapping[str, CompiledSlice]:
        return self._slices

    def node_names(self) -> list[str]:
        """Nodes that have node-local slices."""
        return sorted(self._node_slices)

    # --- allocations ---------------------------------------------------------

    def upsert_claim(self, obj: Any) -> None:
        """A claim as seen by the watch: its status.allocation is authoritative."""
        key = claim_key(obj)
        cached = self._claim_cache.get(key)
        if cached is not None and cached.resource_version != object_ref(obj)[2]:
            del self._claim_cache[key]
        usage = usage_from_status(obj)
        ends = key in self._assumed and self._assumption_ends(key, _version(obj), bool(usage))
        if usage or ends or key in self._confirmed:
            # One step for both tables: the usual event (our write, now watched) swaps the
            # assumed devices for the same confirmed ones, which changes nothing counted.
            before = self._effective(key)
            if usage:
                self._confirmed[key] = usage
            else:
                self._confirmed.pop(key, None)
            if ends:
                self._assumed.pop(key, None)
                self._assumed_over.pop(key, None)
                self._landed.pop(key, None)
            self._counted(before, self._effective(key))
        self.quotas.confirm(
            key, self._charges(obj, lambda c: status_charges(c, obj)) if usage else None
        )
        if ends:
            self.quotas.assume(key, None)

    def _assumption_ends(self, key: str, seen: int, allocated: bool) -> bool:
        """Whether the watched version of a claim ends our assumption of it: the watch has
        reached the version our write made (whatever it shows), or shows an allocation newer
        than the version the write was made over (it landed, or another write overtook it).
        An older allocation is the watch lagging behind our own writes."""
        landed = self._landed.get(key)
        if landed is not None and seen >= landed:
            return True
        decided_on = self._assumed_over.get(key)
        over = -1 if decided_on is None or isinstance(decided_on, str) else _version(decided_on)
        return allocated and (over < 0 or seen < 0 or seen > over)

    def _end_assumption(self, key: str) -> None:
        self._assumed_over.pop(key, None)
        self._landed.pop(key, None)
        self._set_usage(self._assumed, key, None)
        self.quotas.assume(key, None)

    def landed(self, claim: ClaimLike, version: str) -> None:
        """Our allocation write of the claim was answered at ``version``: once the watch
        reaches it, the watch alone tells what the claim holds (also when a relist skipped
        the allocated version and shows a later one)."""
        key = claim_key(claim)
        number = _number(version)
        if key in self._assumed and number >= 0:
            self._landed[key] = number

    def remove_claim(self, claim: ClaimLike) -> None:
        key = claim_key(claim)
        self._claim_cache.pop(key, None)
        self._set_usage(self._confirmed, key, None)
        self.quotas.confirm(key, None)
        self._end_assumption(key)

    def assume(self, claim: ClaimLike, allocation: ClaimAllocation | Mapping[str, Any]) -> None:
        """Count an allocation before its write is confirmed by the watch."""
        key = claim_key(claim)
        charges: LazyCharges | None
        if isinstance(allocation, ClaimAllocation):
            result = allocation
            usage = allocation.usage()
            charges = LazyCharges(lambda: allocation_charges(result))
        else:
            status = {"status": {"allocation": allocation}}
            usage = usage_from_status(status)
            charges = self._charges(claim, lambda c: status_charges(c, status))
        self._assumed_over[key] = claim
        self._landed.pop(key, None)
        self._set_usage(self._assumed, key, usage)
        self.quotas.assume(key, charges if usage else None)

    def _charges(
        self, claim: ClaimLike, count: Callable[[CompiledClaim], tuple[Charge, ...]]
    ) -> LazyCharges | None:
        """What quotas charge the claim, worked out when a quota asks (None: a bare key,
        whose requests and so classes are unknown)."""
        if isinstance(claim, str):
            return None
        return LazyCharges(lambda: count(self.compile_claims([claim])[0]))

    def release(self, claim: ClaimLike) -> None:
        """Forget an assumed allocation (the write failed or was abandoned)."""
        self._end_assumption(claim_key(claim))

    def clashes(self, allocations: Iterable[ClaimAllocation]) -> list[DeviceId]:
        """Devices the allocations would hand out that are already in use (allocated or
        assumed): empty for any decision made on the current state. The controllers check
        it right before they assume, so that a decision made on a state that missed a
        change is never written."""
        return self.allocated.clashes(u for a in allocations for u in a.usage())

    # --- nominations -------------------------------------------------------------------------

    def nominate(self, owner: str, allocations: Iterable[ClaimAllocation]) -> None:
        """Hold devices for a pod that preempted for them (``owner``: ``namespace/name``)
        until it takes them or gives them up: every search counts them as used, the
        preemptor's own too (it frees its nomination in a what-if, see allocator.whatif).
        Held beside the victims' claims while those still hold the devices, so that none
        of them is free for anyone else in between. No quota is charged for a nomination."""
        usage = tuple(item for allocation in allocations for item in allocation.usage())
        self._set_usage(self._assumed, NOMINATION_PREFIX + owner, usage or None)

    def drop_nomination(self, owner: str) -> None:
        self._set_usage(self._assumed, NOMINATION_PREFIX + owner, None)

    def nominated(self, owner: str) -> tuple[UsedDevice, ...]:
        """The devices held for ``owner`` (empty: none)."""
        return self._assumed.get(NOMINATION_PREFIX + owner, ())

    def usage_of(self, claim: ClaimLike) -> tuple[UsedDevice, ...]:
        """What the claim counts as holding now (its watched and its assumed allocation)."""
        return self._effective(claim_key(claim))

    def is_assumed(self, claim: ClaimLike) -> bool:
        return claim_key(claim) in self._assumed

    def _set_usage(
        self,
        table: dict[str, tuple[UsedDevice, ...]],
        key: str,
        usage: tuple[UsedDevice, ...] | None,
    ) -> None:
        if not usage and key not in table:
            return  # nothing to forget (remove_claim clears both tables of every claim)
        other = self._assumed if table is self._confirmed else self._confirmed
        if key not in other:  # the usual case: only this table holds the claim
            before = table.get(key) or ()
            if usage:
                table[key] = usage
            else:
                del table[key]
            self._counted(before, usage or ())
            return
        # Both count: the watched allocation and the one being written. A claim the watch
        # still shows on devices A that we have since given back and allocated B holds A
        # and B until the watch catches up: counting only one would hand the other out.
        before = self._effective(key)
        if usage:
            table[key] = usage
        else:
            table.pop(key, None)
        self._counted(before, self._effective(key))

    def _counted(self, before: tuple[UsedDevice, ...], after: tuple[UsedDevice, ...]) -> None:
        """A claim's counted devices went from ``before`` to ``after``."""
        if before == after:
            return
        for item in before:
            self.allocated.remove(item)
        for item in after:
            self.allocated.add(item)
        self.allocations_version += 1
        for listener in self._listeners:
            listener(before, after)

    def _effective(self, key: str) -> tuple[UsedDevice, ...]:
        assumed = self._assumed.get(key)
        if not assumed:
            return self._confirmed.get(key) or ()
        confirmed = self._confirmed.get(key)
        if not confirmed or assumed == confirmed:
            return assumed
        # By equality, not hashing: a share's consumed capacity is a dict.
        return confirmed + tuple(item for item in assumed if item not in confirmed)

    def add_listener(self, listener: Any) -> None:
        """Called with (old usage, new usage) whenever a claim's usage changes."""
        self._listeners.append(listener)

    # --- compiled views --------------------------------------------------------

    def compile_claims(self, claims: Iterable[ClaimLike]) -> list[CompiledClaim]:
        out = []
        for claim in claims:
            if isinstance(claim, CompiledClaim):
                out.append(claim)
                continue
            namespace, name, version = object_ref(claim)
            cache_key = f"{namespace}/{name}" if namespace else name
            compiled = self._claim_cache.get(cache_key) if version else None
            if compiled is None or compiled.resource_version != version:
                compiled = compile_claim(claim, self._spec_cache)
                if version:
                    if len(self._claim_cache) > 10_000:
                        self._claim_cache.clear()
                    self._claim_cache[cache_key] = compiled
            out.append(compiled)
        return out

    def rule_taints(self, device: DeviceId) -> tuple[Taint, ...]:
        """Taints that DeviceTaintRules add to a device."""
        if not self._rules or not self.features.device_taint_rules:
            return ()
        if self._rule_taints is None:
            table: dict[DeviceId, tuple[Taint, ...]] = {}
            for slice_ in self._slices.values():
                for dev in slice_.devices:
                    extra = tuple(r.taint for r in self._rules.values() if r.applies_to(dev.id))
                    if extra:
                        table[dev.id] = extra
            self._rule_taints = table
        return self._rule_taints.get(device, ())

    def pools_for(self, node: NodeInfo) -> list[Pool]:
        """Pools reachable from the node, in the device policy's order."""
        pools = self._pools_for(node)
        if self.device_policy == "pack":
            return pack_pools(pools, self.allocated)  # depends on allocations: not cached
        return pools

    def _pools_for(self, node: NodeInfo) -> list[Pool]:
        """Pools reachable from the node (cached until slices change)."""
        key = node.key
        pools = self._pool_cache.get(key)
        if pools is None:
            local = self._node_slices.get(node.name, {}).values()
            candidates = [*local, *self._shared_slices.values()]
            pools = gather_pools(
                candidates,
                node,
                self.features,
                lambda pool_id: list(self._pool_slices.get(pool_id, {}).values()),
            )
            if len(self._pool_cache) > 50_000:
                self._pool_cache.clear()
            self._pool_cache[key] = pools
        return pools

    def search_inputs(
        self, deadline: float | None = None, budget: int | None = None
    ) -> SearchInputs:
        if deadline is None and budget is None:
            # Every field is fixed for the state's lifetime (``allocated`` changes in place).
            cached = self._default_inputs
            if cached is None or cached.budget != self.budget:
                self._default_inputs = cached = self._make_inputs(None, None)
            return cached
        return self._make_inputs(deadline, budget)

    def _make_inputs(self, deadline: float | None, budget: int | None) -> SearchInputs:
        return SearchInputs(
            features=self.features,
            classes=self._classes.get,
            allocated=self.allocated,
            evaluator=self.evaluator,
            extra_taints=self.rule_taints,
            budget=budget or self.budget,
            deadline=deadline,
            quotas=self.quotas,
        )

    # --- query 1: upstream's Allocate ----------------------------------------

    def allocate(
        self,
        claims: Sequence[ClaimLike],
        node: NodeLike,
        *,
        deadline: float | None = None,
        budget: int | None = None,
    ) -> list[ClaimAllocation] | None:
        """Allocate not-yet-allocated claims together on one node.

        Returns one ClaimAllocation per claim (in order), or None when they do
        not fit. Raises AllocationError when the claims cannot work anywhere,
        NodeAllocationError (InvalidPoolsError, SearchBudgetExceeded,
        SearchAborted) when only this node failed. Nothing is recorded: call
        ``assume`` with the results you are going to write.
        """
        search = self.search(claims, node, deadline=deadline, budget=budget)
        return search.run()

    def search(
        self,
        claims: Sequence[ClaimLike],
        node: NodeLike,
        *,
        deadline: float | None = None,
        budget: int | None = None,
    ) -> Search:
        """A prepared Search (run it with ``.run()``; ``.steps`` counts the effort)."""
        info = NodeInfo.from_object(node)
        return Search(
            claims=self.compile_claims(claims),
            node=info,
            pools=self.pools_for(info),
            inputs=self.search_inputs(deadline, budget),
        )

    # --- query 2: which node ---------------------------------------------------

    def find_node(
        self,
        claims: Sequence[ClaimLike],
        nodes: Iterable[NodeLike],
        policy: str = "binpack",
        *,
        max_searches: int | None = None,
        explain: bool = True,
        budget_seconds: float | None = None,
        pin: AttributePin | None = None,
        admits: NodeCheck | None = None,
    ) -> Placement:
        """Pick a node for claims that must be allocated together (one pod).

        Candidates are prefiltered by the device index and searched in policy
        order ("binpack", "spread", "first-fit"); the first node where the
        search succeeds wins. When none does, ``Placement.explanation`` says
        why for every candidate. Fatal claim problems (missing class, bad CEL,
        too many devices) come back as ``explanation.fatal_error``.

        With ``budget_seconds`` the whole decision (selector evaluations, searches,
        the explanation) must end within that wall-clock time, or DecisionTimeout is
        raised; what was computed until then (selector results) stays cached.

        With ``pin``, requests without adminAccess may only take devices with that attribute
        value (a gang's device-attribute topology). The explanation does not know about it.

        With ``admits``, a node the device counts let through is searched only if it says
        yes: the caller's own filter, run on the few nodes that could hold the devices
        instead of on every node. The explanation does not know about it either: a caller
        that explains filters the nodes itself.
        """
        infos = _node_infos(nodes)
        deadline = None
        if budget_seconds is not None:
            deadline = (time.monotonic() + budget_seconds, budget_seconds)
        self.evaluator.deadline = deadline
        try:
            return find_node(
                self,
                self.device_index(),
                self.compile_claims(claims),
                infos,
                policy,
                max_searches=max_searches,
                explain=explain,
                deadline=deadline,
                pin=pin,
                admits=admits,
            )
        finally:
            self.evaluator.deadline = None

    def device_index(self) -> DeviceIndex:
        """The matching-device counts find_node prefilters with (built on first use)."""
        if self._index is None:
            self._index = DeviceIndex(self)
        return self._index

    def explainer(self) -> Explainer:
        return Explainer(
            self.features, self.evaluator, self._classes.get, self.allocated, self.rule_taints
        )

    def explain(
        self,
        claims: Sequence[ClaimLike],
        nodes: Iterable[NodeLike],
        errors: Mapping[str, str] | None = None,
    ) -> Explanation:
        """Why the claims do not fit on each node (grouped; see Explanation.lines())."""
        infos = [NodeInfo.from_object(n) for n in nodes]
        compiled = self.compile_claims(claims)
        try:
            Search(
                compiled, infos[0] if infos else NodeInfo(""), [], self.search_inputs()
            )._prepare()
        except AllocationError as err:
            return Explanation(len(infos), (), fatal_error=str(err))
        reasons = reasons_for(self, compiled, infos, dict(errors or {}))
        return Explanation(len(infos), tuple(reasons))


def allocate(
    claims: Sequence[ClaimLike],
    node: NodeLike,
    *,
    slices: Iterable[Any] = (),
    classes: Iterable[Any] = (),
    allocated: Iterable[UsedDevice] = (),
    taint_rules: Iterable[Any] = (),
    features: Features | None = None,
    budget: int = DEFAULT_BUDGET,
    deadline: float | None = None,
) -> list[ClaimAllocation] | None:
    """One-shot allocation over explicit inputs (upstream's Allocate, for tools and tests)."""
    state = AllocatorState(features, budget=budget)
    for slice_ in slices:
        state.upsert_slice(slice_)
    for cls in classes:
        state.upsert_class(cls)
    for rule in taint_rules:
        state.upsert_taint_rule(rule)
    for item in allocated:
        state.allocated.add(item)
    return state.allocate(claims, node, deadline=deadline)
