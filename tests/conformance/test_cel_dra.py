"""Upstream's DRA CEL cases: TestCEL in k8s.io/dynamic-resource-allocation/cel, v0.37.2.

All 71 cases of that version's table, by name, with their expressions, devices, feature
gates, environments and expectations. Each runs as upstream runs it: with every
combination of the two gates (DRAConsumableCapacity, DRAListTypeAttributes) and in both
environments, unless the case pins them. Upstream's "NewExpressions" environment is
``compile_selector`` with the gates as given; "StoredExpressions" is ``stored=True``,
which declares every field and function whatever the gates. Neither refuses an expression
for its estimated cost here, as upstream's compiler does not (API validation compares the
estimate to the limit: ``test_expensive_is_rejected_by_the_estimate_for_new_expressions``).

On every run that compiles, the estimated cost must equal upstream's ``expectCost`` (0
where the case gives none, as upstream asserts) and the actual cost of the evaluation must
not exceed it; then the result or the runtime error must be upstream's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from operators.cel import (
    CELCompileError,
    CELCostError,
    CELEvalError,
    DeviceView,
    Quantity,
    Semver,
    compile_selector,
)
from tests.steps import step_limit

D = "dra.example.com"
#: Upstream's bound on an attribute value (characters or list items, whichever is larger).
MAX_ELEMENTS = 64
ATTR = f'device.attributes["{D}"]'
CAP = f'device.capacity["{D}"]'
BOMB = (
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(x, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(y, "
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z2, "
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z3, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z4, "
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z5, int('1'.find('[0-9]*')) < 100)))))))"
)

#: A case's pinned gates, (consumable capacity, list-type attributes). Upstream pins both
#: whenever it names one (the other is Go's zero value, off).
LISTS = (False, True)
CONSUMABLE = (True, False)
NO_FEATURES = (False, False)
NEW = "new-expressions"
STORED = "stored-expressions"


@dataclass(frozen=True)
class DRACase:
    expression: str
    driver: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    capacity: dict[str, Any] = field(default_factory=dict)
    allow_multiple_allocations: bool | None = None
    #: Pinned (consumable capacity, list-type attributes); None: all four combinations.
    features: tuple[bool, bool] | None = None
    #: Pinned environment (NEW or STORED); None: both.
    env: str | None = None
    compile_error: str = ""
    match_error: str = ""
    match: bool = False
    #: Upstream's ``expectCost``: the estimate of every run that compiles.
    expect_cost: int = 0


def _semver(text: str) -> Semver:
    return Semver.parse(text)


_LONG_48 = [f"value-{i}" for i in range(48)]
_EXPENSIVE_ATTRIBUTES = {f"{D}/" + "x" * (32 - len(f"-{i}")) + f"-{i}": "abc" for i in range(32)}


def _includes(kind: str, value: str, attr: Any, match: bool, env: str | None = None) -> DRACase:
    # The target costs 4 and ``includes`` on a dyn target its size bound; a semver()
    # argument costs 1 more.
    return DRACase(
        f"{ATTR}.name.includes({value})",
        driver=D,
        attributes={"name": attr},
        features=LISTS,
        env=env,
        match=match,
        expect_cost=4 + MAX_ELEMENTS + (1 if kind == "semver" else 0),
    )


CASES: dict[str, DRACase] = {
    "true": DRACase("true", match=True),
    "false": DRACase("false", match=False),
    "syntax-error": DRACase("?!", compile_error="Syntax error"),
    "type-error": DRACase("1", compile_error="must evaluate to bool or the unknown type, not int"),
    "runtime-error-lookup-identifier": DRACase(
        'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))',
        match_error="no such key: noSuchAttr",
        expect_cost=6,
    ),
    "runtime-error-lookup-map": DRACase(
        'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))',
        match_error="no such key: noSuchAttr",
        expect_cost=6,
    ),
    "domain-check-negative": DRACase(
        '"no-such-domain" in device.attributes', match=False, expect_cost=3
    ),
    "domain-check-positive": DRACase(
        f'"{D}" in device.attributes',
        attributes={f"{D}/something": True},
        match=True,
        expect_cost=3,
    ),
    "empty-driver-name": DRACase('device.driver == ""', match=True, expect_cost=2),
    "real-driver-name": DRACase(f'device.driver == "{D}"', driver=D, match=True, expect_cost=4),
    "driver-name-qualifier": DRACase(
        f"{ATTR}.name",
        driver=D,
        attributes={"name": True},
        match=True,
        expect_cost=4,
    ),
    "driver-name-qualifier-map-lookup": DRACase(
        f'{ATTR}["name"]',
        driver=D,
        attributes={"name": True},
        match=True,
        expect_cost=4,
    ),
    "bind": DRACase(
        f"cel.bind(dra, {ATTR}, dra.name)",
        driver=D,
        attributes={"name": True},
        match=True,
        expect_cost=15,
    ),
    "qualified-attribute-name": DRACase(
        'device.attributes["other.example.com"].name',
        driver=D,
        attributes={"other.example.com/name": True},
        match=True,
        expect_cost=4,
    ),
    "bool": DRACase(f"{ATTR}.name", driver=D, attributes={"name": True}, match=True, expect_cost=4),
    "int": DRACase(f"{ATTR}.name > 0", driver=D, attributes={"name": 1}, match=True, expect_cost=5),
    "string": DRACase(
        f'{ATTR}.name == "fish"', driver=D, attributes={"name": "fish"}, match=True, expect_cost=5
    ),
    "macro-compilation-error-new-expressions": DRACase(
        f"{ATTR}.ids.exists(id, id == 1)",
        driver=D,
        features=NO_FEATURES,
        env=NEW,
        compile_error="compilation failed",
    ),
    "macro-exists-on-int": DRACase(
        f"{ATTR}.name.exists(x, x > 0)",
        driver=D,
        attributes={"name": 1},
        features=LISTS,
        match_error="got 'types.Int', expected iterable type",
        expect_cost=5 + (3 + 3) * MAX_ELEMENTS,
    ),
    "macro-exists-on-bool": DRACase(
        f"{ATTR}.name.exists(x, x == true)",
        driver=D,
        attributes={"name": True},
        features=LISTS,
        match_error="got 'types.Bool', expected iterable type",
        expect_cost=5 + (3 + 3) * MAX_ELEMENTS,
    ),
    "macro-exists-on-string": DRACase(
        f'{ATTR}.name.exists(x, x == "fish")',
        driver=D,
        attributes={"name": "fish"},
        features=LISTS,
        match_error="got 'types.String', expected iterable type",
        expect_cost=5 + (3 + 3) * MAX_ELEMENTS,
    ),
    "list-result-type-causes-match-error": DRACase(
        f"{ATTR}.names",
        driver=D,
        attributes={"names": ["fish", "bird"]},
        match_error="CEL result of type list could not be converted to bool",
        expect_cost=4,
    ),
    "includes-function-can-evaluate": DRACase(
        f'{ATTR}.name.includes("fish")',
        driver=D,
        attributes={"name": ["fish", "bird"]},
        features=LISTS,
        match=True,
        expect_cost=4 + MAX_ELEMENTS,
    ),
    "list-of-bool": DRACase(
        f"{ATTR}.names.size() == 2",
        driver=D,
        attributes={"names": [True, False]},
        match=True,
        expect_cost=6,
    ),
    "list-of-int": DRACase(
        f"{ATTR}.names.size() == 2",
        driver=D,
        attributes={"names": [1, 2]},
        match=True,
        expect_cost=6,
    ),
    "list-of-string": DRACase(
        f"{ATTR}.names.size() == 2",
        driver=D,
        attributes={"names": ["fish", "bird"]},
        match=True,
        expect_cost=6,
    ),
    "list-of-semver": DRACase(
        f"{ATTR}.names.size() == 2",
        driver=D,
        attributes={"names": [_semver("1.0.0"), _semver("2.0.0")]},
        match=True,
        expect_cost=6,
    ),
    "macro-on-list-of-int": DRACase(
        f"{ATTR}.names.exists(x, x > 0)",
        driver=D,
        attributes={"names": [1, 2]},
        features=LISTS,
        match=True,
        expect_cost=5 + (3 + 3) * MAX_ELEMENTS,
    ),
    "macro-on-list-of-string": DRACase(
        f'{ATTR}.names.all(x, x != "")',
        driver=D,
        attributes={"names": ["fish", "bird"]},
        features=LISTS,
        match=True,
        expect_cost=5 + (2 + 2) * MAX_ELEMENTS,
    ),
    "macro-on-list-of-semver": DRACase(
        f'{ATTR}.names.all(x, x.isGreaterThan(semver("0.0.1")))',
        driver=D,
        attributes={"names": [_semver("1.0.0"), _semver("2.0.0")]},
        features=LISTS,
        match=True,
        expect_cost=5 + (2 + 4) * MAX_ELEMENTS,
    ),
    "includes-function-compilation-error": DRACase(
        f'{ATTR}.attr.includes("fish")',
        driver=D,
        features=NO_FEATURES,
        env=NEW,
        compile_error="undeclared reference to 'includes'",
    ),
    "includes-function-compilation-and-eval-success": DRACase(
        f'{ATTR}.attr.includes("fish")',
        driver=D,
        attributes={"attr": "fish"},
        features=LISTS,
        match=True,
        expect_cost=4 + MAX_ELEMENTS,
    ),
    "includes-function-on-bool-scalar-positive": _includes("bool", "true", True, True),
    "includes-function-on-bool-scalar-negative": _includes("bool", "true", False, False, NEW),
    "includes-function-on-bool-list-positive": _includes("bool", "true", [True, False], True),
    "includes-function-on-bool-list-negative": _includes("bool", "false", [True, True], False),
    "includes-function-on-int-scalar-positive": _includes("int", "1", 1, True),
    "includes-function-on-int-scalar-negative": _includes("int", "1", 2, False),
    "includes-function-on-int-list-positive": _includes("int", "1", [1, 2], True),
    "includes-function-on-int-list-negative": _includes("int", "3", [1, 2], False),
    "includes-function-on-string-scalar-positive": _includes("string", '"fish"', "fish", True),
    "includes-function-on-string-scalar-negative": _includes("string", '"bird"', "fish", False),
    "includes-function-on-string-list-positive": _includes(
        "string", '"fish"', ["fish", "bird"], True
    ),
    "includes-function-on-string-list-negative": _includes(
        "string", '"cat"', ["fish", "bird"], False
    ),
    "includes-function-on-semver-scalar-positive": _includes(
        "semver", 'semver("1.0.0")', _semver("1.0.0"), True
    ),
    "includes-function-on-semver-scalar-negative": _includes(
        "semver", 'semver("2.0.0")', _semver("1.0.0"), False
    ),
    "includes-function-on-semver-list-positive": _includes(
        "semver", 'semver("1.0.0")', [_semver("1.0.0"), _semver("2.0.0")], True
    ),
    "includes-function-on-semver-list-negative": _includes(
        "semver", 'semver("3.0.0")', [_semver("1.0.0"), _semver("2.0.0")], False
    ),
    # Named "positive" upstream, but the list stops at value-47.
    "includes-function-on-very-long-list-positive": _includes(
        "string", '"value-48"', _LONG_48, False
    ),
    "in-operator-on-list": DRACase(
        f"1 in {ATTR}.names",
        driver=D,
        attributes={"names": [1, 2, 3]},
        match=True,
        expect_cost=4 + MAX_ELEMENTS,
    ),
    "version": DRACase(
        f'{ATTR}.name.isGreaterThan(semver("0.0.1"))',
        driver=D,
        attributes={"name": _semver("1.0.0")},
        match=True,
        expect_cost=6,
    ),
    "version_v": DRACase(
        f'{ATTR}.name.isGreaterThan(semver("v0.0.1", true)) && isSemver("v1.0.0", true)',
        driver=D,
        attributes={"name": _semver("1.0.0")},
        match=True,
        expect_cost=7,
    ),
    "macro-exists-on-version": DRACase(
        f'{ATTR}.name.exists(x, x.isGreaterThan(semver("0.0.1")))',
        driver=D,
        attributes={"name": _semver("1.0.0")},
        features=LISTS,
        match_error="got 'cel.Semver', expected iterable type",
        expect_cost=5 + (3 + 4) * MAX_ELEMENTS,
    ),
    "quantity": DRACase(
        f'{CAP}.name.isGreaterThan(quantity("1Ki"))',
        driver=D,
        capacity={"name": Quantity("1Mi")},
        match=True,
        expect_cost=6,
    ),
    "check-positive": DRACase(
        f'"name" in {CAP} && {CAP}.name.isGreaterThan(quantity("1Ki"))',
        driver=D,
        capacity={"name": Quantity("1Mi")},
        match=True,
        expect_cost=10,
    ),
    "check-negative": DRACase(
        f'!("name" in {CAP}) || {CAP}.name.isGreaterThan(quantity("1Ki"))',
        match=True,
        expect_cost=11,
    ),
    "all": DRACase(
        # Upstream's expression starts and ends with a newline.
        "\n"
        + " &&\n".join(
            [
                f'{CAP}.quantity.isGreaterThan(quantity("1Ki"))',
                f"{ATTR}.bool",
                f"{ATTR}.int > 0",
                f'{ATTR}.string == "fish"',
                f'{ATTR}.version.isGreaterThan(semver("0.0.1"))',
                f'{CAP}["quantity"].isGreaterThan(quantity("1Ki"))',
                f'{ATTR}["bool"]',
                f'{ATTR}["int"] > 0',
                f'{ATTR}["string"] == "fish"',
                f'{ATTR}["version"].isGreaterThan(semver("0.0.1"))',
            ]
        )
        + "\n",
        driver=D,
        attributes={"bool": True, "int": 1, "string": "fish", "version": _semver("1.0.0")},
        capacity={"quantity": Quantity("1Mi")},
        match=True,
        expect_cost=52,
    ),
    "many": DRACase(
        f"{ATTR}.a && {ATTR}.b && {ATTR}.c",
        driver=D,
        attributes={"a": True, "b": True, "c": True},
        match=True,
        expect_cost=12,
    ),
    "check_attribute_domains": DRACase(
        f'device.attributes.exists_one(x, x == "{D}")',
        driver=D,
        attributes={"services": "some_example_value"},
        match=True,
        expect_cost=164,
    ),
    "check_attribute_ids": DRACase(
        f'{ATTR}.exists_one(x, x == "services")',
        driver=D,
        attributes={"services": "some_example_value"},
        match=True,
        expect_cost=133,
    ),
    "split_attribute": DRACase(
        f'{ATTR}.services.split("example").size() >= 2',
        driver=D,
        attributes={"services": "some_example_value"},
        match=True,
        expect_cost=19,
    ),
    "regexp_attribute": DRACase(
        f'{ATTR}.services.matches("[^a]?sym")',
        driver=D,
        attributes={"services": "asymetric"},
        match=True,
        expect_cost=18,
    ),
    "check_capacity_domains": DRACase(
        f'device.capacity.exists_one(x, x == "{D}")',
        driver=D,
        capacity={"memory": Quantity("1Mi")},
        match=True,
        expect_cost=164,
    ),
    "check_capacity_ids": DRACase(
        f'{CAP}.exists_one(x, x == "memory")',
        driver=D,
        capacity={"memory": Quantity("1Mi")},
        match=True,
        expect_cost=133,
    ),
    "expensive": DRACase(
        BOMB,
        driver=D,
        attributes=_EXPENSIVE_ATTRIBUTES,
        match_error="actual cost limit exceeded",
        expect_cost=85555551,
    ),
    "allow_multiple_allocations": DRACase(
        "device.allowMultipleAllocations == true",
        driver=D,
        features=CONSUMABLE,
        allow_multiple_allocations=True,
        match=True,
        expect_cost=3,
    ),
    "allow_multiple_allocations_default": DRACase(
        "device.allowMultipleAllocations == false",
        driver=D,
        features=CONSUMABLE,
        allow_multiple_allocations=None,
        match=True,
        expect_cost=3,
    ),
    "allow_multiple_allocations_false": DRACase(
        "device.allowMultipleAllocations == false",
        driver=D,
        features=CONSUMABLE,
        allow_multiple_allocations=False,
        match=True,
        expect_cost=3,
    ),
    "allow_multiple_allocations_new": DRACase(
        "device.allowMultipleAllocations == false",
        driver=D,
        features=CONSUMABLE,
        allow_multiple_allocations=False,
        match=True,
        expect_cost=3,
    ),
    "allow_multiple_allocations_enabled": DRACase(
        "device.allowMultipleAllocations == false",
        driver=D,
        features=CONSUMABLE,
        allow_multiple_allocations=False,
        match=True,
        expect_cost=3,
    ),
    "allow_multiple_allocations_disabled": DRACase(
        "device.allowMultipleAllocations == false",
        driver=D,
        features=NO_FEATURES,
        env=NEW,
        compile_error="undefined field 'allowMultipleAllocations'",
    ),
}


def _runs() -> list[Any]:
    """Upstream's subtests: both gates, then the environment (unless the case pins them)."""
    params = []
    for name, case in CASES.items():
        combos = (
            [(c, lists) for lists in (True, False) for c in (True, False)]
            if case.features is None
            else [case.features]
        )
        envs = [NEW, STORED] if case.env is None else [case.env]
        for consumable, lists in combos:
            for env in envs:
                run = f"list-type-attributes={lists}/consumable-capacity={consumable}/{env}"
                params.append(pytest.param(case, consumable, lists, env, id=f"{name}/{run}"))
    return params


def _compile(case: DRACase, consumable: bool, lists: bool, env: str) -> Any:
    return compile_selector(
        case.expression,
        list_attributes=lists,
        consumable_capacity=consumable,
        stored=env == STORED,
        check_cost=False,
    )


@pytest.mark.parametrize(("case", "consumable", "lists", "env"), _runs())
def test_dra_cel_case(case: DRACase, consumable: bool, lists: bool, env: str) -> None:
    if case.compile_error:
        with pytest.raises(CELCompileError) as refused:
            _compile(case, consumable, lists, env)
        assert case.compile_error in str(refused.value)
        return
    selector = _compile(case, consumable, lists, env)
    # Upstream asserts its estimate on every case that compiles, and that no evaluation
    # costs more than it.
    assert selector.estimated_cost == case.expect_cost
    device = DeviceView.build(
        case.driver, case.attributes, case.capacity, case.allow_multiple_allocations
    )
    outcome, actual = selector.evaluate_with_cost(device)
    assert actual <= selector.estimated_cost
    if case.match_error:
        expected = CELCostError if "cost limit" in case.match_error else CELEvalError
        assert isinstance(outcome, expected) and case.match_error in str(outcome)
        with pytest.raises(expected) as raised:
            selector.evaluate(device)
        assert case.match_error in str(raised.value)
        return
    assert outcome is case.match
    assert selector.evaluate(device) is case.match


def test_run_count_is_upstreams() -> None:
    # Upstream's 71 cases: 37 run with the 4 gate combinations in both environments, 30 pin
    # the gates (both environments), 4 pin the gates and the environment.
    assert len(CASES) == 71
    assert len(_runs()) == 37 * 8 + 30 * 2 + 4


def test_includes_on_a_list_over_the_api_limit() -> None:
    # dralloc's own case (a slice the API server would refuse: 49 values, at most 48).
    values = [f"value-{i}" for i in range(49)]
    selector = compile_selector(f'{ATTR}.name.includes("value-49")', list_attributes=True)
    device = DeviceView.build(D, {"name": values}, {}, None)
    assert selector.evaluate(device) is False
    _, actual = selector.evaluate_with_cost(device)
    assert actual <= selector.estimated_cost


def test_expensive_is_rejected_by_the_estimate_for_new_expressions() -> None:
    with pytest.raises(CELCompileError, match="too complex, exceeds cost limit"):
        compile_selector(BOMB, check_cost=True)


def test_expensive_stops_quickly() -> None:
    selector = compile_selector(BOMB, check_cost=False)
    device = DeviceView.build(D, _EXPENSIVE_ATTRIBUTES, {}, False)
    # Counted in calls, not seconds: ~2,050,000 until the 1,000,000 cost units run out (upstream
    # builds the constant lists once, so an iteration costs 7); the whole 10**7 iterations
    # would make well over a hundred million.
    with (
        step_limit(2_500_000),
        pytest.raises(CELCostError, match="operation cancelled: actual cost limit exceeded"),
    ):
        selector.evaluate(device)


_FEATURE_SETS = {
    "no-features": (False, False),
    "consumable-capacity": (True, False),
    "list-type-attributes": (False, True),
    "all-features": (True, True),
}


@pytest.mark.parametrize("env", ["stored-expressions", "new-expressions"])
@pytest.mark.parametrize("features", list(_FEATURE_SETS))
def test_environment_matrix(env: str, features: str) -> None:
    """New expressions see only what the gates enable; stored ones see everything."""
    consumable, lists = _FEATURE_SETS[features]
    stored = env == "stored-expressions"
    device = DeviceView.build(D, {"name": 2}, {}, True)
    multi = "device.allowMultipleAllocations"
    includes = f"{ATTR}.name.includes(2)"
    options = {"list_attributes": lists, "consumable_capacity": consumable, "stored": stored}
    for expression, available in ((multi, consumable or stored), (includes, lists or stored)):
        if available:
            assert compile_selector(expression, **options).evaluate(device) is True
        else:
            with pytest.raises(CELCompileError):
                compile_selector(expression, **options)
