"""What upstream's API server refuses in the selectors of a new or changed class, claim or
template: its field paths, its error kinds, new-expression mode and its update rules."""

from __future__ import annotations

from typing import Any

from operators.api import DeviceClass, ResourceClaim, ResourceClaimTemplate, parse_object
from operators.cel.admission import invalid_message, refused_selectors

GROUP_VERSION = "resource.dralloc.dev/v1"
GOOD = 'device.driver == "gpu.example.com"'
SYNTAX = "device.driver =="
COSTLY = 'semver("1.0.0") != semver("2.0.0")'  # upstream's estimate ~1.8e18


def selectors(*expressions: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": e}} for e in expressions]


def device_class(*expressions: str) -> DeviceClass:
    body = {"apiVersion": GROUP_VERSION, "kind": "DeviceClass", "metadata": {"name": "c"}}
    model = parse_object({**body, "spec": {"selectors": selectors(*expressions)}})
    assert isinstance(model, DeviceClass)
    return model


def claim_spec(exactly: list[str], alternatives: list[str]) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": "a",
                    "exactly": {"deviceClassName": "c", "selectors": selectors(*exactly)},
                },
                {
                    "name": "b",
                    "firstAvailable": [
                        {"name": "x", "deviceClassName": "c"},
                        {
                            "name": "y",
                            "deviceClassName": "c",
                            "selectors": selectors(*alternatives),
                        },
                    ],
                },
            ]
        }
    }


def claim(exactly: list[str], alternatives: list[str]) -> ResourceClaim:
    meta = {"name": "k", "namespace": "n"}
    body = {"apiVersion": GROUP_VERSION, "kind": "ResourceClaim", "metadata": meta}
    model = parse_object({**body, "spec": claim_spec(exactly, alternatives)})
    assert isinstance(model, ResourceClaim)
    return model


def test_every_selector_is_named_by_upstreams_field_path() -> None:
    problems = refused_selectors(claim([GOOD, SYNTAX], [COSTLY]))
    assert [(p.path, p.kind) for p in problems] == [
        ("spec.devices.requests[0].exactly.selectors[1].cel.expression", "Invalid value"),
        ("spec.devices.requests[1].firstAvailable[1].selectors[0].cel.expression", "Forbidden"),
    ]
    assert str(problems[1]).endswith("Forbidden: too complex, exceeds cost limit")
    meta = {"name": "t", "namespace": "n"}
    template = parse_object(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "ResourceClaimTemplate",
            "metadata": meta,
            "spec": {"spec": claim_spec([SYNTAX], [])},
        }
    )
    assert isinstance(template, ResourceClaimTemplate)
    (problem,) = refused_selectors(template)
    assert problem.path == "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression"


def test_the_message_is_the_api_servers() -> None:
    (problem,) = refused_selectors(device_class("1 == 1.0"))
    message = invalid_message("DeviceClass", "resource.dralloc.dev", "c", [problem])
    assert message.startswith(
        'DeviceClass.resource.dralloc.dev "c" is invalid: spec.selectors[0].cel.expression: '
        'Invalid value: "1 == 1.0": compilation failed: ERROR: <input>:'
    ), message
    assert "found no matching overload for '_==_' applied to '(int, double)'" in message
    two = refused_selectors(device_class(SYNTAX, COSTLY))
    assert invalid_message("DeviceClass", "g", "c", two).count("spec.selectors[") == 2


def test_new_expressions_honour_the_gates() -> None:
    multiple = device_class("device.allowMultipleAllocations")
    assert refused_selectors(multiple) == []
    (problem,) = refused_selectors(multiple, consumable_capacity=False)
    assert "undefined field 'allowMultipleAllocations'" in problem.detail


def test_too_long_is_counted_in_bytes_and_not_compiled() -> None:
    long = '"' + "é" * 5200 + '" != ""'  # 10,409 bytes, 5,207 characters
    (problem,) = refused_selectors(device_class(long))
    assert str(problem) == (
        "spec.selectors[0].cel.expression: Too long: may not be more than 10240 bytes"
    )


def test_an_update_with_the_same_selectors_is_not_checked_again() -> None:
    stored = device_class(COSTLY)
    assert refused_selectors(device_class(COSTLY), stored) == []
    # Any change (here a reordering) makes every selector of the class new again.
    changed = device_class(GOOD, COSTLY)
    assert len(refused_selectors(changed, device_class(COSTLY, GOOD))) == 1
    # A claim's spec is immutable: an update never brings new expressions.
    assert refused_selectors(claim([SYNTAX], []), claim([SYNTAX], [])) == []


def derived_claim(*expressions: str) -> ResourceClaim:
    """One request computing ``example.com/d{i}`` from each expression, each name matched by
    a constraint (the API server wants every derived attribute used)."""
    names = [f"example.com/d{i}" for i in range(len(expressions))]
    exactly = {
        "deviceClassName": "c",
        "derivedAttributes": [
            {"name": n, "expression": e} for n, e in zip(names, expressions, strict=True)
        ],
    }
    spec = {
        "devices": {
            "requests": [{"name": "a", "exactly": exactly}],
            "constraints": [{"matchAttribute": n} for n in names],
        }
    }
    meta = {"name": "k", "namespace": "n"}
    body = {"apiVersion": GROUP_VERSION, "kind": "ResourceClaim", "metadata": meta, "spec": spec}
    model = parse_object(body)
    assert isinstance(model, ResourceClaim)
    return model


# About 680,000 estimated: under the limit alone, over it twice (upstream adds them up).
HALF_COSTLY = "lists.range(40000).filter(x, x % 2 == 0).size()"


def test_derived_attributes_are_checked_as_new_expressions() -> None:
    at = "spec.devices.requests[0].exactly.derivedAttributes"
    assert refused_selectors(derived_claim('device.attributes["gpu.example.com"].model')) == []
    [bad] = refused_selectors(derived_claim(SYNTAX))
    assert (bad.path, bad.kind) == (f"{at}[0].expression", "Invalid value")
    [scalar] = refused_selectors(derived_claim("device.attributes"))
    assert (scalar.path, scalar.kind) == (f"{at}[0].expression", "Invalid value")
    assert "must evaluate to a primitive scalar" in scalar.detail
    # Over the limit alone, and so over the claim's total too (upstream says both).
    costly, total = refused_selectors(derived_claim(GOOD, COSTLY))
    assert (costly.path, costly.kind) == (f"{at}[1].expression", "Forbidden")
    assert costly.detail == "too complex, exceeds cost limit"
    assert (total.path, total.kind) == ("spec.devices", "Forbidden")


def test_derived_attributes_costs_add_up_per_claim() -> None:
    assert refused_selectors(derived_claim(HALF_COSTLY)) == []
    [total] = refused_selectors(derived_claim(HALF_COSTLY, HALF_COSTLY))
    assert (total.path, total.kind) == ("spec.devices", "Forbidden")
    assert "total cost of derived attribute CEL expressions" in str(total)
