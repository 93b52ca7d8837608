"""Priority preemption on a snapshot: which lower-priority pods a pod that fits nowhere would
preempt for its devices, with the same choice the operator makes
(:mod:`operators.scheduling.preemption`).

The units are the snapshot's running pods that ask for devices, a gang's members together (a
gang is preempted whole), as the operator may delete only pods that ask for devices (its pod
writes policy); pods without devices are kube-scheduler's own preemption's. Pods being deleted
are on their way out already and are nobody's victims: the claims only they hold count as
free, as the operator counts them (a pod that fits once they are gone preempts nobody).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping

from operators.allocator.nodes import NodeSelector, NodeSelectorError
from operators.allocator.whatif import FreedDevices
from operators.cache.core import Pod
from operators.scheduling import filters
from operators.scheduling.freeing import (
    Holdings,
    NodeWhatIf,
    group_units,
    holdings,
    leaving_claims,
    victim_of,
)
from operators.scheduling.preemption import EXACT_UNITS, Choice, Unit, choose
from operators.toolkit.cluster import Cluster, node_info


def units(
    cluster: Cluster, now: float, preemptor: Pod
) -> tuple[dict[str, Unit], dict[str, list[Unit]]]:
    """Every running pod that asks for devices, as a unit (see scheduling.freeing)."""
    running = []
    for key, pod in sorted(cluster.pods.items()):
        node = cluster.usage.node_of(key)
        if not node or pod.deleting or not pod.active or not pod.claims:
            continue
        gang, _ = cluster.snapshot.gang_of(pod)
        member = f"{pod.namespace}/{gang.name}" if gang is not None else None
        running.append((victim_of(pod.needs, node, pod.uid, now), member))
    labels = cluster.snapshot.namespace_labels
    return group_units(running, preemptor.needs, lambda ns: labels.get(ns, {}))


def leaving(cluster: Cluster, kept: Iterable[str]) -> tuple[list[str], set[str]]:
    """The claims only pods on their way out reserve (free in every what-if, as the operator
    counts them; never ``kept``, the preemptor's own), and the nodes their allocations can be
    used from (every node for one without a node selector)."""
    leaving_pods = {
        key for key, pod in cluster.pods.items() if pod.deleting and cluster.usage.node_of(key)
    }
    named = {
        f"{cluster.pods[key].namespace}/{name}"
        for key in leaving_pods
        for name in cluster.pods[key].claim_names()
    }
    holders = {
        ref: cluster.consumers.get(ref, set()) for ref in named if ref in cluster.allocations
    }
    gone = leaving_claims(holders, leaving_pods, frozenset(kept))
    nodes: set[str] = set()
    for ref in gone:
        selector = cluster.allocations[ref].get("nodeSelector")
        try:
            pinned = NodeSelector.parse(selector) if selector else None
        except NodeSelectorError:
            continue
        nodes.update(
            name
            for name in cluster.node_names
            if pinned is None or pinned.matches(node_info(cluster.snapshot.nodes.get(name), name))
        )
    return gone, nodes


def held(cluster: Cluster, by_key: Mapping[str, Unit], kept: Iterable[str]) -> Holdings:
    """What the units hold; ``kept``: the preemptor's own allocated claims (never freed)."""
    unit_of = {pod.ref: unit.key for unit in by_key.values() for pod in unit.pods}
    claims_of: dict[str, dict[str, int]] = {}
    reserved: dict[str, int] = {}
    for claim, consumers in cluster.consumers.items():
        if claim not in cluster.allocations:
            continue
        reserved[claim] = len(consumers)
        for pod_key in consumers:
            unit = unit_of.get(pod_key)
            if unit is not None:
                mine = claims_of.setdefault(unit, {})
                mine[claim] = mine.get(claim, 0) + 1
    return holdings(claims_of, reserved, kept)


def in_play(cluster: Cluster, pod: Pod) -> bool:
    """Whether priorities are in use at all (the pod's, or a running pod's, is not 0): in a
    cluster without them, nobody preempts and nothing needs saying about it."""
    return pod.needs.priority != 0 or any(
        other.needs.priority != 0
        for key, other in cluster.pods.items()
        if cluster.usage.node_of(key) and other.active
    )


def preemption_for(
    cluster: Cluster, pod: Pod, now: float | None = None, *, exact_units: int = EXACT_UNITS
) -> Choice:
    """What preempting lower-priority pods would do for ``pod``, which fits no node now.
    ``exact_units``: see operators.scheduling.preemption (0: upstream's greedy reprieve only)."""
    if not pod.needs.preempts:
        return Choice(None, "its preemptionPolicy is Never")
    uses, problem = cluster.resolve(pod)
    if problem:
        return Choice(None, problem)
    pending = [u.body for u in uses if u.key not in cluster.allocations]
    pinned: list[NodeSelector] = []
    for use in uses:
        selector = (cluster.allocations.get(use.key) or {}).get("nodeSelector")
        if selector:
            try:
                pinned.append(NodeSelector.parse(selector))
            except NodeSelectorError as error:
                return Choice(None, f"claim {use.key}: {error}")
    moment = now if now is not None else datetime.datetime.now(datetime.UTC).timestamp()
    by_key, on_node = units(cluster, moment, pod)
    holding: Holdings = held(cluster, by_key, [u.key for u in uses if u.key in cluster.allocations])
    snapshot = cluster.snapshot
    views = [e.view for e in snapshot.nodes.values() if e.view is not None]
    pod_filter = filters.prepare(
        pod.needs,
        cluster.usage,
        views,
        lambda ns: snapshot.namespace_labels.get(ns, {}),
        key=pod.ref,
    )
    nodes = [
        name
        for name in cluster.node_names
        if (not pod.node_name or pod.node_name == name)
        and all(s.matches(node_info(snapshot.nodes.get(name), name)) for s in pinned)
    ]

    gone, freeing = leaving(cluster, [u.key for u in uses if u.key in cluster.allocations])

    def what_if(name: str) -> NodeWhatIf:
        entry = snapshot.nodes.get(name)
        freed = FreedDevices(cluster.state)
        for claim in gone:
            freed.free(claim)
        return NodeWhatIf(
            freed,
            pending,
            entry.view if entry is not None else None,
            node_info(entry, name),
            pod_filter,
            cluster.usage.on_node(name),
            holding,
        )

    return choose(
        pod.needs.priority,
        nodes,
        lambda name: on_node.get(name, []),
        what_if,
        [b for b in snapshot.budgets.values() if b.weighs_on_preemption],
        exact_units=exact_units,
        freeing=freeing,
    )
