"""Candidate nodes and the aggregated explanation of the allocator loop."""

from __future__ import annotations

from typing import Any

from operators.allocator.nodes import NodeSelector
from operators.cache.core import parse_node, parse_pod
from operators.controllers import placement


def node(name: str, labels: dict[str, str] | None = None, **spec: Any) -> Any:
    return parse_node({"metadata": {"name": name, "labels": labels or {}}, "spec": spec})


def pod(**spec: Any) -> Any:
    return parse_pod({"metadata": {"namespace": "ns", "name": "p", "uid": "u"}, "spec": spec})


def test_selector_affinity_taints_and_unschedulable() -> None:
    p = pod(
        nodeSelector={"zone": "a"},
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}},
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
    )  # fmt: skip
    affinity = placement.pod_affinity(p)
    ok = node(
        "n1",
        {"zone": "a", "gpu": "1"},
        taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
    )
    assert placement.node_rejection(p, ok, affinity, []) == ""
    assert (
        placement.node_rejection(p, node("n2", {"zone": "b", "gpu": "1"}), affinity, [])
        == placement.REASON_AFFINITY
    )
    assert (
        placement.node_rejection(p, node("n3", {"zone": "a"}), affinity, [])
        == placement.REASON_AFFINITY
    )
    tainted = node(
        "n4", {"zone": "a", "gpu": "1"}, taints=[{"key": "broken", "effect": "NoExecute"}]
    )
    assert placement.node_rejection(p, tainted, affinity, []) == "untolerated node taint {broken}"
    cordoned = node("n5", {"zone": "a", "gpu": "1"}, unschedulable=True)
    assert placement.node_rejection(p, cordoned, affinity, []) == placement.REASON_UNSCHEDULABLE
    prefer = node(
        "n6", {"zone": "a", "gpu": "1"}, taints=[{"key": "x", "effect": "PreferNoSchedule"}]
    )
    assert placement.node_rejection(p, prefer, affinity, []) == ""


def test_allocated_claims_pin_the_candidates() -> None:
    selector = NodeSelector.for_node("n2")
    assert (
        placement.node_rejection(pod(), node("n1"), None, [selector])
        == placement.REASON_CLAIM_ELSEWHERE
    )
    assert placement.node_rejection(pod(), node("n2"), None, [selector]) == ""


def test_tolerations() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert placement.tolerates({"operator": "Exists"}, taint)
    assert placement.tolerates({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, taint)
    assert not placement.tolerates({"key": "k", "operator": "Exists", "effect": "NoExecute"}, taint)
    assert placement.tolerates({"key": "k", "value": "v"}, taint)
    assert not placement.tolerates({"key": "k", "value": "w"}, taint)


def test_summary_orders_by_count_then_reason() -> None:
    reasons = ['no free device of class "a100" (need 2)'] * 480 + [placement.REASON_AFFINITY] * 20
    assert placement.summarize(500, reasons) == (
        '0/500 nodes: 480 no free device of class "a100" (need 2), 20 node affinity mismatch'
    )
    assert placement.summarize(3, ["b", "a", "c"]) == "0/3 nodes: 1 a, 1 b, 1 c"
    assert placement.summarize(0, []) == "0/0 nodes: no nodes in the cluster"


def test_pin_affinity_adds_to_every_term() -> None:
    requirement = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    assert placement.pin_affinity(None, "n1") == {
        "nodeSelectorTerms": [{"matchFields": [requirement]}]
    }
    existing: dict[str, Any] = {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]},
    ]}  # fmt: skip
    pinned = placement.pin_affinity(existing, "n1")
    assert all(requirement in term["matchFields"] for term in pinned["nodeSelectorTerms"])
    assert (
        pinned["nodeSelectorTerms"][0]["matchExpressions"]
        == existing["nodeSelectorTerms"][0]["matchExpressions"]
    )
    assert placement.pin_affinity(pinned, "n1") == pinned  # idempotent
