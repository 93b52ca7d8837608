"""Quantities, node selectors, capacity policy rounding and constraint stacks."""

from __future__ import annotations

from fractions import Fraction

import pytest

from operators.allocator.capacity import consumed_amount, consumption, violates_policy
from operators.allocator.compiled import (
    CapacityEntry,
    CompiledDevice,
    RequestPolicy,
    compile_device,
)
from operators.allocator.constraints import DistinctAttribute, MatchAttribute, _Scope
from operators.allocator.nodes import NodeInfo, NodeSelector, NodeSelectorError, merge_terms
from operators.allocator.quantities import QuantityError, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Gi", 1024**3),
        ("1.5", Fraction(3, 2)),
        ("100m", Fraction(1, 10)),
        ("2k", 2000),
        ("1e3", 1000),
        ("-4", -4),
    ],
)
def test_parse_quantity(text: str, value: object) -> None:
    assert parse_quantity(text) == value


def test_parse_quantity_rejects_garbage() -> None:
    with pytest.raises(QuantityError):
        parse_quantity("ten")


def test_format_quantity_round_trips() -> None:
    for value, binary in ((4 * 1024**3, True), (2000, False), (Fraction(1, 10), False), (7, False)):
        assert parse_quantity(format_quantity(value, binary)) == value
    assert format_quantity(80 * 1024**3, binary=True) == "80Gi"


def test_node_selector_semantics() -> None:
    node = NodeInfo("n1", {"zone": "a", "size": "8"})
    selector = NodeSelector.parse(
        {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                {
                    "matchExpressions": [{"key": "size", "operator": "Gt", "values": ["4"]}],
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
                },
            ]
        }
    )
    assert selector.matches(node)
    assert not selector.matches(NodeInfo("n2", {"size": "8"}))
    assert not NodeSelector.parse({"nodeSelectorTerms": [{}]}).matches(
        node
    )  # empty term matches nothing
    with pytest.raises(NodeSelectorError):
        NodeSelector.parse(
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]}
        )


def test_merge_terms_deduplicates_and_rejects_multi_term() -> None:
    a = NodeSelector.parse(
        {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "z", "operator": "In", "values": ["1", "2"]}]}
            ]
        }
    )
    b = NodeSelector.parse(
        {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "z", "operator": "In", "values": ["2", "1"]}]}
            ]
        }
    )
    merged = merge_terms([a, b])
    assert merged is not None and len(merged.terms[0].match_expressions) == 1
    assert merge_terms([]) is None
    with pytest.raises(NodeSelectorError, match="with 2 terms"):
        merge_terms([NodeSelector(a.terms + b.terms)])


def test_capacity_policy_rounding() -> None:
    ranged = CapacityEntry(
        10,
        RequestPolicy(default=2, range_min=2, range_max=4, range_step=2, has_range=True),
        False,
        "10",
    )
    assert consumed_amount(None, ranged) == 2
    assert consumed_amount(1, ranged) == 2
    assert consumed_amount(3, ranged) == 4
    assert violates_policy(6, ranged.policy)
    values = CapacityEntry(3, RequestPolicy(default=1, valid_values=(1, 3)), False, "3")
    assert consumed_amount(2, values) == 3
    assert consumed_amount(5, values) == 5 and violates_policy(5, values.policy)
    plain = CapacityEntry(8, None, False, "8")
    assert consumed_amount(None, plain) == 8


def test_consumption_resolves_capacity_names_with_the_driver_domain() -> None:
    device = compile_device(
        "drv", "pool", "s", {"name": "d", "capacity": {"memory": {"value": "4Gi"}}}
    )
    assert consumption({"drv/memory": 1024**3}, device) == {"drv/memory": 1024**3}
    assert consumption({"other.example/memory": 1}, device) is None


def test_match_and_distinct_constraints_undo_cleanly() -> None:
    def dev(name: str, value: int) -> CompiledDevice:
        return compile_device(
            "drv", "pool", "s", {"name": name, "attributes": {"x": {"int": value}}}
        )

    match = MatchAttribute(_Scope(frozenset()), "drv/x", lists=False)
    a, b, c = dev("a", 1), dev("b", 1), dev("c", 2)
    assert match.add("r", None, a) and match.add("r", None, b)
    assert not match.add("r", None, c)
    match.remove("r", None, b)
    match.remove("r", None, a)
    assert match.add("r", None, c)  # a fresh reference value
    distinct = DistinctAttribute(_Scope(frozenset()), "drv/x", lists=False)
    # Three devices in one request: every pair is compared, not just the last one.
    assert distinct.add("r", None, a) and distinct.add("r", None, c)
    assert not distinct.add("r", None, b)
