"""One node with some pods gone, as preemption asks about it: their devices freed in the
allocator's what-if, and their share of the node's resources and host ports given back.

A claim is freed only when every pod holding it (its ``reservedFor``) is among the pods gone:
a claim a victim shares with a pod that stays keeps its devices, and so does a claim the
preemptor itself uses (:func:`holdings` counts it as held for good). The pods' other effects
on the preemptor are left as they were before any was removed: a pod the preemptor's required
affinity asks for is never a victim (removing it would leave the preemptor unplaceable, which
upstream's what-if finds by running its filters again), and the relief that removing a victim
would give to topology spread or anti-affinity is not counted (a node that only that relief
would open is not chosen).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence

from operators.allocator.nodes import NodeInfo
from operators.allocator.state import ClaimLike
from operators.allocator.whatif import FreedDevices
from operators.scheduling.filters import PodFilter
from operators.scheduling.model import Node, PodNeeds
from operators.scheduling.preemption import Unit, VictimPod, started_at
from operators.scheduling.usage import NodeTotals


@dataclasses.dataclass(frozen=True)
class Holdings:
    """What the units hold: claims, with how many of each unit's pods reserve them, and the
    number of pods reserving each claim in all."""

    claims_of: Mapping[str, Mapping[str, int]]
    """Unit key -> claim key -> how many of its pods reserve it."""
    holders: Mapping[str, int]
    """Claim key -> how many pods reserve it (units' or not)."""


def holdings(
    claims_of: Mapping[str, Mapping[str, int]],
    reserved: Mapping[str, int],
    kept: Iterable[str] = (),
) -> Holdings:
    """The units' claims (unit key -> claim -> how many of its pods reserve it) and how many
    pods reserve each; ``kept``: claims the preemptor uses itself, never freed."""
    holders = dict(reserved)
    for claim in kept:
        holders[claim] = holders.get(claim, 0) + 1  # a holder that never goes
    return Holdings(claims_of, holders)


def leaving_claims(
    holders: Mapping[str, Collection[str]], leaving: Collection[str], kept: Collection[str] = ()
) -> list[str]:
    """The claims only pods on their way out reserve, free in every what-if (free once
    those pods are gone, with nobody removed): ``holders``, allocated claim key -> who
    reserves it (``reservedFor``, as ids); ``leaving``, the ids of the pods being deleted;
    ``kept``, the preemptor's own claims, never freed."""
    gone = set(leaving)
    return sorted(
        claim
        for claim, who in holders.items()
        if who and claim not in kept and all(holder in gone for holder in who)
    )


def victim_of(needs: PodNeeds, node: str, uid: str, now: float) -> VictimPod:
    """A running pod as preemption weighs it (its start ``now`` if it has not started)."""
    return VictimPod(
        needs.namespace,
        needs.name,
        node,
        needs.priority,
        started_at(needs.started, now),
        needs.labels,
        uid,
    )


def group_units(
    running: Iterable[tuple[VictimPod, str | None]],
    preemptor: PodNeeds,
    namespace_labels: Callable[[str], Mapping[str, str]],
) -> tuple[dict[str, Unit], dict[str, list[Unit]]]:
    """The units of the running pods, each given with its gang (``namespace/name``; None for
    a pod in none): a pod alone, or a gang's every member together; none with a member the
    preemptor's required affinity asks for. And which units hold something on each node."""
    groups: dict[str, list[VictimPod]] = {}
    gangs: set[str] = set()
    needed: set[str] = set()
    for pod, gang in running:
        key = f"gang:{gang}" if gang is not None else pod.ref
        if gang is not None:
            gangs.add(key)
        groups.setdefault(key, []).append(pod)
        if attracts(preemptor, pod.namespace, pod.labels, namespace_labels(pod.namespace)):
            needed.add(key)
    units = {k: Unit(k, tuple(v), gang=k in gangs) for k, v in groups.items() if k not in needed}
    on_node: dict[str, list[Unit]] = {}
    for unit in units.values():
        for node in sorted({p.node for p in unit.pods}):
            on_node.setdefault(node, []).append(unit)
    return units, on_node


def attracts(
    preemptor: PodNeeds,
    namespace: str,
    labels: Mapping[str, str],
    namespace_labels: Mapping[str, str],
) -> bool:
    """Whether the preemptor's required pod affinity asks for a pod like this one (such a
    pod is not preempted: the preemptor would need it where it goes)."""
    return any(term.matches(namespace, labels, namespace_labels) for term in preemptor.affinity)


class NodeWhatIf:
    """:class:`operators.scheduling.preemption.WhatIf` for the preemptor on one node."""

    def __init__(
        self,
        freed: FreedDevices,
        claims: Sequence[ClaimLike],
        node: Node | None,
        info: NodeInfo,
        pod_filter: PodFilter | None,
        totals: NodeTotals,
        holdings: Holdings,
        member: Callable[[VictimPod], Hashable] = lambda pod: pod.ref,
    ) -> None:
        """``member``: a victim's key among ``totals.members`` (the usage's pod keys)."""
        self.freed = freed
        self.claims = claims
        self.node = node
        self.info = info
        self.pod_filter = pod_filter
        self.holdings = holdings
        self.totals = NodeTotals(
            dict(totals.requested),
            totals.pods,
            collections.Counter(totals.ports),
            dict(totals.members),
        )
        self.member = member
        self.gone: collections.Counter[str] = collections.Counter()
        self.away: dict[Hashable, PodNeeds] = {}

    def remove(self, unit: Unit) -> None:
        for claim, pods in self.holdings.claims_of.get(unit.key, {}).items():
            self.gone[claim] += pods
            if self.gone[claim] == self.holdings.holders.get(claim, 0):
                self.freed.free(claim)
        for pod in unit.pods:
            key = self.member(pod)
            needs = self.totals.members.get(key)
            if needs is not None:
                self.away[key] = needs
                self.totals.remove(key, needs)

    def restore(self, unit: Unit) -> None:
        for claim, pods in self.holdings.claims_of.get(unit.key, {}).items():
            if self.gone[claim] == self.holdings.holders.get(claim, 0):
                self.freed.hold(claim)
            self.gone[claim] -= pods
        for pod in unit.pods:
            key = self.member(pod)
            needs = self.away.pop(key, None)
            if needs is not None:
                self.totals.add(key, needs)

    def fits(self) -> bool:
        pod_filter, node = self.pod_filter, self.node
        if pod_filter is not None and node is not None:
            blocked = pod_filter.reasons(node, self.info, self.totals)
            if blocked:
                return False
        return self.freed.fits(self.claims, self.info)
