"""The static type checker refuses at compile time what upstream's checker refuses.

Each refused expression below was verified against upstream (cel-go with the
Kubernetes libraries and the DRA declarations): the API server refuses a claim
or class with it, so dralloc must refuse it when compiling, not evaluate it.
"""

from __future__ import annotations

import pytest

from operators.cel import CELCompileError, DeviceView, compile_selector
from operators.cel import types as t
from operators.cel.checker import Declarations, check
from operators.cel.parser import parse

D = "dra.example.com"
ATTR = f'device.attributes["{D}"]'


@pytest.mark.parametrize(
    ("expression", "list_attributes", "message"),
    [
        ('[1, "a"].size() == 2', False, "expected type 'int' but found 'string'"),
        (f"[1, {ATTR}.i].size() == 2", True, "expected type 'int' but found 'dyn'"),
        (f"[1, {ATTR}.i].size() == 2", False, "expected type 'int' but found 'any'"),
        ('{"a": 1, "b": "x"}.size() == 2', False, "expected type 'int' but found 'string'"),
        ("1 == 1.0", False, "found no matching overload for '_==_' applied to '(int, double)'"),
        ("2u != 0", False, "found no matching overload for '_!=_' applied to '(uint, int)'"),
        ('"gpu".startsWith(1)', False, "no matching overload for 'startsWith'"),
        (
            f"(8 / {ATTR}.?i.orValue(-1))",
            True,
            "must evaluate to bool or the unknown type, not int",
        ),
        ('quantity("1").sign() == 1', False, "no matching overload for 'sign'"),
        ('"abc".reverse() == "cba"', False, "no matching overload for 'reverse'"),
        ('string(quantity("1Gi")) == "1Gi"', False, "no matching overload for 'string'"),
        ('string(semver("1.0.0")) == "1.0.0"', False, "no matching overload for 'string'"),
        ("1 && true", False, "expected type 'bool' but found 'int'"),
        ("[1, 2].all(x, x)", False, "expected type 'bool' but found 'int'"),
        ("[1, 2].exists_one(x, x + 1)", False, "no matching overload for '_?_:_'"),
        (f"{ATTR}.names.exists(x, true)", False, "cannot be range of a comprehension"),
        ("true ? 1 : 'a'", False, "no matching overload for '_?_:_'"),
        ("device.driver.size", False, "type 'string' does not support field selection"),
        ("device.nothing == 1", False, "undefined field 'nothing'"),
        ("dyn(true)", False, "must evaluate to bool or the unknown type, not dyn"),
        # Upstream's format validator: literal format strings against literal arguments.
        (
            f'"%s-%d".format([device.driver, {ATTR}.i]) == ""',
            False,
            "decimal clause can only be used on integers, was given google.protobuf.Any",
        ),
        ('"%d".format([1, 2]) == ""', False, "too many arguments supplied to string.format"),
        ('"%d %d".format([1]) == ""', False, "index 1 out of range"),
        # A free type parameter is bound by the first overload (in cel-go's order) that
        # accepts it: -x of an unknown element is a double, x + dyn a bytes.
        (
            "sets.contains([lists.range(0), lists.range(0)].flatten(), [].map(x, -x))",
            False,
            "found no matching overload for 'sets.contains' applied to '(list(int), list(double))'",
        ),
        (
            f"{ATTR}.li.slice(0, 1).all(x, x + {ATTR}.n != 0)",
            True,
            "found no matching overload for '_!=_' applied to '(bytes, int)'",
        ),
    ],
)
def test_upstream_type_errors_are_compile_errors(
    expression: str, list_attributes: bool, message: str
) -> None:
    with pytest.raises(CELCompileError, match=r"compilation failed|must evaluate") as raised:
        compile_selector(expression, list_attributes=list_attributes, check_cost=False)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("expression", "list_attributes"),
    [
        (f"{ATTR}.i > 0", False),
        (f"{ATTR}.i", False),
        (f"{ATTR}.i", True),
        ("dyn(true)", True),
        ("1 < 1.5 && 2u > 1 && 1.0 <= 2u", False),
        ("[1, 2].map(x, x * 2).size() == 2", False),
        ("[1, 2].transformList(i, v, v + i)[0] == 1", False),
        ('{"a": 1}.transformMap(k, v, v + 1)["a"] == 2', False),
        ('"%s %d".format(["a", 1]) == "a 1"', False),
        (f'"%s-%d".format([device.driver, {ATTR}.i]) == ""', True),
        (f"cel.bind(d, {ATTR}, d.i > 0 && d.s == 'x')", False),
        (f"{ATTR}.?i.orValue(0) == 0", False),
        (f"{ATTR}[?'i'].hasValue() || true", False),
        ("optional.of(1).optMap(x, x + 1).value() == 2", False),
        (f"{ATTR}.names.exists(x, x == 1)", True),
        (f"{ATTR}.names.includes(1)", True),
        ("has(device.attributes.x) || device.capacity.all(d, d != '')", False),
        (f"{D!r} in device.attributes && 1 in [1, 2]", False),
        ("[].size() == 0 && {}.size() == 0", False),
        ("lists.range(3).sum() == 3 && sets.contains([1, 2], [1])", False),
        ('device.capacity["d"].mem.isGreaterThan(quantity("1Gi"))', False),
        ('ip("10.0.0.1").family() == 4 && cidr("10.0.0.0/8").containsIP("10.1.2.3")', False),
        ("type(1) == int && timestamp('2020-01-01T00:00:00Z') < timestamp(1)", False),
    ],
)
def test_well_typed_selectors_compile(expression: str, list_attributes: bool) -> None:
    compile_selector(expression, list_attributes=list_attributes, check_cost=False)


def test_types_are_available_to_later_passes() -> None:
    tree = parse('cel.bind(n, [1, 2].map(x, x * 2), n[0] + 1) > 0 && "a" + "b" == "ab"')
    checked = check(tree, Declarations(variables={}))
    assert checked.result == t.BOOL
    assert t.list_of(t.INT) in checked.types.values()
    assert ("add_string",) in checked.overloads.values()


def test_a_checked_selector_still_evaluates() -> None:
    selector = compile_selector(f"{ATTR}.names.exists(x, x > 1)", list_attributes=True)
    assert selector.evaluate(DeviceView.build(D, {"names": [1, 2]}, {}, False)) is True
