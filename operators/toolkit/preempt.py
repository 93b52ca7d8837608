"""Priority preemption on a snapshot: which lower-priority pods a pod that fits nowhere would
preempt for its devices, with the same choice the operator makes
(:mod:`operators.scheduling.preemption`).

The units are the snapshot's running pods, a gang's members together (a gang is preempted
whole). Pods being deleted are on their way out already and are nobody's victims.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from operators.allocator.nodes import NodeSelector, NodeSelectorError
from operators.allocator.whatif import FreedDevices
from operators.cache.core import Pod
from operators.scheduling import filters
from operators.scheduling.freeing import Holdings, NodeWhatIf
from operators.scheduling.preemption import Choice, Unit, VictimPod, choose
from operators.toolkit.cluster import Cluster, node_info


def started_at(text: str, now: float) -> float:
    """``status.startTime`` as seconds (``now`` if the pod has not started: as upstream)."""
    if not text:
        return now
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return now


def units(cluster: Cluster, now: float) -> dict[str, Unit]:
    """Every running pod as a unit of its own, or with its gang's other members."""
    groups: dict[str, list[VictimPod]] = {}
    gang_keys: set[str] = set()
    for key, pod in sorted(cluster.pods.items()):
        node = cluster.usage.node_of(key)
        if not node or pod.deleting or not pod.active:
            continue
        victim = VictimPod(
            pod.namespace,
            pod.name,
            node,
            pod.needs.priority,
            started_at(pod.needs.started, now),
            pod.labels,
            pod.uid,
        )
        gang, _ = cluster.snapshot.gang_of(pod)
        unit_key = f"gang:{pod.namespace}/{gang.name}" if gang is not None else key
        if gang is not None:
            gang_keys.add(unit_key)
        groups.setdefault(unit_key, []).append(victim)
    return {key: Unit(key, tuple(pods), gang=key in gang_keys) for key, pods in groups.items()}


def holdings(cluster: Cluster, by_key: Mapping[str, Unit]) -> Holdings:
    unit_of = {pod.ref: unit.key for unit in by_key.values() for pod in unit.pods}
    claims_of: dict[str, dict[str, int]] = {}
    holders: dict[str, int] = {}
    for claim, consumers in cluster.consumers.items():
        if claim not in cluster.allocations:
            continue
        holders[claim] = len(consumers)
        for pod_key in consumers:
            unit = unit_of.get(pod_key)
            if unit is not None:
                mine = claims_of.setdefault(unit, {})
                mine[claim] = mine.get(claim, 0) + 1
    return Holdings(claims_of, holders)


def in_play(cluster: Cluster, pod: Pod) -> bool:
    """Whether priorities are in use at all (the pod's, or a running pod's, is not 0): in a
    cluster without them, nobody preempts and nothing needs saying about it."""
    return pod.needs.priority != 0 or any(
        other.needs.priority != 0
        for key, other in cluster.pods.items()
        if cluster.usage.node_of(key) and other.active
    )


def preemption_for(cluster: Cluster, pod: Pod, now: float | None = None) -> Choice:
    """What preempting lower-priority pods would do for ``pod``, which fits no node now."""
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
    by_key = units(cluster, moment)
    held = holdings(cluster, by_key)
    on_node: dict[str, list[Unit]] = {}
    for unit in by_key.values():
        for node in sorted({p.node for p in unit.pods}):
            on_node.setdefault(node, []).append(unit)
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

    def what_if(name: str) -> NodeWhatIf:
        entry = snapshot.nodes.get(name)
        return NodeWhatIf(
            FreedDevices(cluster.state),
            pending,
            entry.view if entry is not None else None,
            node_info(entry, name),
            pod_filter,
            cluster.usage.on_node(name),
            held,
        )

    return choose(
        pod.needs.priority,
        nodes,
        lambda name: on_node.get(name, []),
        what_if,
        list(snapshot.budgets.values()),
    )
