from __future__ import annotations

import dataclasses

import pytest

from operators.cel import (
    CELCompileError,
    CELEvalError,
    DeviceView,
    Quantity,
    Semver,
    compile_selector,
)

DRIVER = "gpu.example.com"


def _device(**attributes: object) -> DeviceView:
    return DeviceView.build(DRIVER, attributes, {"memory": "80Gi"}, None)


def test_unqualified_names_go_to_the_driver_domain() -> None:
    view = DeviceView.build(DRIVER, {"model": "A100", "other.io/zone": "a"}, {}, False)
    assert view.attributes[DRIVER]["model"] == "A100"
    assert view.attributes["other.io"]["zone"] == "a"


def test_unknown_domain_is_an_empty_map() -> None:
    view = _device(model="A100")
    assert dict(view.attributes["unknown.domain"]) == {}
    assert "unknown.domain" not in view.attributes
    assert compile_selector('device.attributes["unknown.domain"].size() == 0').evaluate(view)


def test_capacity_is_parsed_into_quantities() -> None:
    view = _device()
    assert view.capacity[DRIVER]["memory"] == Quantity("80Gi")


def test_allow_multiple_allocations_defaults_to_false() -> None:
    assert _device().allow_multiple_allocations is False


def test_view_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        _device().driver = "x"  # type: ignore[misc]


def test_missing_identifier_carries_the_optional_chaining_hint() -> None:
    selector = compile_selector(f'device.attributes["{DRIVER}"].missing == 1')
    with pytest.raises(CELEvalError) as raised:
        selector.evaluate(_device(model="A100"))
    message = str(raised.value)
    assert message.startswith("no such key: missing")
    assert ".? followed by orValue()" in message and "has()" in message


def test_guards_avoid_the_missing_key_error() -> None:
    view = _device(model="A100")
    for expression in (
        f'has(device.attributes["{DRIVER}"].missing) && device.attributes["{DRIVER}"].missing',
        f'device.attributes["{DRIVER}"].?missing.orValue(false)',
        f'"missing" in device.attributes["{DRIVER}"] && device.attributes["{DRIVER}"].missing',
    ):
        assert compile_selector(expression).evaluate(view) is False


def test_list_attributes_are_visible_with_the_gate_off() -> None:
    # Upstream's DeviceMatches hands list values to CEL whatever the gate (a slice may keep
    # them from a time it was on); the gate only decides what compiles (``includes``, the
    # attribute type of a new expression).
    view = _device(links=["nvlink", "pcie"])
    assert compile_selector("true").evaluate(view) is True
    size = f'device.attributes["{DRIVER}"].links.size() == 2'
    for stored in (False, True):
        selector = compile_selector(size, stored=stored)
        assert selector.evaluate(view) is True
        assert selector.evaluate_with_cost(view) == (True, 6)
    with pytest.raises(CELCompileError, match="undeclared reference to 'includes'"):
        compile_selector(f'device.attributes["{DRIVER}"].links.includes("pcie")')
    selector = compile_selector(
        f'device.attributes["{DRIVER}"].links.includes("pcie")', list_attributes=True
    )
    assert selector.evaluate(view) is True


def test_attribute_without_a_supported_value_fails_evaluation() -> None:
    view = _device(broken=None)
    with pytest.raises(CELEvalError, match="attribute broken: unsupported attribute value"):
        compile_selector("true").evaluate(view)


def test_versions_compare_as_semver() -> None:
    view = _device(version=Semver.parse("1.10.0"))
    expression = f'device.attributes["{DRIVER}"].version.isGreaterThan(semver("1.9.0"))'
    assert compile_selector(expression).evaluate(view) is True


def test_device_bound_to_another_name() -> None:
    view = _device(model="A100")
    assert compile_selector(f'cel.bind(d, device, d.driver == "{DRIVER}")').evaluate(view)


def test_unparsable_capacity_fails_evaluation_not_the_build() -> None:
    view = DeviceView.build(DRIVER, {}, {"memory": "lots"}, False)
    with pytest.raises(CELEvalError, match="capacity memory"):
        compile_selector("true").evaluate(view)
