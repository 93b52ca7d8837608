"""Whether a pod may run on a node at all, before any device is considered.

kube-scheduler decides this in a real cluster; the toolkit needs the same answer to say
"node X was not considered because ...". Only the predicates that commonly exclude nodes are
checked: nodeName, nodeSelector, required node affinity, NoSchedule/NoExecute node taints
and cordoned nodes. CPU and memory are out of scope (a kwok or real scheduler owns them).
"""

from __future__ import annotations

from dataclasses import dataclass

from operators.allocator.nodes import NodeInfo, NodeSelector, NodeSelectorError
from operators.toolkit.pods import PodInfo
from operators.toolkit.snapshot import NodeEntry


@dataclass(frozen=True)
class NodeFit:
    node: str
    fits: bool
    reason: str = ""


def node_info(entry: NodeEntry | None, name: str) -> NodeInfo:
    labels = dict(entry.labels) if entry is not None else {"kubernetes.io/hostname": name}
    return NodeInfo(name=name, labels=labels)


def pod_fits_node(pod: PodInfo, name: str, entry: NodeEntry | None) -> NodeFit:
    """Check the pod's own constraints; ``entry`` is None when the snapshot has no Nodes."""
    if pod.node_name and pod.node_name != name:
        return NodeFit(name, False, f"pod is bound to node {pod.node_name}")
    if entry is None:
        return NodeFit(name, True)  # labels and taints unknown: do not guess
    for key, value in pod.node_selector.items():
        if entry.labels.get(key) != value:
            return NodeFit(name, False, f"node selector {key}={value} does not match")
    if pod.required_affinity:
        try:
            selector = NodeSelector.parse(pod.required_affinity)
        except NodeSelectorError as exc:
            return NodeFit(name, False, f"invalid node affinity: {exc}")
        if selector.terms and not selector.matches(node_info(entry, name)):
            return NodeFit(name, False, "required node affinity does not match")
    if not pod.node_name:
        if entry.unschedulable:
            return NodeFit(name, False, "node is cordoned (unschedulable)")
        for taint in entry.taints:
            if taint.effect not in ("NoSchedule", "NoExecute"):
                continue
            if not any(t.tolerates(taint.key, taint.value, taint.effect) for t in pod.tolerations):
                shown = f"{taint.key}={taint.value}" if taint.value else taint.key
                return NodeFit(name, False, f"untolerated node taint {shown}:{taint.effect}")
    return NodeFit(name, True)
