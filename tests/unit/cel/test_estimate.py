"""The static estimate is upstream's, and no evaluation counts more than it.

Every expected number below is upstream's ``MaxCost`` for the expression (from
the differential test against k8s.io/dynamic-resource-allocation/cel at the
testbed's version, or from issue #22), compiled as a new expression with the
given DRAListTypeAttributes setting.
"""

from __future__ import annotations

import pytest

from operators.cel import CELCostError, DeviceView, compile_selector

D = "dra.example.com"
ATTR = f'device.attributes["{D}"]'
OTHER = 'device.attributes["other.example.com"]'
UNKNOWN = 2**64 - 1


@pytest.mark.parametrize(
    ("expression", "list_attributes", "upstream"),
    [
        # The sets extension: the product of the two sizes.
        (f"sets.equivalent({ATTR}.li, {OTHER}.li)", False, 8201),
        (
            f"sets.equivalent({ATTR}.missing, lists.range(1).transformList(i, v, i + v))",
            False,
            171,
        ),
        (
            'sets.intersects(device.driver.split("").map(s, s.size()), '
            f"[{ATTR}.n].transformList(i, v, i + v))",
            False,
            1012,
        ),
        (f"sets.intersects(lists.range(10) + {ATTR}.li.distinct(), lists.range(3))", True, 20562),
        # A string() conversion has no size bound.
        ('semver("1", true).isGreaterThan(semver(string(true)))', True, 1844674407370955267),
        ('lists.range(10).exists(v, string(v).matches("1") && v < 0)', False, UNKNOWN),
        # The dearer branch of a conditional.
        (f'false ? {ATTR}.s : "1.5".matches("^A[0-9]+$")', False, 4),
        (f'quantity("0").isLessThan(device.capacity["{D}"].?mem.orValue(quantity("0")))', False, 8),
        (
            f"lists.range(5).filter(a, [{ATTR}.?i.orValue(-1)].exists(b, a + b < 0) || true)"
            ".distinct().size() > 1",
            False,
            275,
        ),
        ("lists.range(300).all(a, lists.range(300).exists(b, a + b < 0) || true)", False, 814812),
        # The elements a map() or filter() produces keep their size bound.
        (f"[{ATTR}.n].map(x, string(x)).exists(s, s.contains({ATTR}.m))", False, 104),
        (
            "sets.equivalent(lists.range(1).transformList(i, v, i + v), "
            f"[{ATTR}.i].filter(x, x > {ATTR}.?i.orValue(-1)).filter(x, x == x))",
            False,
            125,
        ),
    ],
)
def test_estimate_is_upstreams(expression: str, list_attributes: bool, upstream: int) -> None:
    selector = compile_selector(expression, list_attributes=list_attributes, check_cost=False)
    assert selector.estimated_cost == upstream


def test_an_unbounded_comparison_is_over_the_limit() -> None:
    # Semver values have no size: upstream's != is estimated at a tenth of 2**64.
    selector = compile_selector('semver("1.0.0") != semver("2.0.0")', check_cost=False)
    assert selector.estimated_cost > 10**18


@pytest.mark.parametrize(
    "expression",
    [
        f'false ? {ATTR}.s : "1.5".matches("^A[0-9]+$")',
        f'true ? "1.5".matches("^A[0-9]+$") : {ATTR}.s == "x"',
        f'{ATTR}.s.startsWith("x") || {ATTR}.s.matches("[a-z]+") && "abc".contains({ATTR}.s)',
        f"{ATTR}.li.filter(x, x > 1).map(x, x * 2).exists_one(x, x == 4)",
        f"{ATTR}.li.transformMap(i, v, v + i).size() > 0 && sets.contains({ATTR}.li, [1])",
    ],
)
def test_actual_cost_never_exceeds_the_estimate(expression: str) -> None:
    selector = compile_selector(expression, list_attributes=True, check_cost=False)
    device = DeviceView.build(D, {"s": "abcdefghijklmnopqrstuvwxyz", "li": [1, 2, 3]}, {}, False)
    _, actual = selector.evaluate_with_cost(device)
    assert 0 < actual <= selector.estimated_cost


def test_fixed_costs_over_the_limit_stop_before_anything_runs() -> None:
    selector = compile_selector(f"{ATTR}.b && {ATTR}.c", check_cost=False)
    with pytest.raises(CELCostError, match="actual cost limit exceeded"):
        selector.evaluate(DeviceView.build(D, {"b": True, "c": True}, {}, False), cost_limit=7)
    assert selector.evaluate(DeviceView.build(D, {"b": True, "c": True}, {}, False), cost_limit=8)
