"""Size-aware cost: operations are charged by operand size before they allocate."""

from __future__ import annotations

import contextlib
import tracemalloc
from typing import Any

import pytest

from operators.cel import (
    CELCompileError,
    CELCostError,
    CELError,
    CELEvalError,
    DeviceView,
    compile_selector,
    evaluate,
)
from operators.cel.costs import traversal
from tests.steps import step_limit

BIG = "x" * 2_000_000


def doubling(seed: str, levels: int, body: str = "size(v{n}) > 0") -> str:
    expression = body.format(n=levels)
    for level in range(levels, 0, -1):
        expression = f"cel.bind(v{level}, v{level - 1} + v{level - 1}, {expression})"
    return expression.replace("v0 ", f"{seed} ").replace("v0,", f"{seed},")


def shared_nesting(levels: int, body: str) -> str:
    """``[v, v]`` nested: cheap to build, 2**levels leaves when walked."""
    expression = body.format(n=levels)
    for level in range(levels, 0, -1):
        expression = (
            f"cel.bind(v{level}, [v{level - 1}, v{level - 1}], "
            f"cel.bind(w{level}, [w{level - 1}, w{level - 1}], {expression}))"
        )
    return expression.replace("v0", "[1]").replace("w0", "[1]")


#: Calls an expression stopped by the cost limit may make (the largest case makes ~245,000),
#: and memory it may hold at once: a charge that comes after the work, or never, runs past
#: one of them (a loop in calls, one big allocation in bytes).
STOPPED_STEPS = 500_000
STOPPED_BYTES = 32 << 20


def compiled(expression: str, bindings: dict[str, Any] | None = None) -> None:
    """Compile (and cache) the expression, so that steps count its evaluation alone."""
    with contextlib.suppress(CELError):
        evaluate(expression, bindings or {}, cost_limit=0)


def _stopped_quickly(expression: str, bindings: dict[str, Any] | None = None) -> None:
    compiled(expression, bindings)
    tracemalloc.start()
    try:
        with (
            step_limit(STOPPED_STEPS),
            pytest.raises(CELCostError, match="actual cost limit exceeded"),
        ):
            evaluate(expression, bindings or {})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < STOPPED_BYTES, f"peak {peak} bytes before the cost limit stopped it"


@pytest.mark.parametrize(
    "expression",
    [
        doubling("'seed'", 40),
        doubling("['seed']", 40),
        doubling("b'seed'", 40),
        "size(lists.range(1000000000)) > 0",
        "size('%.999999999f'.format([1.0])) > 0",
        doubling("'ab'", 14, "size(v{n}.replace('', v{n})) > 0"),
        doubling("'ab'", 19, "size(v{n}.split('')) > 0"),
        doubling("'ab'", 19, "size(v{n}.findAll('.')) > 0"),
        doubling("['ab']", 18, "size([v{n}, v{n}, v{n}].flatten()) > 0"),
        doubling("'ab'", 20, "size([v{n}, v{n}, v{n}].join('')) > 0"),
        doubling("'ab'", 17, "lists.range(100000).exists(i, v{n} != w)"),
        shared_nesting(40, "v{n} == w{n}"),
        shared_nesting(40, "v{n} in [w{n}]"),
        shared_nesting(40, "size(v{n}.flatten(40)) > 0"),
        shared_nesting(40, "size('%s'.format([v{n}])) > 0"),
        "lists.range(20000).distinct().size() > 0",
    ],
    ids=[
        "string doubling",
        "list doubling",
        "bytes doubling",
        "lists.range",
        "format precision",
        "replace growth",
        "split pieces",
        "findAll pieces",
        "flatten copies",
        "join copies",
        "long comparisons in a loop",
        "shared-structure equality",
        "shared-structure membership",
        "shared-structure flatten",
        "shared-structure format",
        "quadratic distinct",
    ],
)
def test_size_bombs_hit_the_cost_limit(expression: str) -> None:
    _stopped_quickly(expression, {"w": "ab" * 2**17})


def test_cost_is_charged_before_the_result_is_allocated() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(CELCostError):
            evaluate("s + s", {"s": BIG}, cost_limit=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(BIG) // 2, f"peak {peak} bytes: the concatenation ran"


@pytest.mark.parametrize(
    ("expression", "cheap_limit"),
    [
        ("s + s", 400_001),
        ("s == t", 200_001),
        ("s.contains('y')", 200_001),
        ("s.lowerAscii() == 'x'", 200_001),
        ("s.matches('y')", 200_001),
    ],
)
def test_charges_scale_with_size(expression: str, cheap_limit: int) -> None:
    bindings = {"s": BIG, "t": BIG[:-1] + "y"}
    with pytest.raises(CELCostError):
        evaluate(expression, bindings, cost_limit=cheap_limit - 10)
    evaluate(expression, bindings, cost_limit=cheap_limit + 10)
    small = {"s": "x" * 20, "t": "x" * 19 + "y"}
    evaluate(expression, small, cost_limit=20)


def test_work_bounded_by_a_literal_is_not_charged_by_size() -> None:
    assert evaluate("s.startsWith('xx') && s != 'x'", {"s": BIG}, cost_limit=10) is True
    with pytest.raises(CELCostError):
        evaluate("s.startsWith(t)", {"s": BIG, "t": BIG}, cost_limit=10)


def test_shared_results_stay_shared_when_returned() -> None:
    compiled(shared_nesting(40, "v{n}"))
    with step_limit(500_000):  # ~242,000; copying the 2**40 leaves would not end
        result = evaluate(shared_nesting(40, "v{n}"))
    inner = result
    for _ in range(39):  # the innermost pair are two separate literals
        assert inner[0] is inner[1]
        inner = inner[0]
    assert inner == [[1], [1]]


def test_traversal_of_shared_structure_counts_every_path() -> None:
    value: list[Any] = ["ab"]
    for _ in range(60):
        value = [value, value]
    assert traversal(value) > 2**60


def test_sum_refuses_strings() -> None:
    with pytest.raises(CELEvalError, match="no matching overload"):
        evaluate("['a', 'b'].sum()")


def test_doubling_selectors_are_refused_at_compile_time() -> None:
    with pytest.raises(CELCompileError, match="too complex, exceeds cost limit"):
        compile_selector(doubling("device.driver", 32))
    assert compile_selector(doubling("device.driver", 3)).estimated_cost < 1000


def test_list_doubling_passes_the_estimate_and_stops_at_run_time() -> None:
    """Upstream's list concatenation is lazy and costs 1, so its estimate accepts a
    doubling list; ours copies, and the work bound stops it when it runs."""
    selector = compile_selector(doubling("[device.driver]", 40))
    assert selector.estimated_cost < 1000
    with pytest.raises(CELCostError, match="actual cost limit exceeded"):
        selector.evaluate(DeviceView.build("gpu.example.com", {}, {}, False))


def test_estimate_follows_sizes() -> None:
    def cost(expression: str) -> int:
        return compile_selector(expression, check_cost=False).estimated_cost

    assert cost('"d" in device.attributes') <= 5
    assert cost("device.driver + device.driver == device.driver") > cost(
        'device.driver + "x" == device.driver'
    )
    assert cost('device.driver.matches("^[a-z]+[.]example[.]com$")') > cost(
        'device.driver.matches("^a$")'
    )
    assert cost("lists.range(100000).all(i, true)") > 100_000
