"""The aggregated explanation and the node pin of the allocator loop (the node filters
themselves are tested in tests/unit/scheduling)."""

from __future__ import annotations

from typing import Any

from operators.controllers import placerules


def test_summary_orders_by_count_then_reason() -> None:
    reasons = ['no free device of class "a100" (need 2)'] * 480 + ["node affinity mismatch"] * 20
    assert placerules.summarize(500, reasons) == (
        '0/500 nodes: 480 no free device of class "a100" (need 2), 20 node affinity mismatch'
    )
    assert placerules.summarize(3, ["b", "a", "c"]) == "0/3 nodes: 1 a, 1 b, 1 c"
    assert placerules.summarize(0, []) == "0/0 nodes: no nodes in the cluster"


def test_pin_affinity_adds_to_every_term() -> None:
    requirement = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    assert placerules.pin_affinity(None, "n1") == {
        "nodeSelectorTerms": [{"matchFields": [requirement]}]
    }
    existing: dict[str, Any] = {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]},
    ]}  # fmt: skip
    pinned = placerules.pin_affinity(existing, "n1")
    assert all(requirement in term["matchFields"] for term in pinned["nodeSelectorTerms"])
    assert (
        pinned["nodeSelectorTerms"][0]["matchExpressions"]
        == existing["nodeSelectorTerms"][0]["matchExpressions"]
    )
    assert placerules.pin_affinity(pinned, "n1") == pinned  # idempotent
