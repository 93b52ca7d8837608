"""Pure placement helpers of the allocator loop: the pin, and the rejection summary.

Which nodes kube-scheduler would take a pod on is :mod:`operators.scheduling`'s answer;
here the reasons for rejected nodes are counted and rendered like the scheduler's and the
allocator's explanations (``0/5 nodes: 3 ..., 2 ...``), so users read one familiar message,
and the chosen node is written into the pod's required node affinity.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from typing import Any

REASON_CLAIM_ELSEWHERE = "allocated claim not available on the node"
REASON_NODE_OPERATIONS = (
    "allocated claim needs a node declaring DRAOptionalNodeOperations (its devices skip "
    "node operations)"
)
REASON_REFUSED_HERE = "node(s) refused a pod of the same controller recently (kube-scheduler)"


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


class RecentRefusals:
    """Nodes kube-scheduler refused a controller's pod on, for a while: the controller's
    next pod (which dralloc would otherwise pin to the same node, deterministically) keeps
    off them, so a refusal dralloc cannot model does not become a delete-recreate loop."""

    def __init__(self) -> None:
        self._until: dict[tuple[str, str], dict[str, float]] = {}

    def add(self, namespace: str, controller: str, node: str, until: float) -> None:
        self._until.setdefault((namespace, controller), {})[node] = until

    def nodes(self, namespace: str, controller: str, now: float) -> set[str]:
        found = self._until.get((namespace, controller))
        if not found:
            return set()
        for node in [n for n, until in found.items() if until <= now]:
            del found[node]
        if not found:
            del self._until[(namespace, controller)]
        return set(found)
