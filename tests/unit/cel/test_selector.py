from __future__ import annotations

import pytest

from operators.cel import (
    CELCompileError,
    CELCostError,
    CELEvalError,
    DeviceView,
    compile_selector,
)
from operators.cel import selector as selector_module

DRIVER = "dra.example.com"
DEVICE = DeviceView.build(DRIVER, {"model": "A100", "cores": 80}, {"memory": "40Gi"}, True)


def test_compiled_selectors_are_cached() -> None:
    expression = 'device.driver == "cache-test"'
    first = compile_selector(expression)
    assert compile_selector(expression) is first
    assert compile_selector(expression, list_attributes=True) is not first


def test_failed_compiles_are_not_cached() -> None:
    before = selector_module.cache_size()
    for _ in range(2):
        with pytest.raises(CELCompileError, match="Syntax error"):
            compile_selector("device.driver ==")
    assert selector_module.cache_size() == before


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ('"text"', "must evaluate to bool or the unknown type, not string"),
        ("1 + 2", "must evaluate to bool or the unknown type, not int"),
        ("device.nope", "undefined field 'nope'"),
        ("unknown_var == 1", "undeclared reference to 'unknown_var'"),
        ("device.driver.noSuchFunction()", "undeclared reference to 'noSuchFunction'"),
        ("x" * 10241, "expression too long"),
    ],
)
def test_compile_errors(expression: str, message: str) -> None:
    with pytest.raises(CELCompileError, match=message):
        compile_selector(expression)


def test_non_bool_result_at_runtime() -> None:
    selector = compile_selector(f'device.attributes["{DRIVER}"].cores')
    with pytest.raises(CELEvalError, match="CEL result of type int could not be converted to bool"):
        selector.evaluate(DEVICE)


def test_errors_are_absorbed_by_or_but_not_by_and() -> None:
    missing = f'device.attributes["{DRIVER}"].missing'
    assert compile_selector(f"{missing} == 1 || true").evaluate(DEVICE) is True
    assert compile_selector(f"{missing} == 1 && false").evaluate(DEVICE) is False
    with pytest.raises(CELEvalError):
        compile_selector(f"{missing} == 1 && true").evaluate(DEVICE)


def test_runtime_cost_limit() -> None:
    selector = compile_selector("[1, 2, 3, 4].all(x, [1, 2, 3, 4].all(y, x * y > 0))")
    assert selector.evaluate(DEVICE) is True
    with pytest.raises(CELCostError, match="operation cancelled: actual cost limit exceeded"):
        selector.evaluate(DEVICE, cost_limit=20)


def test_cost_error_is_not_absorbed_by_or() -> None:
    loop = "[1, 2, 3].exists(x, [1, 2, 3].exists(y, x + y == 100))"
    with pytest.raises(CELCostError):
        compile_selector(f"{loop} || true").evaluate(DEVICE, cost_limit=10)


def test_estimated_cost_uses_device_size_limits() -> None:
    cheap = compile_selector('device.driver == "x"')
    per_attribute = compile_selector(f'device.attributes["{DRIVER}"].exists(k, k == "model")')
    assert cheap.estimated_cost < 10
    assert per_attribute.estimated_cost >= 32 * 3


def test_estimated_cost_rejects_expensive_selectors_unless_disabled() -> None:
    nested = "device.attributes.all(a, device.attributes.all(b, device.attributes.all(c, device.attributes.all(d, a == d))))"
    with pytest.raises(CELCompileError, match="too complex, exceeds cost limit"):
        compile_selector(nested)
    assert compile_selector(nested, check_cost=False).evaluate(DEVICE) is True


def test_typical_selectors() -> None:
    cases = {
        f'device.driver == "{DRIVER}"': True,
        f'device.attributes["{DRIVER}"].model == "A100" && device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0': True,
        f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("40Gi"))': False,
        f'device.attributes["{DRIVER}"].cores >= 64 && device.allowMultipleAllocations': True,
        f'device.attributes["{DRIVER}"].model.lowerAscii().startsWith("a1")': True,
        f'device.attributes["{DRIVER}"].model.matches("^A[0-9]+$")': True,
    }
    for expression, expected in cases.items():
        assert compile_selector(expression).evaluate(DEVICE) is expected, expression
