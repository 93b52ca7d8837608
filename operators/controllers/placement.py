"""Pure placement rules of the allocator loop: which nodes a pod may go to, and why not.

kube-scheduler will only bind a pod where its node selector, required node affinity and
taint tolerations allow, so the allocator must choose its node among the same candidates;
otherwise it would pin the pod to a node the scheduler refuses. Reasons for rejected nodes
are counted and rendered like the scheduler's and the allocator's explanations
(``0/5 nodes: 3 ..., 2 ...``), so users read one familiar message.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from typing import Any

from operators.allocator.nodes import NodeInfo, NodeSelector, NodeSelectorError
from operators.cache.core import Node, Pod

REASON_UNSCHEDULABLE = "node unschedulable"
REASON_AFFINITY = "node affinity mismatch"
REASON_CLAIM_ELSEWHERE = "allocated claim not available on the node"


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """core/v1 toleration matching (an empty effect or key with Exists matches all)."""
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
    tolerations = list(tolerations)
    for taint in node.taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def taint_reason(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    shown = f"{taint.get('key')}: {value}" if value else str(taint.get("key"))
    return f"untolerated node taint {{{shown}}}"


def pod_affinity(pod: Pod) -> NodeSelector | None:
    """The pod's required node affinity as a selector (None = no constraint)."""
    if not pod.required_affinity:
        return None
    try:
        return NodeSelector.parse(pod.required_affinity)
    except NodeSelectorError:
        return NodeSelector(())  # unparsable: matches nothing, as the scheduler would refuse


def node_rejection(
    pod: Pod,
    node: Node,
    affinity: NodeSelector | None,
    claim_selectors: Iterable[NodeSelector],
    *,
    info: NodeInfo | None = None,
) -> str:
    """Why the pod cannot go to this node ('' = it may).

    ``info`` is the node's allocator view when the caller already has it (per pod, per
    node: building it again sorts the labels each time).
    """
    if node.unschedulable:
        return REASON_UNSCHEDULABLE
    if info is None:
        info = NodeInfo(node.name, node.labels)
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return REASON_AFFINITY
    if affinity is not None and not affinity.matches(info):
        return REASON_AFFINITY
    taint = untolerated_taint(node, pod.tolerations)
    if taint is not None:
        return taint_reason(taint)
    for selector in claim_selectors:
        if not selector.matches(info):
            return REASON_CLAIM_ELSEWHERE
    return ""


def summarize(total: int, reasons: Iterable[str]) -> str:
    """``0/N nodes: 3 reason-a, 2 reason-b`` (largest count first, then by reason)."""
    counts = collections.Counter(reasons)
    if total == 0:
        return "0/0 nodes: no nodes in the cluster"
    parts = [
        f"{count} {reason}" for reason, count in sorted(counts.items(), key=lambda i: (-i[1], i[0]))
    ]
    return f"0/{total} nodes: {', '.join(parts)}"


def pin_affinity(required: Mapping[str, Any] | None, node_name: str) -> dict[str, Any]:
    """The required node affinity with every term narrowed to ``node_name``.

    Only additions of requirements are allowed on a gated pod's existing terms, so the
    node requirement is appended to each term rather than replacing anything.
    """
    requirement = {"key": "metadata.name", "operator": "In", "values": [node_name]}
    terms = [dict(term) for term in (required or {}).get("nodeSelectorTerms") or ()]
    if not terms:
        return {"nodeSelectorTerms": [{"matchFields": [requirement]}]}
    for term in terms:
        fields = list(term.get("matchFields") or ())
        if requirement not in fields:
            fields.append(requirement)
        term["matchFields"] = fields
    return {"nodeSelectorTerms": terms}
