"""Which node can take a pod's claims: prefilter by index, then search.

Running the full search on every node (upstream's per-node Filter) is what
makes big clusters slow. Here an index counts, per request signature (class
plus request selectors) and per node, the devices that match and are not
exclusively allocated. A node is searched only if every request could be
met by those counts, and nodes are tried in policy order:

- ``binpack`` (default): fewest matching free devices left after the pod;
- ``spread``: most left;
- ``first-fit``: the order the caller gave.

The counts are optimistic (they ignore taints, counters, capacity and
constraints), so they never rule out a node that could work; the search
has the last word. Ties break by node name, so placement is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from operators.allocator.compiled import (
    CompiledClaim,
    CompiledDevice,
    CompiledRequest,
    CompiledSlice,
    DeviceId,
)
from operators.allocator.errors import AllocationError, NodeAllocationError
from operators.allocator.explain import Explanation, NodeReason
from operators.allocator.nodes import NodeInfo
from operators.allocator.pools import slice_targets_node
from operators.allocator.results import ClaimAllocation
from operators.allocator.selectors import SelectorCompileError, SelectorRuntimeError

if TYPE_CHECKING:  # for annotations only: state imports this module (a real cycle)
    from operators.allocator.state import AllocatorState

POLICIES = ("binpack", "spread", "first-fit")
Signature = tuple[str, tuple[str | None, ...]]


@dataclass(frozen=True, slots=True)
class Placement:
    """Outcome of find_node: a node and its allocations, or an explanation."""

    node: str | None
    allocations: tuple[ClaimAllocation, ...] = ()
    explanation: Explanation | None = None
    nodes_searched: int = 0  # full searches run
    nodes_prefiltered: int = 0  # candidates the index ruled out


@dataclass(slots=True)
class _Entry:
    """Devices matching one signature, by node."""

    local: dict[str, list[DeviceId]] = field(default_factory=dict)
    free: dict[str, int] = field(default_factory=dict)
    node_of: dict[DeviceId, str] = field(default_factory=dict)
    shared: list[tuple[CompiledSlice, CompiledDevice]] = field(default_factory=list)
    shared_reach: dict[tuple[str, tuple[tuple[str, str], ...]], list[DeviceId]] = field(
        default_factory=dict
    )
    shared_lists: dict[tuple[DeviceId, ...], list[DeviceId]] = field(default_factory=dict)
    by_free: dict[int, set[str]] = field(
        default_factory=dict
    )  # free count -> nodes (local devices only)

    def set_free(self, node: str, count: int) -> None:
        old = self.free.get(node)
        if old is not None:
            bucket = self.by_free.get(old)
            if bucket is not None:
                bucket.discard(node)
                if not bucket:
                    del self.by_free[old]
        self.free[node] = count
        self.by_free.setdefault(count, set()).add(node)


class DeviceIndex:
    """Matching-device counts per signature and node, kept current incrementally."""

    def __init__(self, state: AllocatorState) -> None:
        self.state = state
        self._entries: dict[Signature, _Entry] = {}
        self._versions = (-1, -1)
        self._names: tuple[Sequence[NodeInfo], dict[str, NodeInfo]] | None = None
        state.add_listener(self._on_usage_change)

    def _check_versions(self) -> None:
        versions = (self.state.slices_version, self.state.classes_version)
        if versions != self._versions:
            self._entries.clear()
            self._versions = versions

    def _on_usage_change(self, before: Sequence[object], after: Sequence[object]) -> None:
        touched = {getattr(u, "device", None) for u in (*before, *after)}
        for entry in self._entries.values():
            nodes = {entry.node_of[d] for d in touched if d in entry.node_of}
            for node in nodes:
                entry.set_free(
                    node, sum(1 for d in entry.local[node] if not self.state.allocated.in_use(d))
                )

    def entry(self, signature: Signature) -> _Entry:
        self._check_versions()
        entry = self._entries.get(signature)
        if entry is None:
            entry = self._build(signature)
            self._entries[signature] = entry
        return entry

    def _build(self, signature: Signature) -> _Entry:
        class_name, expressions = signature
        cls = self.state.get_class(class_name)
        entry = _Entry()
        if cls is None:
            return entry
        selectors = [s.expression for s in cls.selectors] + list(expressions)
        features = self.state.features
        for slice_ in self.state.slices.values():
            if not features.partitionable_devices and (slice_.per_device or slice_.shared_counters):
                continue
            for device in slice_.devices:
                if device.binding_conditions and not features.device_binding_conditions:
                    continue
                if not self._matches(selectors, device):
                    continue
                if slice_.node_name and not slice_.per_device:
                    entry.local.setdefault(slice_.node_name, []).append(device.id)
                    entry.node_of[device.id] = slice_.node_name
                else:
                    entry.shared.append((slice_, device))
        allocated = self.state.allocated
        for node, devices in entry.local.items():
            entry.set_free(node, sum(1 for d in devices if not allocated.in_use(d)))
        return entry

    def _matches(self, selectors: Sequence[str | None], device: CompiledDevice) -> bool:
        for expression in selectors:
            if expression is None:
                return True  # the search reports unsupported selectors
            try:
                if not self.state.evaluator.matches(expression, device):
                    return False
            except (SelectorCompileError, SelectorRuntimeError):
                return True  # optimistic: the search reports the error
        return True

    def names(self, nodes: Sequence[NodeInfo]) -> dict[str, NodeInfo]:
        """Name -> node for a candidate list (remembered for the same list object)."""
        if (
            self._names is not None
            and self._names[0] is nodes
            and len(self._names[1]) == len(nodes)
        ):
            return self._names[1]
        table = {n.name: n for n in nodes}
        self._names = (nodes, table)
        return table

    def counts(
        self, signature: Signature, node: NodeInfo, memo: dict[int, int] | None = None
    ) -> tuple[int, int]:
        """(matching devices, matching devices not exclusively allocated) for the node.

        ``memo`` (one dict per find_node call) remembers free counts of shared
        device lists, which nodes with the same labels have in common.
        """
        entry = self.entry(signature)
        total = len(entry.local.get(node.name, ()))
        free = entry.free.get(node.name, 0)
        if entry.shared:
            key = node.key
            reach = entry.shared_reach.get(key)
            if reach is None:
                found = []
                for slice_, device in entry.shared:
                    try:
                        ok = slice_targets_node(slice_, node, self.state.features)
                    except AllocationError:
                        ok = True
                    if ok and (not slice_.per_device or device.reachable_from(node)):
                        found.append(device.id)
                # Nodes that reach the same devices share one list (and one memo entry).
                reach = entry.shared_lists.setdefault(tuple(found), found)
                entry.shared_reach[key] = reach
            total += len(reach)
            shared_free = memo.get(id(reach)) if memo is not None else None
            if shared_free is None:
                in_use = self.state.allocated.in_use
                shared_free = sum(1 for d in reach if not in_use(d))
                if memo is not None:
                    memo[id(reach)] = shared_free
            free += shared_free
        return total, free


def _signature(request: CompiledRequest) -> Signature:
    return (request.class_name, tuple(s.expression for s in request.selectors))


def _node_fits(
    counts: Callable[[Signature, NodeInfo], tuple[int, int]],
    claims: Sequence[CompiledClaim],
    node: NodeInfo,
) -> int | None:
    """Free matching devices left after the pod (for scoring), or None if the node cannot work."""
    wanted: dict[Signature, int] = {}
    left = 0
    for claim in claims:
        for request in claim.requests:
            options = request.first_available or ((request.exactly,) if request.exactly else ())
            chosen = None
            for option in options:
                if option is None:
                    continue
                total, free = counts(_signature(option), node)
                have = total if option.admin_access else free
                need = option.count if option.mode == "ExactCount" else 1
                if have >= need + wanted.get(_signature(option), 0):
                    chosen = (option, need)
                    break
            if chosen is None:
                return None
            option, need = chosen
            if option.mode == "ExactCount" and not option.admin_access:
                wanted[_signature(option)] = wanted.get(_signature(option), 0) + need
    for signature, need in wanted.items():
        _, free = counts(signature, node)
        left += free - need
    return left


def _single_signature(claims: Sequence[CompiledClaim]) -> tuple[Signature, int] | None:
    """(signature, devices wanted) when every request is a plain ExactCount of one signature."""
    signature: Signature | None = None
    need = 0
    for claim in claims:
        for request in claim.requests:
            exact = request.exactly
            if (
                exact is None
                or request.first_available
                or exact.mode != "ExactCount"
                or exact.admin_access
            ):
                return None
            if signature is None:
                signature = _signature(exact)
            elif _signature(exact) != signature:
                return None
            need += exact.count
    return (signature, need) if signature is not None else None


def _bucket_order(
    index: DeviceIndex, claims: Sequence[CompiledClaim], nodes: Sequence[NodeInfo], policy: str
) -> Iterator[NodeInfo] | None:
    """Candidate order straight from the free-count buckets (the common case), or None."""
    single = _single_signature(claims)
    if single is None or policy == "first-fit":
        return None
    signature, need = single
    entry = index.entry(signature)
    if entry.shared:
        return None
    by_name = index.names(nodes)
    counts = sorted((k for k in entry.by_free if k >= need), reverse=policy == "spread")

    def ordered() -> Iterator[NodeInfo]:
        for k in counts:
            for name in sorted(entry.by_free.get(k, ())):
                node = by_name.get(name)
                if node is not None:
                    yield node

    return ordered()


def find_node(
    state: AllocatorState,
    index: DeviceIndex,
    claims: Sequence[CompiledClaim],
    nodes: Sequence[NodeInfo],
    policy: str = "binpack",
    max_searches: int | None = None,
    explain: bool = True,
) -> Placement:
    if policy not in POLICIES:
        raise ValueError(f"unknown placement policy {policy!r}; use one of {', '.join(POLICIES)}")
    fast = _bucket_order(index, claims, nodes, policy)
    if fast is not None:
        return _try_nodes(state, claims, nodes, fast, max_searches, explain)
    entries: dict[Signature, _Entry] = {}
    memo: dict[int, int] = {}

    def counts(signature: Signature, node: NodeInfo) -> tuple[int, int]:
        entry = entries.get(signature)
        if entry is None:
            entry = entries[signature] = index.entry(signature)
        if entry.shared:
            return index.counts(signature, node, memo)
        return len(entry.local.get(node.name, ())), entry.free.get(node.name, 0)

    scored: list[tuple[int, int, str, NodeInfo]] = []
    for position, node in enumerate(nodes):
        left = _node_fits(counts, claims, node)
        if left is None:
            continue
        if policy == "binpack":
            scored.append((left, 0, node.name, node))
        elif policy == "spread":
            scored.append((-left, 0, node.name, node))
        else:
            scored.append((0, position, node.name, node))
    scored.sort(key=lambda item: item[:3])
    return _try_nodes(state, claims, nodes, [item[3] for item in scored], max_searches, explain)


def _try_nodes(
    state: AllocatorState,
    claims: Sequence[CompiledClaim],
    nodes: Sequence[NodeInfo],
    ordered: Iterable[NodeInfo],
    max_searches: int | None,
    explain: bool,
) -> Placement:
    errors: dict[str, str] = {}
    searched = 0
    ruled_out = len(nodes) - len(ordered) if isinstance(ordered, Sized) else 0
    for node in ordered:
        if max_searches is not None and searched >= max_searches:
            break
        searched += 1
        try:
            results = state.allocate(claims, node)
        except NodeAllocationError as err:
            errors[node.name] = str(err)
            continue
        except AllocationError as err:
            return Placement(
                None,
                explanation=Explanation(len(nodes), (), fatal_error=str(err)),
                nodes_searched=searched,
                nodes_prefiltered=ruled_out,
            )
        if results is not None:
            return Placement(
                node.name, tuple(results), nodes_searched=searched, nodes_prefiltered=ruled_out
            )
    explanation = state.explain(claims, nodes, errors) if explain else None
    return Placement(
        None, explanation=explanation, nodes_searched=searched, nodes_prefiltered=ruled_out
    )


def reasons_for(
    state: AllocatorState,
    claims: Sequence[CompiledClaim],
    nodes: Sequence[NodeInfo],
    errors: dict[str, str],
) -> list[NodeReason]:
    explainer = state.explainer()
    out = []
    for node in nodes:
        try:
            pools = state.pools_for(node)
        except AllocationError as err:
            out.append(NodeReason(node.name, str(err), (), str(err)))
            continue
        out.append(explainer.node_reason(claims, node, pools, errors.get(node.name)))
    return out
