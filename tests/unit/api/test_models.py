"""Parsing both API groups into the same models, round trips, and model helpers."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from operators.api import (
    DeviceClass,
    DeviceTaintRule,
    InvalidObjectError,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    limits,
    parse_object,
)
from operators.api.models import (
    DeviceAttribute,
    DeviceTaintRuleSpec,
    ExactDeviceRequest,
    Quantity,
    Semver,
)
from tests.unit.api import samples

EXPECTED_TYPES: dict[str, type] = {
    "device_class": DeviceClass,
    "claim": ResourceClaim,
    "claim_template": ResourceClaimTemplate,
    "slice": ResourceSlice,
    "advanced_slice": ResourceSlice,
    "counters_slice": ResourceSlice,
    "taint_rule": DeviceTaintRule,
}


@pytest.mark.parametrize("api_version", [samples.DRALLOC, samples.K8S])
@pytest.mark.parametrize("name", sorted(samples.ALL_SAMPLES))
def test_both_api_groups_parse_into_the_same_model(name: str, api_version: str) -> None:
    obj = samples.ALL_SAMPLES[name](api_version)
    model = parse_object(obj)
    assert type(model) is EXPECTED_TYPES[name]
    assert model.api_version == api_version


@pytest.mark.parametrize("api_version", [samples.DRALLOC, samples.K8S])
@pytest.mark.parametrize("name", sorted(samples.ALL_SAMPLES))
def test_round_trip_reproduces_the_kubernetes_json(name: str, api_version: str) -> None:
    obj = samples.ALL_SAMPLES[name](api_version)
    out = parse_object(obj).to_kube()
    assert out == obj
    # ...and is plain JSON (tuples became lists, quantities strings, times RFC 3339).
    assert json.loads(json.dumps(out)) == obj


def test_other_api_versions_and_kinds_are_refused_with_the_field() -> None:
    obj = samples.claim("resource.k8s.io/v1beta1")
    with pytest.raises(InvalidObjectError, match=r"apiVersion: must be one of"):
        parse_object(obj)
    obj = samples.claim()
    obj["kind"] = "Pod"
    with pytest.raises(InvalidObjectError, match=r"kind: must be one of"):
        parse_object(obj)


def test_unknown_fields_are_ignored() -> None:
    obj = samples.slice_()
    obj["metadata"]["managedFields"] = [{"manager": "x"}]
    obj["spec"]["devices"][0]["someFutureField"] = {"a": 1}
    model = parse_object(obj)
    assert "someFutureField" not in json.dumps(model.to_kube())


def test_models_are_frozen_and_hashable_where_scalar() -> None:
    claim = parse_object(samples.claim())
    assert isinstance(claim, ResourceClaim)
    with pytest.raises(ValueError, match="frozen"):
        claim.spec = claim.spec  # type: ignore[misc]
    result = claim.status.allocation.devices.results[0]  # type: ignore[union-attr]
    assert result.device_id == ("gpu.example.com", "node-1", "gpu-0")
    assert isinstance(claim.spec.devices.requests, tuple)


def test_snake_case_construction_serialises_with_kubernetes_names() -> None:
    request = ExactDeviceRequest(device_class_name="gpu", allocation_mode="All")
    assert request.to_kube() == {"deviceClassName": "gpu", "allocationMode": "All"}
    attribute = DeviceAttribute(int_value=3)
    assert attribute.to_kube() == {"int": 3}


def test_effective_defaults_match_the_api_server() -> None:
    assert ExactDeviceRequest(device_class_name="c").effective_count == 1
    assert ExactDeviceRequest(device_class_name="c").effective_allocation_mode == "ExactCount"
    assert ExactDeviceRequest(device_class_name="c", count=3).effective_count == 3
    assert ExactDeviceRequest(device_class_name="c", allocation_mode="All").effective_count == 0


def test_slice_values_are_typed() -> None:
    model = parse_object(samples.advanced_slice())
    assert isinstance(model, ResourceSlice)
    device = model.spec.devices[0]
    assert device.capacity["memory"].value == Quantity.parse("40Gi")
    policy = device.capacity["memory"].request_policy
    assert policy is not None and policy.valid_range is not None
    assert policy.valid_range.step == Quantity.parse("1Gi")
    assert device.attributes["tags"].value == ("a", "b")
    assert device.attributes["tags"].is_list
    assert device.uses_advanced_features
    plain = parse_object(samples.slice_())
    assert isinstance(plain, ResourceSlice)
    attributes = plain.spec.devices[1].attributes
    assert attributes["index"].value == 1
    assert attributes["example.com/healthy"].value is True
    assert attributes["driverVersion"].value == Semver.parse("1.2.3-rc.1")
    assert not plain.spec.devices[1].uses_advanced_features


def test_taint_rule_selector_semantics() -> None:
    rule = parse_object(samples.taint_rule())
    assert isinstance(rule, DeviceTaintRule)
    assert rule.spec.matches("gpu.example.com", "node-1", "gpu-0")
    assert not rule.spec.matches("gpu.example.com", "node-1", "gpu-1")
    # Upstream's documented meaning for in-tree objects: no selector matches nothing,
    # an empty selector matches every device.
    no_selector = DeviceTaintRuleSpec.model_validate({"taint": {"key": "k", "effect": "None"}})
    assert not no_selector.matches("d", "p", "x")
    empty = DeviceTaintRuleSpec.model_validate(
        {"deviceSelector": {}, "taint": {"key": "k", "effect": "None"}}
    )
    assert empty.matches("d", "p", "x")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda o: o["spec"].pop("deviceSelector"),
        lambda o: o["spec"].__setitem__("deviceSelector", {}),
    ],
)
def test_dralloc_taint_rules_need_a_selector_field_but_in_tree_ones_do_not(
    mutate: Callable[[dict[str, Any]], Any],
) -> None:
    ours = samples.taint_rule()
    mutate(ours)
    with pytest.raises(
        InvalidObjectError, match=r"spec\.deviceSelector: at least one of driver, pool or device"
    ):
        parse_object(ours)
    in_tree = samples.taint_rule(samples.K8S)
    mutate(in_tree)
    assert isinstance(parse_object(in_tree), DeviceTaintRule)


def test_claim_status_keeps_null_free_output() -> None:
    claim = samples.claim()
    claim.pop("status")
    out = parse_object(claim).to_kube()
    assert "status" not in out


def _allocated_condition(reason: str = "NoNodeFits", type_: str = "Allocated") -> dict[str, Any]:
    return {
        "type": type_,
        "status": "False",
        "reason": reason,
        "message": '0/3 nodes: 3 no free device of class "a100" (need 2)',
        "lastTransitionTime": "2026-01-02T03:04:05Z",
        "observedGeneration": 1,
    }


def test_claim_conditions_are_a_dralloc_extension_that_round_trips() -> None:
    claim = samples.claim()
    claim["status"]["conditions"] = [_allocated_condition()]
    model = parse_object(claim)
    assert isinstance(model, ResourceClaim)
    assert model.status is not None
    (condition,) = model.status.conditions
    assert (condition.type, condition.status, condition.reason) == (
        limits.RESOURCE_CLAIM_CONDITION_ALLOCATED,
        "False",
        "NoNodeFits",
    )
    assert model.to_kube()["status"]["conditions"] == claim["status"]["conditions"]
    # In-tree claims never carry the field, and their output does not gain it.
    in_tree = samples.claim(samples.K8S)
    assert "conditions" not in parse_object(in_tree).to_kube().get("status", {})


@pytest.mark.parametrize(
    ("conditions", "message"),
    [
        ([_allocated_condition(), _allocated_condition("Other")], "status.conditions[1].type"),
        (
            [_allocated_condition(type_=f"Type{i}") for i in range(9)],
            "status.conditions",
        ),
        ([_allocated_condition(reason="not camel case")], "status.conditions[0].reason"),
    ],
)
def test_claim_conditions_are_validated_with_the_field_path(
    conditions: list[dict[str, Any]], message: str
) -> None:
    claim = samples.claim()
    claim["status"]["conditions"] = conditions
    with pytest.raises(InvalidObjectError, match=re.escape(message)):
        parse_object(claim)


def test_an_in_tree_claim_with_null_lists_is_read_not_dropped() -> None:
    """The API server serves null for Go slices without omitempty: a claim whose driver
    reported device status (conditions: null), or one without requests."""
    from operators.api.models import ResourceClaim

    claim = ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"devices": {"requests": None}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "r",
                                "driver": "gpu.example.com",
                                "pool": "p",
                                "device": "d0",
                            }
                        ]
                    }
                },
                "devices": [
                    {"driver": "gpu.example.com", "pool": "p", "device": "d0", "conditions": None}
                ],
            },
        }
    )
    assert claim.spec.devices.requests == ()
    assert claim.status is not None and claim.status.devices[0].conditions == ()
