"""Gang allocation: nodes and devices for at least N pods at once, or for none.

In-tree DRA allocates the pods of a gang one at a time, first fit: it can hold devices
for half a gang that then never completes, and it misses joint placements that exist
(kubernetes#138765). This module searches for the members together, on top of the
per-pod machinery and without changing it:

* one member's placement is what ``AllocatorState.find_node`` would give that member
  (the same index prefilter, node policy, prioritized-list ranking and per-node search),
  among the nodes the caller says the member may go to (the placement rules);
* members decided earlier count as allocated (``assume``) while later members are
  searched, so no device is handed out twice;
* a claim several members share (a ``resourceClaimName`` claim) is allocated once: the
  first member placed decides it, and the others take that allocation as it is and may
  only go to nodes its node selector allows;
* when a member finds no room, the nodes already chosen for other members are searched
  again with all their claims together (the per-node search may then give an earlier
  member other devices on the same node), and otherwise the search backtracks: it moves
  an earlier member to its next node;
* the whole search is bounded by a budget of node searches and is deterministic (members
  in the caller's order, nodes in policy order, ties by name);
* with a topology, the search runs once per value of a node label (members only on nodes
  with that value) or of a device attribute (members only take devices with that value,
  an ``AttributePin`` on every per-node search), until one value fits.

The answer is all or nothing: either at least ``need`` members have a node and
allocations, or no member has any (``GangPlacement.placed`` is empty) and ``reason``
says why. Nothing stays assumed in the state when ``find_gang`` returns: the caller
assumes the result it is going to write.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from operators.allocator.compiled import CompiledClaim, CompiledRequest, DeviceId
from operators.allocator.constraints import AttributePin, show_value
from operators.allocator.errors import AllocationError, DecisionTimeout, NodeAllocationError
from operators.allocator.index import Signature
from operators.allocator.nodes import NodeInfo
from operators.allocator.placement import Placement
from operators.allocator.quota import Usage
from operators.allocator.results import ClaimAllocation
from operators.allocator.search import Search
from operators.api.annotations import GangTopology

if TYPE_CHECKING:  # annotations only: state is the caller's object
    from operators.allocator.state import AllocatorState

DEFAULT_GANG_BUDGET = 2_000  # node searches per gang decision


@dataclass(frozen=True, slots=True)
class GangMember:
    """One pod of a gang: its claims still to allocate and the nodes it may go to."""

    name: str  # "namespace/name" of the pod, for results and messages
    claims: Sequence[Any]  # claims in any form AllocatorState accepts
    nodes: Sequence[NodeInfo]  # candidates, already filtered by the placement rules


@dataclass(frozen=True, slots=True)
class MemberPlacement:
    member: str
    node: str
    allocations: tuple[ClaimAllocation, ...]  # one per claim of the member, in order


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """Outcome of find_gang: placements for at least ``need`` members, or none and why."""

    need: int
    members: int
    placed: tuple[MemberPlacement, ...] = ()
    reason: str = ""  # why not, when nothing is placed
    blocking: dict[str, Placement] = field(default_factory=dict)  # members that fit nowhere
    searches: int = 0  # node searches spent
    budget_exhausted: bool = False
    fatal: bool = False  # a claim is broken (missing class, bad CEL): retrying does not help

    @property
    def fits(self) -> bool:
        return bool(self.placed)


class _BudgetExhausted(Exception):
    pass


@dataclass(slots=True)
class _Member:
    name: str
    claims: list[CompiledClaim]
    nodes: list[NodeInfo]
    kind: object  # members of one kind are interchangeable (same claims spec, same nodes)
    demand: tuple[Signature, int] | None  # see _simple_demand

    @property
    def keys(self) -> list[str]:
        return [claim.ref for claim in self.claims]


def _simple_demand(claims: Sequence[CompiledClaim]) -> tuple[Signature, int] | None:
    """(signature, count) when that is all the member asks: one claim with one ExactCount
    request, no admin access, capacity or constraints. Then the device index's free counts
    say exactly how many such members a node can take."""
    if len(claims) != 1 or claims[0].constraints or len(claims[0].requests) != 1:
        return None
    request = claims[0].requests[0].exactly
    if (
        request is None
        or request.mode != "ExactCount"
        or request.admin_access
        or request.capacity_requests is not None
    ):
        return None
    return request.signature, request.count


def _kind(claims: Sequence[CompiledClaim], nodes: Sequence[NodeInfo], name: str) -> object:
    """What makes two members interchangeable for the search's memory of dead ends."""
    try:
        spec = tuple((c.requests, c.constraints) for c in claims)
        hash(spec)
    except TypeError:
        return name  # not comparable: this member is its own kind
    return (spec, tuple(n.name for n in nodes))


class _GangSearch:
    def __init__(
        self,
        state: AllocatorState,
        members: list[_Member],
        need: int,
        policy: str,
        budget: int,
        deadline: float | None,
        pin: AttributePin | None = None,
    ) -> None:
        self.state = state
        self.pin = pin  # every per-node search takes only devices with this value
        self.members = members
        self.need = need
        self.policy = policy
        self.budget = budget
        self.deadline = deadline
        self.searches = 0
        self.chosen: dict[int, tuple[str, list[ClaimAllocation]]] = {}  # member -> node
        self.failed: set[tuple[int, frozenset[tuple[object, str, tuple[Any, ...]]]]] = set()
        # A claim shared by members is assumed once, by the placed member that holds it.
        self.holder: dict[str, int] = {}
        self.users: dict[str, list[int]] = {}
        for i, member in enumerate(members):
            for key in dict.fromkeys(member.keys):
                self.users.setdefault(key, []).append(i)

    # --- tentative allocations --------------------------------------------------------

    def _apply(self, i: int, node: str, results: list[ClaimAllocation]) -> None:
        for claim, allocation in zip(self.members[i].claims, results, strict=True):
            if self.holder.get(claim.ref, i) != i:
                continue  # shared, and already assumed by the member holding it
            self.holder[claim.ref] = i
            self.state.assume(claim, allocation)
        self.chosen[i] = (node, results)

    def _undo(self, i: int) -> None:
        del self.chosen[i]
        for claim in self.members[i].claims:
            if self.holder.get(claim.ref) != i:
                continue
            # Another placed member uses the claim too: it keeps the allocation.
            heir = next((j for j in self.users[claim.ref] if j in self.chosen), None)
            if heir is None:
                del self.holder[claim.ref]
                self.state.release(claim)
            else:
                self.holder[claim.ref] = heir

    def _fixed(self, i: int, besides: Sequence[int] = ()) -> dict[str, ClaimAllocation]:
        """Allocations of member i's claims that placed members (other than i and
        ``besides``) hold: member i takes them as they are."""
        out: dict[str, ClaimAllocation] = {}
        for key in self.members[i].keys:
            j = self.holder.get(key)
            if j is not None and j != i and j not in besides:
                results = self.chosen[j][1]
                out[key] = results[self.members[j].keys.index(key)]
        return out

    @staticmethod
    def _reaches(fixed: dict[str, ClaimAllocation], node: NodeInfo) -> bool:
        return all(a.node_selector is None or a.node_selector.matches(node) for a in fixed.values())

    def release_all(self) -> None:
        for i in list(self.chosen):
            self._undo(i)

    def _charge(self, searches: int) -> None:
        self.searches += max(searches, 1)
        if self.searches > self.budget:
            raise _BudgetExhausted()
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DecisionTimeout(0.0)

    def _remaining_seconds(self) -> float | None:
        if self.deadline is None:
            return None
        return max(self.deadline - time.monotonic(), 0.0)

    # --- one member's options ---------------------------------------------------------

    def place_alone(self, i: int, nodes: Sequence[NodeInfo], *, explain: bool) -> Placement:
        """Member i's best node among ``nodes``, with every claim's allocation in order
        (claims that placed members share come as those members allocated them)."""
        member = self.members[i]
        fixed = self._fixed(i)
        if fixed:
            nodes = [n for n in nodes if self._reaches(fixed, n)]
        own = [c for c in member.claims if c.ref not in fixed]
        found = self.state.find_node(
            own,
            nodes,
            self.policy,
            explain=explain,
            budget_seconds=self._remaining_seconds(),
            pin=self.pin,
        )
        self._charge(found.nodes_searched)
        if not fixed or found.node is None:
            return found
        mine = iter(found.allocations)
        allocations = tuple(fixed[c.ref] if c.ref in fixed else next(mine) for c in member.claims)
        return dataclasses.replace(found, allocations=allocations)

    def _options(self, i: int) -> Iterator[None]:
        """Each option applied in turn (undone when the caller moves on): the member's
        best node in policy order, then its next best, ...; then the nodes of other
        members searched again together with this one."""
        member = self.members[i]
        tried: set[str] = set()
        while True:
            nodes = [n for n in member.nodes if n.name not in tried]
            if not nodes:
                break
            found = self.place_alone(i, nodes, explain=False)
            if found.node is None:
                break
            tried.add(found.node)
            self._apply(i, found.node, list(found.allocations))
            yield
            self._undo(i)
            tried |= self._same_shape(i, found.node)
        yield from self._regroup(i, tried)

    def _same_shape(self, i: int, node: str) -> set[str]:
        """Nodes where this member would be in the same position as on ``node`` (as many
        free devices it can use, and no other member there): trying them too only repeats
        the same dead end. Only for members whose demand the index counts exactly."""
        member = self.members[i]
        if member.demand is None or self.pin is not None:
            return set()  # under a pin, equal counts may hide different devices with the value
        signature = member.demand[0]
        index = self.state.device_index()
        used = {n for n, _ in self.chosen.values()}
        by_name = {n.name: n for n in member.nodes}

        def shape(info: NodeInfo) -> tuple[int, bool]:
            return index.counts(signature, info)[1], info.name in used

        mine = shape(by_name[node])
        return {n.name for n in member.nodes if shape(n) == mine}

    def _regroup(self, i: int, tried: set[str]) -> Iterator[None]:
        """On a node other members already use, search their claims and this member's
        together: the per-node search may give them other devices there."""
        member = self.members[i]
        allowed = {n.name: n for n in member.nodes}
        used = sorted({node for node, _ in self.chosen.values()})
        for name in used:
            info = allowed.get(name)
            if info is None or name in tried:
                continue
            there = sorted(j for j, (node, _) in self.chosen.items() if node == name)
            if self._held_elsewhere(there):
                continue
            before = {j: self.chosen[j] for j in there}
            for j in there:
                self._undo(j)
            results = None
            if self._counts_allow([*there, i], info):
                results = self._search_together([*there, i], info)
            if results is None:
                for j in there:
                    self._apply(j, *before[j])
                continue
            for j, mine in zip([*there, i], results, strict=True):
                self._apply(j, name, mine)
            yield
            for j in [*there, i]:
                self._undo(j)
            for j in there:
                self._apply(j, *before[j])

    def _held_elsewhere(self, there: list[int]) -> bool:
        """Whether a member in ``there`` holds a claim that a placed member on another node
        uses: searching it again could move devices that member keeps."""
        for j in there:
            for key in self.members[j].keys:
                if self.holder.get(key) == j and any(
                    k in self.chosen and k not in there for k in self.users[key]
                ):
                    return True
        return False

    def _counts_allow(self, indexes: list[int], node: NodeInfo) -> bool:
        """False when the free counts alone rule a joint search of these members on the node
        out: all of them ask for devices of one signature (see _simple_demand) and together
        more than the node has free. Proving that by searching costs the per-node search an
        exponential walk over the device combinations."""
        demands = [self.members[j].demand for j in indexes]
        if any(d is None for d in demands) or len({d[0] for d in demands if d}) != 1:
            return True
        signature = demands[0][0] if demands[0] else None
        assert signature is not None
        entry = self.state.device_index().entry(signature)
        if entry.shareable(node.name):
            return True  # a multi-allocatable device may serve several requests
        free = self.state.device_index().counts(signature, node)[1]
        return sum(d[1] for d in demands if d) <= free

    def _search_together(
        self, indexes: list[int], node: NodeInfo
    ) -> list[list[ClaimAllocation]] | None:
        self._charge(1)
        fixed: dict[str, ClaimAllocation] = {}
        for j in indexes:
            fixed.update(self._fixed(j, besides=indexes))
        if not self._reaches(fixed, node):
            return None
        # A claim shared by several of these members is searched once.
        claims = {c.ref: c for j in indexes for c in self.members[j].claims if c.ref not in fixed}
        inputs = self.state.search_inputs(self.deadline)
        if self.pin is not None:
            inputs = dataclasses.replace(inputs, pin=self.pin)
        try:
            results = Search(list(claims.values()), node, self.state.pools_for(node), inputs).run()
        except NodeAllocationError:
            return None
        if results is None:
            return None
        decided = {**fixed, **dict(zip(claims, results, strict=True))}
        return [[decided[key] for key in self.members[j].keys] for j in indexes]

    # --- the search -------------------------------------------------------------------

    def _memo_key(self, i: int) -> tuple[int, frozenset[tuple[object, str, tuple[Any, ...]]]]:
        placed = frozenset(
            (
                self.members[j].kind,
                node,
                tuple(tuple(d.device_id for d in a.devices) for a in results),
            )
            for j, (node, results) in self.chosen.items()
        )
        return i, placed

    def greedy(self) -> bool:
        """Members one after another, each on its best node (regrouping when needed),
        skipping as many as the gang can spare. Most gangs that fit are placed here."""
        spare = len(self.members) - self.need
        for i in range(len(self.members)):
            # The first option stays applied: a generator left unfinished undoes nothing.
            if next(self._options(i), False) is False:
                if spare == 0:
                    return False
                spare -= 1
        return True

    def backtrack(self, i: int = 0) -> bool:
        """Depth first over the members' options; dead ends are remembered (by what is
        placed where, interchangeable members counted alike) and not searched again."""
        placed = len(self.chosen)
        if i == len(self.members):
            return placed >= self.need
        if placed + len(self.members) - i < self.need:
            return False
        key = self._memo_key(i)
        if key in self.failed:
            return False
        for _ in self._options(i):
            if self.backtrack(i + 1):
                return True
        if placed + len(self.members) - i - 1 >= self.need and self.backtrack(i + 1):
            return True
        self.failed.add(key)
        return False

    def result(self) -> tuple[MemberPlacement, ...]:
        return tuple(
            MemberPlacement(self.members[i].name, node, tuple(results))
            for i, (node, results) in sorted(self.chosen.items())
        )


def find_gang(
    state: AllocatorState,
    members: Sequence[GangMember],
    need: int,
    policy: str = "binpack",
    *,
    budget: int = DEFAULT_GANG_BUDGET,
    budget_seconds: float | None = None,
    topology: GangTopology | str | None = None,
) -> GangPlacement:
    """Nodes and allocations for at least ``need`` of the members at once, or none.

    ``budget`` bounds the node searches (the same input always gives the same answer);
    ``budget_seconds`` bounds the wall-clock time (DecisionTimeout), as for find_node.

    ``topology`` (a GangTopology, or its annotation spelling: ``LABEL`` or
    ``attribute:DOMAIN/NAME``) keeps the placed members together: with a node label, every
    placed member is on nodes with one value of it (a rack); with a device attribute, every
    device the placed members are allocated has one value of it (an NVLink domain; devices
    without it are not used; adminAccess requests are exempt). The values are tried one by
    one within the one budget, the one with most candidate nodes (label) or most free devices
    on the members' candidate nodes (attribute) first, then by value; the first where the
    gang fits wins.
    """
    if isinstance(topology, str):
        topology = GangTopology.parse(topology)
    if topology is None:
        return _find_flat(state, members, need, policy, budget, budget_seconds)
    deadline = time.monotonic() + budget_seconds if budget_seconds is not None else None
    if topology.device_attribute:
        domains = _attribute_domains(state, members, topology.key)
        nothing = "no device on the members' candidate nodes has the attribute"
    else:
        domains = _label_domains(members, topology.key)
        nothing = "no candidate node has the label"
    spent = 0
    tried: list[str] = []
    for value, inside, pin in domains:
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        found = _find_flat(state, inside, need, policy, budget - spent, left, pin)
        spent += found.searches
        if found.fits or found.fatal:
            return dataclasses.replace(found, searches=spent)
        tried.append(f"{value}: {found.reason}")
        if found.budget_exhausted or spent >= budget:
            break
    where = "; ".join(tried[:3]) + ("; ..." if len(tried) > 3 else "")
    return GangPlacement(
        need,
        len(members),
        reason=(
            f"no value of {topology.describe()} has room for {need} members together"
            + (f" ({where})" if where else f": {nothing}")
        ),
        searches=spent,
        budget_exhausted=spent >= budget,
    )


# One value of a topology to try: how it is shown, the members with the nodes they may use
# under it, and the pin their searches take (device attributes only).
_Domain = tuple[str, list[GangMember], AttributePin | None]


def _label_domains(members: Sequence[GangMember], label: str) -> Iterator[_Domain]:
    """The values of a node label, most candidate nodes first: members only on those nodes."""
    sizes: dict[str, int] = {}
    for member in members:
        for node in member.nodes:
            value = node.labels.get(label)
            if value is not None:
                sizes[value] = sizes.get(value, 0) + 1
    for value in sorted(sizes, key=lambda v: (-sizes[v], v)):
        inside = [
            GangMember(m.name, m.claims, [n for n in m.nodes if n.labels.get(label) == value])
            for m in members
        ]
        yield value, inside, None


_Value = tuple[str, tuple[Any, ...]]  # (kind, values) of a scalar attribute


def _attribute_domains(
    state: AllocatorState, members: Sequence[GangMember], attribute: str
) -> Iterator[_Domain]:
    """The values of a device attribute on devices the members' candidate nodes reach, most
    free devices first (then by value): the members' searches are pinned to the value.

    A member that must take a device under the pin (a claim of its own with a request that
    is not adminAccess) keeps only the nodes that reach a device with the value: the pinned
    search could find nothing on the others, and each would cost a node search. Anything
    this cannot tell (a node whose pools cannot be listed) keeps the node."""
    nodes: dict[str, NodeInfo] = {}
    for member in members:
        for node in member.nodes:
            nodes.setdefault(node.name, node)
    reach: dict[str, set[_Value] | None] = {}  # None: unknown, the node stays
    free: dict[_Value, set[DeviceId]] = {}
    counted: set[int] = set()  # slices whose devices are counted (shared ones reach many nodes)
    exclusive = state.allocated.exclusive
    for name, node in nodes.items():
        try:
            pools = state.pools_for(node)
        except AllocationError:
            reach[name] = None
            continue
        values = reach[name] = set()
        for pool in pools:
            for slice_ in pool.slices:
                present = slice_.scalar_values(attribute)
                if not present:
                    continue
                values |= present
                if id(slice_) in counted:
                    continue
                counted.add(id(slice_))
                for device in slice_.devices:
                    attr = device.lookup_attribute(attribute)
                    if attr is None or attr.is_list or not attr.kind:
                        continue
                    ids = free.setdefault((attr.kind, attr.values), set())
                    if device.id not in exclusive:
                        ids.add(device.id)
    if not free:
        return
    claims = [state.compile_claims(m.claims) for m in members]  # once for every value
    shared = _shared_claims([c.ref for c in mine] for mine in claims)
    pinned = [_takes_pinned_device(mine, shared) for mine in claims]
    for value in sorted(free, key=lambda v: (-len(free[v]), v)):
        inside = [
            GangMember(
                m.name,
                mine,
                [n for n in m.nodes if _reaches(reach[n.name], value)] if needs else m.nodes,
            )
            for m, mine, needs in zip(members, claims, pinned, strict=True)
        ]
        yield show_value(value), inside, AttributePin(attribute, value)


def _reaches(values: set[_Value] | None, value: _Value) -> bool:
    return values is None or value in values


def _takes_pinned_device(claims: Iterable[CompiledClaim], shared: set[str]) -> bool:
    """Whether the member's own claims (not shared with another member, whose devices may
    be someone else's choice) surely take a device a pin restricts: a request whose every
    alternative takes devices without adminAccess."""

    def pinned(request: CompiledRequest) -> bool:
        return not request.admin_access and (request.mode == "All" or request.count > 0)

    for claim in claims:
        if claim.ref in shared:
            continue
        for request in claim.requests:
            options = request.first_available or (
                (request.exactly,) if request.exactly is not None else ()
            )
            if options and all(pinned(option) for option in options):
                return True
    return False


def _find_flat(
    state: AllocatorState,
    members: Sequence[GangMember],
    need: int,
    policy: str,
    budget: int,
    budget_seconds: float | None,
    pin: AttributePin | None = None,
) -> GangPlacement:
    """find_gang without a topology (with ``pin``: within one value of a device attribute)."""
    deadline = time.monotonic() + budget_seconds if budget_seconds is not None else None
    compiled = []
    for m in members:
        claims = state.compile_claims(m.claims)
        compiled.append(_Member(m.name, claims, list(m.nodes), None, None))
    shared = _shared_claims(m.keys for m in compiled)
    for member in compiled:
        if shared.isdisjoint(member.keys):
            member.kind = _kind(member.claims, member.nodes, member.name)
            member.demand = _simple_demand(member.claims)
        else:
            # Its devices may be counted with another member's: no count-based shortcut,
            # and interchangeable with no other member.
            member.kind = member.name
    total = len(compiled)
    if total < need:
        return GangPlacement(
            need, total, reason=f"waiting for gang members: {total} of {need} present"
        )
    # The free counts, or a quota's room, can tell at once that the gang cannot fit (before
    # any node search), and name what refuses it.
    short = _capacity_shortfall(state, compiled, need) or (
        "" if shared else _quota_shortfall(state, compiled, need)
    )
    if short:
        return GangPlacement(need, total, reason=short)
    search = _GangSearch(state, compiled, need, policy, budget, deadline, pin)
    try:
        try:
            if search.greedy():
                return GangPlacement(need, total, search.result(), searches=search.searches)
            search.release_all()
            blocking = _alone(search, compiled)
            fatal = next((p for p in blocking.values() if _fatal(p)), None)
            if fatal is not None:
                assert fatal.explanation is not None
                return GangPlacement(
                    need,
                    total,
                    reason=fatal.explanation.fatal_error or "",
                    blocking=blocking,
                    searches=search.searches,
                    fatal=True,
                )
            if total - len(blocking) < need:
                return GangPlacement(
                    need,
                    total,
                    reason=(
                        f"only {total - len(blocking)} of the gang's {total} members fit on "
                        f"any node, {need} must be placed together"
                    ),
                    blocking=blocking,
                    searches=search.searches,
                )
            if search.backtrack():
                return GangPlacement(need, total, search.result(), searches=search.searches)
            return GangPlacement(
                need,
                total,
                reason=(
                    f"no joint placement for {need} of the gang's {total} members: each fits "
                    f"alone, but not together ({search.searches} node searches)"
                ),
                searches=search.searches,
            )
        except _BudgetExhausted:
            return GangPlacement(
                need,
                total,
                reason=(
                    f"the gang search gave up after {budget} node searches without placing "
                    f"{need} members together; trying again when the cluster changes"
                ),
                searches=search.searches,
                budget_exhausted=True,
            )
    except AllocationError as error:  # a broken claim seen by a regrouping search
        return GangPlacement(need, total, reason=str(error), searches=search.searches, fatal=True)
    finally:
        search.release_all()


def _shared_claims(members: Iterable[Sequence[str]]) -> set[str]:
    """Claims that more than one member uses (given each member's claim keys)."""
    seen: set[str] = set()
    shared: set[str] = set()
    for keys in members:
        for key in set(keys):
            (shared if key in seen else seen).add(key)
    return shared


def _fatal(found: Placement) -> bool:
    return found.explanation is not None and bool(found.explanation.fatal_error)


def _alone(search: _GangSearch, members: list[_Member]) -> dict[str, Placement]:
    """The members that fit nowhere even with the rest of the gang absent, with why (only
    those are explained: an explanation looks at every node)."""
    out: dict[str, Placement] = {}
    for i, member in enumerate(members):
        if search.place_alone(i, member.nodes, explain=False).node is None:
            out[member.name] = search.place_alone(i, member.nodes, explain=True)
    return out


def _quota_shortfall(state: AllocatorState, members: list[_Member], need: int) -> str:
    """Why no ``need`` members fit under a DeviceQuota of their namespace, told by what the
    quota has left ('' when it allows it or cannot tell): each member takes at least the
    devices of its ExactCount requests of the quota's class, and one claim per claim asking
    for them. Quotas with selectors count only some devices, and a prioritized list may pick
    another class: those cannot tell. The search would find the same (one member after
    another refused), but not say which quota, nor how far it is."""
    book = state.quotas
    least: list[dict[tuple[str, str], tuple[int, int]]] = []  # per member: (devices, claims)
    for member in members:
        mine: dict[tuple[str, str], tuple[int, int]] = {}
        for claim in member.claims:
            if claim.namespace not in book.quotas:
                continue
            counted: set[tuple[str, str]] = set()
            for request in claim.requests:
                wanted = request.exactly
                if wanted is None or wanted.admin_access or wanted.mode != "ExactCount":
                    continue
                key = (claim.namespace, wanted.class_name)
                devices, claims = mine.get(key, (0, 0))
                mine[key] = (devices + wanted.count, claims + (key not in counted))
                counted.add(key)
        least.append(mine)
    for key in sorted({k for mine in least for k in mine}):
        namespace, class_name = key
        for _, quota in sorted(book.quotas[namespace].items()):
            if quota.class_name != class_name or quota.selectors or book.blocks(quota):
                continue
            used = book.used(quota)
            # Less what the members' own claims count for already (an assumption the watch
            # has not confirmed yet): the search replaces it rather than adding to it.
            own = Usage()
            for member in members:
                for claim in member.claims:
                    own.add(book.claim_usage(quota, claim.ref))
            for what, index, limit, taken in (
                ("devices", 0, quota.devices, used.devices - own.devices),
                ("claims", 1, quota.claims, used.claims - own.claims),
            ):
                if limit is None:
                    continue
                together = sum(sorted(mine.get(key, (0, 0))[index] for mine in least)[:need])
                if taken + together > limit:
                    return (
                        f"DeviceQuota {quota.ref}: {what} {taken} of {limit} used, and the "
                        f"gang's {need} members placed together need {together} more "
                        f"(class {class_name})"
                    )
    return ""


def _capacity_shortfall(state: AllocatorState, members: list[_Member], need: int) -> str:
    """Why ``need`` members cannot fit at once, told by the free counts alone ('' when the
    counts allow it or cannot tell): for members that all ask for devices of one signature
    on the same candidate nodes, a node with F free devices takes at most F // count."""
    demands = [m.demand for m in members]
    if any(d is None for d in demands) or len({d[0] for d in demands if d}) != 1:
        return ""
    names = {tuple(n.name for n in m.nodes) for m in members}
    if len(names) != 1:
        return ""
    signature = members[0].demand[0] if members[0].demand else None
    assert signature is not None
    entry = state.device_index().entry(signature)
    if entry.shared or entry.shareable_nodes or entry.shareable_shared:
        return ""  # network-attached or multi-allocatable devices: counts do not add up
    counts = sorted(d[1] for d in demands if d)
    smallest = counts[0]
    free = [entry.free.get(n.name, 0) for n in members[0].nodes]
    room = sum(f // smallest for f in free)
    cheapest = sum(counts[:need])
    if room >= need and sum(free) >= cheapest:
        return ""
    return (
        f"at most {min(room, need - 1)} of the gang's {len(members)} members fit at once "
        f"({sum(free)} free matching devices on the nodes they may use), {need} must be "
        "placed together"
    )
