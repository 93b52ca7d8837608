"""Quantities, node selectors, capacity policy rounding and constraint stacks."""

from __future__ import annotations

import pytest

from operators.allocator.capacity import (
    consumed_amount,
    consumption,
    published_amounts,
    violates_policy,
)
from operators.allocator.compiled import (
    CapacityEntry,
    CompiledDevice,
    RequestPolicy,
    compile_device,
)
from operators.allocator.constraints import DistinctAttribute, MatchAttribute, _Scope
from operators.allocator.errors import CapacityRequestError
from operators.allocator.nodes import NodeInfo, NodeSelector, NodeSelectorError, merge_terms
from operators.allocator.quantities import to_nanos
from operators.api.quantity import NANO, Quantity, QuantityParseError


@pytest.mark.parametrize(
    ("value", "nanos"),
    [
        ("1Gi", 1024**3 * NANO),
        ("1.5", 1_500_000_000),
        ("100m", 100_000_000),
        ("1e3", 1000 * NANO),
        ("-4", -4 * NANO),
        (7, 7 * NANO),
        (0.25, 250_000_000),
        (Quantity("2k"), 2000 * NANO),
    ],
)
def test_amounts_are_exact_nano_units(value: object, nanos: int) -> None:
    assert to_nanos(value) == nanos


def test_amounts_reject_garbage() -> None:
    with pytest.raises(QuantityParseError):
        to_nanos("ten")
    with pytest.raises(QuantityParseError):
        to_nanos(None)


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
    two, four = 2 * NANO, 4 * NANO
    ranged = CapacityEntry(
        Quantity("10"),
        RequestPolicy(default=two, range_min=two, range_max=four, range_step=two, has_range=True),
    )
    assert consumed_amount(None, ranged) == two
    assert consumed_amount(1 * NANO, ranged) == two
    assert consumed_amount(3 * NANO, ranged) == four
    assert violates_policy(6 * NANO, ranged.policy)
    values = CapacityEntry(Quantity("3"), RequestPolicy(default=1, valid_values=(1, 3)))
    assert consumed_amount(2, values) == 3
    assert consumed_amount(5, values) == 5 and violates_policy(5, values.policy)
    plain = CapacityEntry(Quantity("8"), None)
    assert consumed_amount(None, plain) == 8 * NANO


def test_fractional_range_steps_follow_the_gate() -> None:
    entry = CapacityEntry(
        Quantity("4"),
        RequestPolicy(range_min=to_nanos("100m"), range_step=to_nanos("250m"), has_range=True),
    )
    # DRAFractionalCapacityRange on: milli-units, exact.
    assert consumed_amount(to_nanos("0.4"), entry, fractional=True) == to_nanos("600m")
    assert not violates_policy(to_nanos("600m"), entry.policy, fractional=True)
    assert violates_policy(to_nanos("0.5"), entry.policy, fractional=True)
    assert violates_policy(to_nanos("350500u"), entry.policy, fractional=True)
    with pytest.raises(CapacityRequestError, match="milli-units"):
        consumed_amount(to_nanos("400500u"), entry, fractional=True)
    # Off (the default): min, step and request each count as one whole unit.
    assert consumed_amount(to_nanos("0.4"), entry) == NANO
    assert not violates_policy(to_nanos("0.5"), entry.policy)
    # On, but a step finer than a milli-unit: whole units again, as upstream.
    fine = CapacityEntry(
        Quantity("4"),
        RequestPolicy(range_min=to_nanos("1"), range_step=to_nanos("1u"), has_range=True),
    )
    assert consumed_amount(to_nanos("1.5"), fine, fractional=True) == 2 * NANO


def test_consumption_resolves_capacity_names_with_the_driver_domain() -> None:
    device = compile_device(
        "drv", "pool", "s", {"name": "d", "capacity": {"memory": {"value": "4Gi"}}}
    )
    gib = to_nanos("1Gi")
    assert consumption({"drv/memory": gib}, device) == {"drv/memory": gib}
    assert consumption({"other.example/memory": 1}, device) is None
    assert published_amounts({"drv/memory": gib}, device) == {"memory": Quantity("1Gi")}
    assert str(published_amounts({"drv/memory": gib}, device)["memory"]) == "1Gi"


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
