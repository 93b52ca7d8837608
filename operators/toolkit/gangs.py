"""Gangs in the toolkit: the operator's joint search (all or nothing) run on a snapshot.

``dralloc simulate --add-gang N --template T`` adds N pods that must be placed together, and
settling a snapshot places the pending members of each gang together, as the allocation
controller does (:mod:`operators.controllers.allocation.gangdecision`). ``dralloc explain pod/...`` of a
gang member says what the gang as a whole gets.
"""

from __future__ import annotations

from dataclasses import dataclass

from operators.allocator.gang import GangMember, GangPlacement, find_gang
from operators.api.annotations import GangTopology
from operators.cache.core import Pod
from operators.toolkit.cluster import Cluster, Placement, lines_of


@dataclass(frozen=True)
class GangOutcome:
    """The gang's answer: a placement per member that got one (none unless the gang fits)."""

    placements: tuple[Placement, ...]
    reason: str  # why nothing is placed ('' when the gang fits)
    searches: int


def place_gang(
    cluster: Cluster, pods: list[Pod], need: int, topology: GangTopology | None = None
) -> GangOutcome:
    """Placements for at least ``need`` of ``pods`` at once, or none (nothing recorded:
    ``Cluster.commit`` each placement to keep it)."""
    members: list[GangMember] = []
    pending_of: dict[str, list[str]] = {}
    for pod in pods:
        uses, problem = cluster.resolve(pod)
        if not problem:
            candidates, _, problem = cluster.candidates(pod, uses)
        if problem:
            return GangOutcome((), f"member {pod.ref}: {problem}", 0)
        pending = [u for u in uses if u.key not in cluster.allocations]
        pending_of[pod.ref] = [u.key for u in pending]
        members.append(GangMember(pod.ref, [u.body for u in pending], candidates))
    found: GangPlacement = find_gang(
        cluster.state, members, need, cluster.policy, topology=topology
    )
    if not found.fits:
        details = [
            f"{name}: {placement.explanation.lines()[0]}"
            for name, placement in found.blocking.items()
            if placement.explanation is not None and placement.explanation.lines()
        ]
        reason = "; ".join([found.reason, *details])
        return GangOutcome((), reason, found.searches)
    placements = []
    for placed in found.placed:
        keys = pending_of[placed.member]
        allocations = dict(zip(keys, placed.allocations, strict=True))
        devices = tuple(
            line for key, a in allocations.items() for line in lines_of(key, a.to_dict())
        )
        placements.append(Placement(placed.member, placed.node, devices, allocations=allocations))
    return GangOutcome(tuple(placements), "", found.searches)


def gang_key(cluster: Cluster, pod: Pod) -> str | None:
    """``namespace/gang`` of a gang member (None for a pod in no gang)."""
    gang, _ = cluster.snapshot.gang_of(pod)
    return f"{pod.namespace}/{gang.name}" if gang is not None else None
