"""Parts of an expression nested deeper than Python allows in one function go into local
functions of their own (``codegen._DEEPEST``): the same results, errors and costs.

Each expression here is compiled twice, as written and with every part below the top in a
local function of its own (the limit lowered to one level), and run on several inputs with
a cost limit each would pass and one it would not.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest

from operators.cel import CELCompileError, CELError, DeviceView, compile_selector, evaluate
from operators.cel import selector as selector_module
from operators.cel.codegen import Environment, _Codegen
from operators.cel.program import compile_program
from operators.cel.semantics import to_cel

EXPRESSIONS = [
    "x.all(a, a > 0) && x.exists(b, b == 2) || y == 'z'",
    "x.map(a, a * 2).filter(b, b > 2).size() == 2 ? 'two' : y + '!'",
    "x.exists_one(a, a == 1) && [x, x].all(l, l.all(a, [1].exists(c, c <= a)))",
    "cel.bind(s, x.map(a, a + 1), s.exists(a, a == 4) ? s : [])",
    "has(m.k) ? m.k.split(',').map(n, n.trim()).exists(n, n == y) : false",
    "m.?k.orValue('none') == 'a, b' || x.all(a, a / (a - 1) > 0)",
    "x.transformList(i, v, v + i).all(a, a > 0) && m.transformMap(k, v, k + v).size() > 0",
    "(x.size() > 2 ? x[5] : 0) == 0 || x.all(a, a > 0)",
    "[1, 2].all(a, [3, 4].all(b, [5].all(c, [6].all(d, a + b + c + d > 0))))",
]
INPUTS: list[dict[str, Any]] = [
    {"x": [1, 2, 3], "y": "z", "m": {"k": "a, b"}},
    {"x": [2], "y": "b", "m": {}},
    {"x": [], "y": "", "m": {"k": "q"}},
]


def outcome(program: Any, variables: dict[str, Any], limit: int) -> tuple[Any, ...]:
    assert program.costed is not None
    try:
        return ("value", *program.costed(variables, limit))
    except CELError as error:
        return ("error", type(error).__name__, str(error), getattr(error, "actual_cost", None))


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_a_part_in_a_local_function_costs_and_answers_the_same(
    expression: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = Environment(variables=frozenset({"x", "y", "m"}), checked=False)
    written = compile_program(expression, env)
    monkeypatch.setattr(_Codegen, "_DEEPEST", 1)
    hoisted = compile_program(expression, env)
    assert "nonlocal _cost" in hoisted.source and "nonlocal" not in written.source
    for bindings in INPUTS:
        variables = {name: to_cel(value) for name, value in bindings.items()}
        full = outcome(written, variables, 1_000_000)
        assert outcome(hoisted, variables, 1_000_000) == full, bindings
        if full[0] == "value" and full[2] > 1:  # and just under what it costs
            limit = full[2] - 1
            assert outcome(hoisted, variables, limit) == outcome(written, variables, limit)


def test_a_device_selector_in_local_functions_costs_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    device = DeviceView.build("d.example.com", {"i": 3, "s": "a"}, {}, False)
    expression = (
        "device.attributes['d.example.com'].i > 2 && "
        "[1, 2].all(a, [3].exists(b, device.attributes['d.example.com'].s == 'a' || b > a))"
    )
    written = compile_selector(expression, check_cost=False)
    monkeypatch.setattr(selector_module, "_cache", OrderedDict())  # compile again
    monkeypatch.setattr(_Codegen, "_DEEPEST", 1)
    hoisted = compile_selector(expression, check_cost=False)
    assert hoisted is not written
    result, cost = written.evaluate_with_cost(device)
    assert result is True and cost > 0
    assert hoisted.evaluate_with_cost(device) == (result, cost)


def test_deeply_nested_macros_evaluate_as_cel_go_does() -> None:
    """Twelve nested macros were refused as nesting too deeply (Python's 20 blocks in one
    function); cel-go takes them, and so does an admission policy's inlined condition."""
    nested = "true"
    for depth in range(12):
        nested = f"[1].all(v{depth}, {nested})"
    assert evaluate(nested) is True
    chained = " && ".join(
        f"[{i}].exists(a{i}, a{i} == {i} ? [a{i}].all(b, b >= 0) : false)" for i in range(15)
    )
    assert evaluate(f"[0].all(z, {chained})") is True


def test_nesting_beyond_what_python_can_indent_is_still_a_compile_error() -> None:
    nested = "true"
    for depth in range(60):
        nested = f"[1].all(v{depth}, {nested})"
    with pytest.raises(CELCompileError, match="nests too deeply"):
        evaluate(nested)
