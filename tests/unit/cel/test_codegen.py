"""What the generated code folds, as upstream's optimized programs fold it.

Kubernetes plans selectors with cel.OptOptimize: lists and maps of constants are
built once, a conversion of a constant is evaluated when the program is planned
(a failing one refuses the expression), and ``x in [constants]`` is a set lookup
that is false for an empty list without evaluating ``x``.
"""

from __future__ import annotations

import pytest

from operators.cel import CELCompileError, DeviceView, compile_selector

D = "dra.example.com"
DEVICE = DeviceView.build(D, {"i": 1}, {}, False)


@pytest.mark.parametrize(
    "expression", ['int("") == 0', "int(1e308) > 0", 'cel.bind(u, int("x"), true)']
)
def test_a_failing_constant_conversion_is_refused_at_compile_time(expression: str) -> None:
    with pytest.raises(CELCompileError, match=r"^program instantiation failed: "):
        compile_selector(expression, check_cost=False)


def test_membership_in_an_empty_constant_list_does_not_evaluate_the_element() -> None:
    selector = compile_selector(f'device.attributes["{D}"].missing in []', check_cost=False)
    assert selector.evaluate_with_cost(DEVICE) == (False, 0)
    assert compile_selector(f'device.attributes["{D}"].i in [1, 2]').evaluate(DEVICE) is True


def test_constant_lists_cost_nothing_at_run_time() -> None:
    # 3 iterations of (loop condition 2 + step 1 + predicate 2), the result 1; the constant
    # list is not built per evaluation.
    selector = compile_selector("[1, 2, 3].all(x, x > 0)")
    assert selector.evaluate_with_cost(DEVICE) == (True, 16)
    assert selector.estimated_cost == 26  # upstream's estimator counts the list (10)
