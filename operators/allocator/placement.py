"""Which node can take a pod's claims: prefilter by index, rank, then search.

Running the full search on every node (upstream's per-node Filter) is what
makes big clusters slow. The device index (``index.py``) counts, per request
signature and node, the matching devices that are not exclusively allocated.
A node is a candidate only if every request could be met by those counts
(for a firstAvailable request: at least one of its subrequests).

Candidates are ranked, best first, by

1. the prioritized-list score (``ranking.py``, upstream's Score): nodes where
   requests get earlier subrequests first;
2. the policy: ``binpack`` (default, fewest matching free devices left after
   the pod), ``spread`` (most left) or ``first-fit`` (the caller's order);
3. the node name, so placement is deterministic.

The counts give each candidate an optimistic score: no subrequest whose
counts fall short can be what the search picks, so the search can only
score the same or lower. Nodes are searched in optimistic order; the search
stops as soon as no remaining node can beat the best allocation found. Without
firstAvailable requests every score is 0 and the first node that fits wins.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from operators.allocator.compiled import CompiledClaim, CompiledRequest
from operators.allocator.constraints import AttributePin
from operators.allocator.errors import (
    AllocationError,
    DecisionTimeout,
    NodeAllocationError,
    SearchAborted,
)
from operators.allocator.funnel import Explanation, NodeReason
from operators.allocator.geometry import GeometryChoice, whole_devices_broken
from operators.allocator.index import DeviceIndex, Signature
from operators.allocator.nodes import NodeInfo
from operators.allocator.pools import Pool
from operators.allocator.ranking import allocation_score, subrequest_points
from operators.allocator.results import ClaimAllocation
from operators.allocator.search import Search, SearchInputs
from operators.api.quickinit import quick_init

if TYPE_CHECKING:  # for annotations only: state imports this module (a real cycle)
    from operators.allocator.state import AllocatorState

POLICIES = ("binpack", "spread", "first-fit")

# (-optimistic score, policy value, node name): smaller is better
RankKey = tuple[int, int, str]
# The caller's own verdict on a node (see _try_nodes).
NodeCheck = Callable[[NodeInfo], bool]
# Per signature, on one node: (matching devices, of which not exclusively allocated,
# a multi-allocatable one among them)
NodeCounts = Mapping[Signature, tuple[int, int, bool]]


@quick_init
@dataclass(frozen=True, slots=True)
class Placement:
    """Outcome of find_node: a node and its allocations, or an explanation."""

    node: str | None
    allocations: tuple[ClaimAllocation, ...] = ()
    explanation: Explanation | None = None
    nodes_searched: int = 0  # full searches run
    # Nodes ruled out without a search: by the index's counts, or by the caller's ``admits``.
    nodes_prefiltered: int = 0


@dataclass(frozen=True, slots=True)
class _Demand:
    """What one request (or subrequest) asks of a node's device counts."""

    signature: Signature
    need: int  # devices; All mode needs at least one
    admin: bool  # admin access may use allocated devices
    exact: bool  # ExactCount (All takes whatever matches)

    @property
    def exclusive(self) -> bool:
        """Takes devices that no other request of the pod can take."""
        return self.exact and not self.admin


@dataclass(frozen=True, slots=True)
class _Plan:
    """The pod's requests as demands: plain ones, and alternatives per firstAvailable request."""

    plain: tuple[_Demand, ...]
    choices: tuple[tuple[_Demand, ...], ...]
    signatures: tuple[Signature, ...] = ()  # of every demand, each once, in order
    alternatives: bool = False  # a firstAvailable request with more than one option


class PlanCache:
    """Plans by the claims' request tuples.

    Claims made from one template share their compiled requests (the spec cache in
    ``compile_claim``), so a pod's plan is built once per template rather than per pod.
    Entries hold the request tuples they were made from, so an id is never mistaken for
    a later object's.
    """

    def __init__(self) -> None:
        self._plans: dict[tuple[int, ...], tuple[tuple[object, ...], _Plan]] = {}

    def plan(self, claims: Sequence[CompiledClaim]) -> _Plan:
        if len(claims) == 1:  # most pods: no generator per lookup
            requests = claims[0].requests
            key: tuple[int, ...] = (id(requests),)
            hit = self._plans.get(key)
            if hit is not None and hit[0][0] is requests:
                return hit[1]
        else:
            key = tuple(id(c.requests) for c in claims)
            hit = self._plans.get(key)
            if hit is not None and all(
                a is c.requests for a, c in zip(hit[0], claims, strict=True)
            ):
                return hit[1]
        plan = _plan(claims)
        if len(self._plans) > 1_000:
            self._plans.clear()
        self._plans[key] = (tuple(c.requests for c in claims), plan)
        return plan


def _demand(request: CompiledRequest) -> _Demand:
    exact = request.mode == "ExactCount"
    return _Demand(
        request.signature, request.count if exact else 1, bool(request.admin_access), exact
    )


def _plan(claims: Sequence[CompiledClaim]) -> _Plan:
    plain: list[_Demand] = []
    choices: list[tuple[_Demand, ...]] = []
    for claim in claims:
        for request in claim.requests:
            if request.first_available:
                choices.append(tuple(_demand(sub) for sub in request.first_available))
            elif request.exactly is not None:
                plain.append(_demand(request.exactly))
            else:
                choices.append(())  # unsupported request: no node fits, the search says why
    signatures = dict.fromkeys(d.signature for demands in (plain, *choices) for d in demands)
    return _Plan(
        tuple(plain),
        tuple(choices),
        tuple(signatures),
        not all(len(options) == 1 for options in choices),
    )


def _rank_node(counts: NodeCounts, plan: _Plan) -> tuple[int, int] | None:
    """(optimistic score, free matching devices left after the pod), or None if the node cannot work.

    Exclusive demands on one signature add up (they need distinct devices),
    unless the node has a multi-allocatable matching device, which several
    requests may share. A subrequest is checked against the plain demands
    only; alternatives of different requests are not summed, as the search
    may pick other subrequests than the first that fits here.
    """
    wanted: dict[Signature, int] = {}  # summed exclusive demands (for the checks)
    taken: dict[Signature, int] = {}  # exclusive devices of the optimistic choice (for "left")
    free_of: dict[Signature, int] = {}
    for demand in plan.plain:
        total, free, shareable = counts[demand.signature]
        need = demand.need
        if demand.exclusive:
            free_of[demand.signature] = free
            taken[demand.signature] = taken.get(demand.signature, 0) + need
            if not shareable:
                need += wanted.get(demand.signature, 0)
                wanted[demand.signature] = need
        if (total if demand.admin else free) < need:
            return None
    score = 0
    for options in plan.choices:
        for position, demand in enumerate(options):
            total, free, shareable = counts[demand.signature]
            need = demand.need
            if demand.exclusive and not shareable:
                need += wanted.get(demand.signature, 0)
            if (total if demand.admin else free) >= need:
                score += subrequest_points(position)
                if demand.exclusive:
                    free_of[demand.signature] = free
                    taken[demand.signature] = taken.get(demand.signature, 0) + demand.need
                break
        else:
            return None
    return score, sum(free_of[s] - n for s, n in taken.items())


def _bucket_order(
    index: DeviceIndex, plan: _Plan, nodes: Sequence[NodeInfo], policy: str
) -> Iterator[tuple[RankKey, NodeInfo]] | None:
    """Ranked candidates straight from the free-count buckets, or None when that cannot be done.

    It can when the pod asks for exclusive node-local devices of one
    signature (any number of plain requests), or has a single firstAvailable
    request of exclusive subrequests: then a node's rank depends only on one
    free count per alternative, and the buckets are already sorted by it.
    """
    if policy == "first-fit":
        return None
    if not plan.choices and plan.plain:
        signatures = {d.signature for d in plan.plain}
        if len(signatures) != 1 or not all(d.exclusive for d in plan.plain):
            return None
        options = [(next(iter(signatures)), sum(d.need for d in plan.plain), 0)]
        if len(plan.plain) > 1 and index.entry(options[0][0]).shareable_nodes:
            return None  # several requests may share one device: summing is wrong
    elif not plan.plain and len(plan.choices) == 1 and plan.choices[0]:
        if not all(d.exclusive for d in plan.choices[0]):
            return None
        options = [
            (d.signature, d.need, subrequest_points(i)) for i, d in enumerate(plan.choices[0])
        ]
    else:
        return None
    entries = [index.entry(signature) for signature, _, _ in options]
    if any(entry.shared for entry in entries):
        return None
    by_name = index.names(nodes)
    spread = policy == "spread"

    thresholds = [(entry.free, need) for (_, need, _), entry in zip(options, entries, strict=True)]

    def ordered() -> Iterator[tuple[RankKey, NodeInfo]]:
        for position, ((_, need, points), entry) in enumerate(zip(options, entries, strict=True)):
            earlier = thresholds[:position]
            by_free = entry.buckets()
            for count in sorted((k for k in by_free if k >= need), reverse=spread):
                left = count - need
                for name in by_free.get(count, ()):
                    node = by_name.get(name)
                    if node is None or any(free.get(name, 0) >= n for free, n in earlier):
                        continue  # not a candidate, or ranked already under a better subrequest
                    yield (-points, -left if spread else left, name), node

    return ordered()


def find_node(
    state: AllocatorState,
    index: DeviceIndex,
    claims: Sequence[CompiledClaim],
    nodes: Sequence[NodeInfo],
    policy: str = "binpack",
    max_searches: int | None = None,
    explain: bool = True,
    deadline: tuple[float, float] | None = None,
    pin: AttributePin | None = None,
    admits: NodeCheck | None = None,
) -> Placement:
    """See AllocatorState.find_node; ``deadline`` is (monotonic time, budget seconds)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown placement policy {policy!r}; use one of {', '.join(POLICIES)}")
    plan = state.plans.plan(claims)
    if policy == "first-fit":
        floor = _floor_key(index, plan, nodes)
        if floor is not None:
            assert isinstance(nodes, tuple)
            return _first_fit_by_count(
                state, index, claims, nodes, floor, max_searches, explain, deadline, pin, admits
            )
    fast = _bucket_order(index, plan, nodes, policy)
    if fast is not None:
        return _try_nodes(
            state,
            claims,
            nodes,
            fast,
            max_searches,
            explain,
            deadline=deadline,
            geometric=policy == "binpack",
            pin=pin,
            admits=admits,
        )
    entries = {signature: index.entry(signature) for signature in plan.signatures}

    table = list(entries.values())
    shared_counts = index.shared_counts

    def node_counts(node: NodeInfo) -> tuple[tuple[int, int, bool], ...]:
        # Inlined lookups: this runs for every candidate node of every pod.
        name = node.name
        out = []
        for entry in table:
            local = entry.local.get(name)
            total, free = (len(local), entry.free[name]) if local else (0, 0)
            if entry.shared:
                reach = entry.shared_reach.get(node.key)
                if reach is None:
                    shared_total, shared_free = shared_counts(entry, node)
                else:
                    shared_total, shared_free = len(reach), entry.reach_free[id(reach)]
                total += shared_total
                free += shared_free
            out.append((total, free, entry.shareable_shared or name in entry.shareable_nodes))
        return tuple(out)

    # Nodes with the same counts rank the same (many do: identical nodes, empty ones).
    ranks: dict[tuple[tuple[int, int, bool], ...], tuple[int, int] | None] = {}

    def rank_of(node: NodeInfo) -> tuple[int, int] | None:
        counts = node_counts(node)
        if counts in ranks:
            return ranks[counts]
        rank = ranks[counts] = _rank_node(dict(zip(entries, counts, strict=True)), plan)
        return rank

    if policy == "first-fit":
        # Walk the caller's order lazily and stop at the first node that fits with the best
        # score any node could get: no full scan (see _first_fit).
        top = _score_bound(index, plan) if plan.alternatives else None
        return _first_fit(
            state, claims, nodes, rank_of, max_searches, explain, top, deadline, pin, admits
        )
    ranked: list[tuple[RankKey, NodeInfo]] = []
    for position, node in enumerate(nodes):
        rank = rank_of(node)
        if rank is None:
            continue
        score, left = rank
        value = left if policy == "binpack" else -left if policy == "spread" else position
        ranked.append(((-score, value, node.name), node))
    ranked.sort(key=lambda item: item[0])
    return _try_nodes(
        state,
        claims,
        nodes,
        ranked,
        max_searches,
        explain,
        deadline=deadline,
        geometric=policy == "binpack",
        pin=pin,
        admits=admits,
    )


def _score_bound(index: DeviceIndex, plan: _Plan) -> int:
    """A score no node can beat: per firstAvailable request, the points of its first
    alternative that any device in the cluster matches at all."""
    bound = 0
    for options in plan.choices:
        for position, demand in enumerate(options):
            entry = index.entry(demand.signature)
            if entry.local or entry.shared:
                bound += subrequest_points(position)
                break
    return bound


def _floor_key(
    index: DeviceIndex, plan: _Plan, nodes: Sequence[NodeInfo]
) -> tuple[Signature, int] | None:
    """(signature, devices needed) when a node's fit for this pod is one free count
    (exclusive node-local devices of one signature, no alternatives) and ``nodes`` is a
    tuple: then the first-fit walk may start at the index's floor (DeviceIndex.floor)."""
    if plan.choices or not plan.plain or not isinstance(nodes, tuple):
        return None
    signature = plan.plain[0].signature
    if any(d.signature != signature or not d.exact or d.admin for d in plan.plain):
        return None
    entry = index.entry(signature)
    if entry.shared or (len(plan.plain) > 1 and entry.shareable_nodes):
        return None  # counts beyond the node's own, or requests that may share a device
    return signature, sum(d.need for d in plan.plain)


def _first_fit(
    state: AllocatorState,
    claims: Sequence[CompiledClaim],
    nodes: Sequence[NodeInfo],
    rank_of: Callable[[NodeInfo], tuple[int, int] | None],
    max_searches: int | None,
    explain: bool,
    top: int | None = None,
    deadline: tuple[float, float] | None = None,
    pin: AttributePin | None = None,
    admits: NodeCheck | None = None,
) -> Placement:
    """The first node in the caller's order that passes the prefilter and the search.

    Without firstAvailable alternatives (``top`` None) every candidate scores the same and
    ranking is the caller's order. With them, ``top`` bounds every node's score: nodes
    that reach it are ranked in the caller's order ahead of all others, so they are tried
    as the walk finds them; the others are kept, sorted, for when none of those fits.
    """
    ruled_out = 0

    def candidates() -> Iterator[tuple[RankKey, NodeInfo]]:
        nonlocal ruled_out
        later: list[tuple[RankKey, NodeInfo]] = []
        for position, node in enumerate(nodes):
            rank = rank_of(node)
            if rank is None:
                ruled_out += 1
            elif top is None or rank[0] >= top:
                yield (-rank[0], position, node.name), node
            else:
                later.append(((-rank[0], position, node.name), node))
        later.sort(key=lambda item: item[0])
        yield from later

    return _try_nodes(
        state,
        claims,
        nodes,
        candidates(),
        max_searches,
        explain,
        prefiltered=lambda: ruled_out,
        deadline=deadline,
        pin=pin,
        admits=admits,
    )


def _first_fit_by_count(
    state: AllocatorState,
    index: DeviceIndex,
    claims: Sequence[CompiledClaim],
    nodes: tuple[NodeInfo, ...],
    floor: tuple[Signature, int],
    max_searches: int | None,
    explain: bool,
    deadline: tuple[float, float] | None = None,
    pin: AttributePin | None = None,
    admits: NodeCheck | None = None,
) -> Placement:
    """First fit when a node's fit is one free count (see _floor_key): the walk starts
    after the nodes the index knows are full, reads one count per node (what _rank_node
    would decide from it, without building the node's counts), and tells the index how
    far it found only full nodes.

    The first node whose search succeeds wins: without firstAvailable requests (none
    here, see _floor_key) every allocation scores what the counts promised. This is the
    path of most pods, so it walks the nodes itself rather than through _try_nodes's
    ranked generator.
    """
    signature, need = floor
    free = index.entry(signature).free
    start = index.floor(signature, need, nodes)
    inputs = _inputs(state, deadline, pin)
    errors: dict[str, str] = {}
    searched = refused = 0
    ruled_out = start
    below = True  # no node with room seen yet
    for position in range(start, len(nodes)):
        node = nodes[position]
        if free.get(node.name, 0) < need:
            ruled_out += 1
            continue
        if below:
            index.raise_floor(signature, need, nodes, position)
            below = False
        if max_searches is not None and searched >= max_searches:
            break
        if admits is not None and not admits(node):
            refused += 1
            continue
        searched += 1
        try:
            _, results = _search(state, claims, node, inputs, deadline, errors)
        except AllocationError as err:
            return _fatal(nodes, err, searched, ruled_out + refused)
        if results is not None:
            return Placement(
                node.name,
                tuple(results),
                nodes_searched=searched,
                nodes_prefiltered=ruled_out + refused,
            )
    else:
        if below:
            index.raise_floor(signature, need, nodes, len(nodes))
    return _unplaced(state, claims, nodes, errors, explain, searched, ruled_out + refused)


def _inputs(
    state: AllocatorState, deadline: tuple[float, float] | None, pin: AttributePin | None
) -> SearchInputs:
    """What state.allocate builds, made once for all the nodes of one decision."""
    inputs = state.search_inputs(deadline[0] if deadline else None)
    if pin is not None:
        inputs = dataclasses.replace(inputs, pin=pin)
    return inputs


def _search(
    state: AllocatorState,
    claims: Sequence[CompiledClaim],
    node: NodeInfo,
    inputs: SearchInputs,
    deadline: tuple[float, float] | None,
    errors: dict[str, str],
) -> tuple[list[Pool], list[ClaimAllocation] | None]:
    """The pools searched and the claims' allocations on the node, or None when they do not
    fit there (with the node's reason in ``errors`` when there is one). A fatal
    AllocationError (the claims fit no node) is the caller's; a deadline passed raises
    DecisionTimeout. The pools come back for binpack's geometry: under the "pack" device
    policy they are ordered anew on every call."""
    pools: list[Pool] = []
    try:
        pools = state.pools_for(node)
        search = Search(claims, node, pools, inputs)
        results = search.run()
    except SearchAborted as err:
        if deadline is not None and time.monotonic() > deadline[0]:
            raise DecisionTimeout(deadline[1]) from err
        errors[node.name] = str(err)
        return pools, None
    except NodeAllocationError as err:
        errors[node.name] = str(err)
        return pools, None
    if results is None:
        refusal = search.quota_refusal()
        if refusal is not None:
            errors[node.name] = refusal
    return pools, results


def _fatal(
    nodes: Sequence[NodeInfo], err: AllocationError, searched: int, prefiltered: int
) -> Placement:
    """No node: the claims cannot be allocated anywhere, for the error's reason."""
    return Placement(
        None,
        explanation=Explanation(len(nodes), (), fatal_error=str(err)),
        nodes_searched=searched,
        nodes_prefiltered=prefiltered,
    )


def _unplaced(
    state: AllocatorState,
    claims: Sequence[CompiledClaim],
    nodes: Sequence[NodeInfo],
    errors: dict[str, str],
    explain: bool,
    searched: int,
    prefiltered: int,
) -> Placement:
    """No node fits: why for every node, when asked to explain."""
    return Placement(
        None,
        explanation=state.explain(claims, nodes, errors) if explain else None,
        nodes_searched=searched,
        nodes_prefiltered=prefiltered,
    )


def _try_nodes(
    state: AllocatorState,
    claims: Sequence[CompiledClaim],
    nodes: Sequence[NodeInfo],
    ranked: Iterable[tuple[RankKey, NodeInfo]],
    max_searches: int | None,
    explain: bool,
    prefiltered: Callable[[], int] | None = None,
    deadline: tuple[float, float] | None = None,
    geometric: bool = False,
    pin: AttributePin | None = None,
    admits: NodeCheck | None = None,
) -> Placement:
    """Search candidates in optimistic rank order; keep the best actual rank.

    A node's actual rank key is its optimistic one with the real score, never
    better. Once the next candidate's optimistic key is no better than the
    best actual key, no later node can win. ``prefiltered`` counts the nodes
    a lazy ``ranked`` has ruled out so far (it only looks at nodes on demand).
    ``geometric`` (binpack): allocations on partitionable devices are compared by the
    whole physical devices they break (``geometry.py``) before the score. ``pin``: every
    search may only take devices with that attribute value (the counts that ranked the
    nodes ignore it, so they only admit too many nodes, never too few). ``admits``: the
    caller's own verdict on a node (the scheduler's filters), asked only of nodes the device
    counts let through, right before their search; a node it refuses is not searched.
    """
    choice = GeometryChoice() if geometric else None
    errors: dict[str, str] = {}
    searched = 0
    refused = 0  # by ``admits``
    inputs = _inputs(state, deadline, pin)
    # A list is ranked in full (a generator walks lazily; no Sized ABC check per pod).
    ruled_out = len(nodes) - len(ranked) if isinstance(ranked, list) else 0
    best: tuple[RankKey, NodeInfo, list[ClaimAllocation]] | None = None
    for key, node in ranked:
        if best is not None and key >= best[0]:
            break
        if max_searches is not None and searched >= max_searches:
            break
        if admits is not None and not admits(node):
            refused += 1
            continue
        searched += 1
        if prefiltered is not None:
            ruled_out = prefiltered()
        try:
            pools, results = _search(state, claims, node, inputs, deadline, errors)
        except AllocationError as err:
            return _fatal(nodes, err, searched, ruled_out + refused)
        if results is None:
            continue
        actual = (-allocation_score(claims, results), key[1], key[2])
        broken = whole_devices_broken(pools, state.allocated, results) if geometric else None
        if broken is not None:
            assert choice is not None
            choice.offer(actual, key, node.name, broken, results)
            if choice.done:
                break
            continue
        if actual <= key:  # as good as promised: nothing after it can do better
            return Placement(
                node.name,
                tuple(results),
                nodes_searched=searched,
                nodes_prefiltered=ruled_out + refused,
            )
        if best is None or actual < best[0]:
            best = (actual, node, results)
    if prefiltered is not None:
        ruled_out = prefiltered()
    if (
        choice is not None
        and choice.best is not None
        and (best is None or choice.best[0][0] <= best[0][0])
    ):
        _, name, results = choice.best
        return Placement(
            name, tuple(results), nodes_searched=searched, nodes_prefiltered=ruled_out + refused
        )
    if best is not None:
        return Placement(
            best[1].name,
            tuple(best[2]),
            nodes_searched=searched,
            nodes_prefiltered=ruled_out + refused,
        )
    return _unplaced(state, claims, nodes, errors, explain, searched, ruled_out + refused)


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
