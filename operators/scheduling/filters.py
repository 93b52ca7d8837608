"""kube-scheduler's Filter plugins for what a pod needs besides devices.

dralloc pins a pod to the node it allocated devices on, so it must choose only among nodes
where kube-scheduler will bind the pod; a pod pinned anywhere else stays Pending with its
devices held. :func:`prepare` does, once per pod decision, what the scheduler's PreFilter
does (topology-spread counts, inter-pod affinity counts); :meth:`PodFilter.reasons` then
answers per node in the scheduler's own words, so the explanations read like its messages:

- NodeName, NodeUnschedulable, NodeAffinity (node selector + required affinity),
  TaintToleration (NoSchedule / NoExecute);
- NodeResourcesFit: cpu, memory, ephemeral-storage, extended resources, hugepages, pods;
- NodePorts: host port, protocol and host IP conflicts;
- InterPodAffinity, required terms both ways, with namespaces and namespace selectors;
- PodTopologySpread with DoNotSchedule, over eligible domains, with minDomains and the
  node affinity / taints policies.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from operators.allocator.nodes import NodeInfo
from operators.scheduling.model import AffinityTerm, Node, PodNeeds, SpreadConstraint
from operators.scheduling.resources import insufficient
from operators.scheduling.usage import ClusterUsage, NodeTotals

REASON_NODE_NAME = "node(s) didn't match the requested node name"
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_PORTS = "node(s) didn't have free ports for the requested pod ports"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_SPREAD = "node(s) didn't match pod topology spread constraints"
REASON_SPREAD_LABEL = (
    "node(s) didn't match pod topology spread constraints (missing required label)"
)

_UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}

NamespaceLabels = Callable[[str], Mapping[str, str]]
TopologyPair = tuple[str, str]


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """core/v1 toleration matching (an empty key with Exists tolerates every taint)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if operator == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(
    node: Node, tolerations: Iterable[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint of the node the pod does not tolerate."""
    tolerations = tuple(tolerations)
    for taint in node.taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def taint_reason(taint: Mapping[str, Any]) -> str:
    return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"


def matches_node_affinity(pod: PodNeeds, node: Node, info: NodeInfo | None = None) -> bool:
    """NodeAffinity: the node selector and the required node affinity."""
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return False
    if pod.node_affinity is None:
        return True
    return pod.node_affinity.matches(info or node.info())


@dataclasses.dataclass(frozen=True)
class _Spread:
    constraint: SpreadConstraint
    counts: Mapping[str, int]
    minimum: int
    self_match: int


@dataclasses.dataclass
class PodFilter:
    """The per-node verdict for one pod, with its PreFilter work done (see prepare)."""

    pod: PodNeeds
    usage: ClusterUsage
    key: Hashable | None = None
    check_resources: bool = True
    spread: tuple[_Spread, ...] = ()
    repelled: frozenset[TopologyPair] = frozenset()
    affinity_counts: Mapping[TopologyPair, int] = dataclasses.field(default_factory=dict)
    anti_counts: Mapping[TopologyPair, int] = dataclasses.field(default_factory=dict)
    first_of_group: bool = False

    def reasons(
        self, node: Node, info: NodeInfo | None = None, totals: NodeTotals | None = None
    ) -> list[str]:
        """Why the scheduler would not bind the pod to ``node`` (empty: it would). ``totals``:
        what the node's pods hold, if not what ``usage`` counts (preemption's what-if)."""
        pod = self.pod
        if pod.node_name and pod.node_name != node.name:
            return [REASON_NODE_NAME]
        if node.unschedulable and not any(tolerates(t, _UNSCHEDULABLE) for t in pod.tolerations):
            return [REASON_UNSCHEDULABLE]
        if not matches_node_affinity(pod, node, info):
            return [REASON_NODE_AFFINITY]
        taint = untolerated_taint(node, pod.tolerations)
        if taint is not None:
            return [taint_reason(taint)]
        reasons: list[str] = []
        totals = totals if totals is not None else self.usage.on_node(node.name)
        # A pod we assumed here already counts here (a retry): not twice.
        here = self.key is not None and self.key in totals.members
        if self.check_resources and node.allocatable:
            used, count = totals.requested, totals.pods
            if here:
                used = {n: v - pod.requests.get(n, 0) for n, v in used.items()}
                count -= 1
            reasons += insufficient(pod.requests, node.allocatable, used, count)
        if pod.host_ports and totals.port_conflict(pod.host_ports, pod.host_ports if here else ()):
            reasons.append(REASON_PORTS)
        if reasons:
            return reasons
        reason = self._inter_pod(node)
        if reason:
            return [reason]
        return self._spread(node)

    def _inter_pod(self, node: Node) -> str:
        labels = node.labels
        if self.repelled and any(pair in self.repelled for pair in labels.items()):
            return REASON_EXISTING_ANTI_AFFINITY
        if self.pod.affinity:
            exists = True
            for term in self.pod.affinity:
                domain = labels.get(term.topology_key)
                if domain is None:
                    return REASON_AFFINITY
                if self.affinity_counts.get((term.topology_key, domain), 0) <= 0:
                    exists = False
            if not exists and not self.first_of_group:
                return REASON_AFFINITY
        for term in self.pod.anti_affinity:
            domain = labels.get(term.topology_key)
            if domain is not None and self.anti_counts.get((term.topology_key, domain), 0) > 0:
                return REASON_ANTI_AFFINITY
        return ""

    def _spread(self, node: Node) -> list[str]:
        for spread in self.spread:
            value = node.labels.get(spread.constraint.topology_key)
            if value is None:
                return [REASON_SPREAD_LABEL]
            skew = spread.counts.get(value, 0) + spread.self_match - spread.minimum
            if skew > spread.constraint.max_skew:
                return [REASON_SPREAD]
        return []


def prepare(
    pod: PodNeeds,
    usage: ClusterUsage,
    nodes: Iterable[Node],
    namespace_labels: NamespaceLabels,
    *,
    key: Hashable | None = None,
    check_resources: bool = True,
) -> PodFilter:
    """PreFilter: the counts the pod's inter-pod and spread rules need, over the cluster.

    Pods without such rules pay only for the anti-affinity of existing pods (usually none,
    and then nothing at all); the others walk the pods counted in ``usage`` once.
    """
    nodes = list(nodes) if (usage.repelling or pod.inter_pod or pod.spread) else []
    node_labels = {node.name: node.labels for node in nodes}
    own_ns_labels = namespace_labels(pod.namespace)
    repelled: set[TopologyPair] = set()
    for other_key, (node_name, other) in usage.repelling.items():
        if other_key == key:
            continue
        labels = node_labels.get(node_name)
        if labels is None:
            continue
        for term in other.anti_affinity:
            if term.matches(pod.namespace, pod.labels, own_ns_labels):
                value = labels.get(term.topology_key)
                if value is not None:
                    repelled.add((term.topology_key, value))
    affinity_counts: collections.Counter[TopologyPair] = collections.Counter()
    anti_counts: collections.Counter[TopologyPair] = collections.Counter()
    first_of_group = False
    if pod.inter_pod:
        for other_key, node_name, other in usage.placed():
            if other_key == key:
                continue
            labels = node_labels.get(node_name)
            if labels is None:
                continue
            ns_labels = _ns_labels(pod.affinity + pod.anti_affinity, other, namespace_labels)
            if pod.affinity and all(
                t.matches(other.namespace, other.labels, ns_labels) for t in pod.affinity
            ):
                for term in pod.affinity:
                    value = labels.get(term.topology_key)
                    if value is not None:
                        affinity_counts[(term.topology_key, value)] += 1
            for term in pod.anti_affinity:
                if term.matches(other.namespace, other.labels, ns_labels):
                    value = labels.get(term.topology_key)
                    if value is not None:
                        anti_counts[(term.topology_key, value)] += 1
        # The first pod of a group that wants to be with its own kind may go anywhere
        # the topology labels exist: nobody it could join exists yet.
        first_of_group = (
            bool(pod.affinity)
            and not affinity_counts
            and all(t.matches(pod.namespace, pod.labels, own_ns_labels) for t in pod.affinity)
        )
    return PodFilter(
        pod=pod,
        usage=usage,
        key=key,
        check_resources=check_resources,
        spread=_spread_counts(pod, usage, nodes, key),
        repelled=frozenset(repelled),
        affinity_counts=dict(affinity_counts),
        anti_counts=dict(anti_counts),
        first_of_group=first_of_group,
    )


def _ns_labels(
    terms: tuple[AffinityTerm, ...], other: PodNeeds, namespace_labels: NamespaceLabels
) -> Mapping[str, str]:
    if any(t.needs_namespace_labels for t in terms):
        return namespace_labels(other.namespace)
    return {}


def _spread_counts(
    pod: PodNeeds, usage: ClusterUsage, nodes: list[Node], key: Hashable | None
) -> tuple[_Spread, ...]:
    if not pod.spread:
        return ()
    keys = [c.topology_key for c in pod.spread]
    out = []
    for constraint in pod.spread:
        counts: dict[str, int] = {}
        for node in nodes:
            # Only nodes with every constraint's key are domains (as the scheduler counts).
            if any(k not in node.labels for k in keys):
                continue
            if constraint.honor_node_affinity and not matches_node_affinity(pod, node):
                continue
            if constraint.honor_node_taints and untolerated_taint(node, pod.tolerations):
                continue
            value = node.labels[constraint.topology_key]
            matching = 0
            # An empty selector counts no other pod (as the scheduler counts), yet the pod
            # matches it itself.
            if constraint.selector is not None and constraint.selector.requirements:
                for other_key, other in usage.on_node(node.name).members.items():
                    if (
                        other_key != key
                        and other.namespace == pod.namespace
                        and not other.deleting
                        and constraint.selector.matches(other.labels)
                    ):
                        matching += 1
            counts[value] = counts.get(value, 0) + matching
        minimum = min(counts.values()) if counts else 0
        if len(counts) < constraint.min_domains:
            minimum = 0
        self_match = int(
            constraint.selector is not None and constraint.selector.matches(pod.labels)
        )
        out.append(_Spread(constraint, counts, minimum, self_match))
    return tuple(out)
