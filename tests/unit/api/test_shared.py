"""Parts that repeat across objects are validated once and shared (frozen models).

Sharing happens only where the API parsers validate (``context=SHARED_PARTS``), and a shared
instance stands only for inputs that validate to an equal object.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pydantic import ValidationError

from operators.api import InvalidObjectError, parse_object
from operators.api.annotations import PodResourceClaim, format_pod_claims, parse_pod_claims
from operators.api.base import SHARED_PARTS, json_copy, json_text, scalar_items
from operators.api.meta import NodeSelector
from operators.api.models import ResourceClaim, ResourceSlice
from operators.api.resourceclaim import ResourceClaimSpec
from operators.api.resourceslice import DeviceAttribute, DeviceCapacity

API = "resource.dralloc.dev/v1"


def shared(model: Any, data: Any) -> Any:
    return model.model_validate(data, context=SHARED_PARTS)


def test_equal_attributes_are_one_instance() -> None:
    first = shared(DeviceAttribute, {"string": "A100"})
    assert shared(DeviceAttribute, {"string": "A100"}) is first
    assert shared(DeviceAttribute, {"string": "H100"}) is not first
    assert shared(DeviceCapacity, {"value": "1Gi"}) is shared(DeviceCapacity, {"value": "1Gi"})


def test_values_equal_in_python_but_not_in_json_are_not_confused() -> None:
    assert shared(DeviceAttribute, {"int": 1}).int_value == 1
    with pytest.raises(ValidationError):
        shared(DeviceAttribute, {"int": True})  # equal to 1, and hashes alike
    with pytest.raises(ValidationError):
        shared(DeviceAttribute, {"int": 1.0})


def test_an_invalid_input_fails_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ValidationError):
            shared(DeviceAttribute, {"string": "x" * 65})


def test_lists_are_validated_unshared() -> None:
    one = shared(DeviceAttribute, {"strings": ["a", "b"]})
    assert one.strings == ("a", "b")
    assert shared(DeviceAttribute, {"strings": ["a", "b"]}) == one


def claim(name: str, node: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": name},
        "spec": spec
        or {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "r", "driver": "d", "pool": "p", "device": "x"}]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            }
        },
    }


def test_claims_from_one_template_share_their_spec_and_node_selector() -> None:
    a = parse_object(claim("a", "n1"))
    b = parse_object(claim("b", "n1"))
    c = parse_object(claim("c", "n2"))
    assert isinstance(a, ResourceClaim) and isinstance(b, ResourceClaim)
    assert isinstance(c, ResourceClaim)
    assert a.spec is b.spec is c.spec
    assert a.status and b.status and c.status
    assert a.status.allocation and b.status.allocation and c.status.allocation
    assert a.status.allocation.node_selector is b.status.allocation.node_selector
    assert c.status.allocation.node_selector != a.status.allocation.node_selector
    assert isinstance(c.status.allocation.node_selector, NodeSelector)


def test_devices_of_a_slice_share_their_attributes() -> None:
    device = {"attributes": {"model": {"string": "A100"}}, "capacity": {"mem": {"value": "1Gi"}}}
    parsed = parse_object(
        {
            "apiVersion": API,
            "kind": "ResourceSlice",
            "metadata": {"name": "s"},
            "spec": {
                "driver": "d.example.com",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "n",
                "devices": [{"name": f"d{i}", **copy.deepcopy(device)} for i in range(2)],
            },
        }
    )
    assert isinstance(parsed, ResourceSlice)
    first, second = parsed.spec.devices
    assert first.attributes["model"] is second.attributes["model"]
    assert first.capacity["mem"] is second.capacity["mem"]


def test_pod_claim_entries_are_shared_and_still_checked() -> None:
    entry = {"name": "gpu", "resourceClaimTemplateName": "t"}
    assert shared(PodResourceClaim, entry) is shared(PodResourceClaim, dict(entry))
    first, _ = parse_pod_claims(json.dumps([entry, {**entry, "name": "gpu2"}]))
    assert parse_pod_claims(json.dumps([entry]))[0] is first
    for _ in range(2):
        with pytest.raises(ValidationError):
            shared(PodResourceClaim, {**entry, "resourceClaimName": "c"})
        with pytest.raises(ValidationError):
            shared(PodResourceClaim, {**entry, "resourceClaimTemplate": "t"})


# -- each of these failed while any validation shared, constructors included ----------------


def test_an_entry_built_like_a_shared_one_is_whole() -> None:
    # tests/fuzz/test_annotation_fuzz.py::test_valid_claims_round_trip, entries=[("0", False,
    # "0")]: the constructor got the shared instance back, and the one built stayed empty.
    parse_pod_claims('[{"name": "0", "resource_claim_template_name": "0"}]')
    entries = [PodResourceClaim(name="0", resource_claim_template_name="0") for _ in range(2)]
    for entry in entries:
        assert entry.name == "0" and entry.resource_claim_template_name == "0"
    assert entries[0] is not entries[1]
    assert list(parse_pod_claims(format_pod_claims(entries[1:]))) == entries[1:]


def test_a_claim_without_a_spec_after_one_with_an_empty_spec() -> None:
    # tests/fuzz/test_model_fuzz.py::test_mutated_objects_parse_or_raise_invalid_object_error:
    # the spec's default (ResourceClaimSpec() constructed) was left empty, without
    # __pydantic_extra__, once an empty spec had been shared.
    head = {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": "c"}}
    with_empty = parse_object({**head, "spec": {}})
    without = parse_object(head)
    assert isinstance(without, ResourceClaim)
    assert without.spec == ResourceClaimSpec() == with_empty.spec  # type: ignore[union-attr]
    assert without == with_empty
    assert parse_object(without.to_kube()) == without


def test_validations_other_than_the_parsers_are_not_shared() -> None:
    selector = claim("a", "n9")["status"]["allocation"]["nodeSelector"]
    parse_object(claim("a", "n9"))
    NodeSelector.model_validate(selector)
    with pytest.raises(ValidationError):
        NodeSelector.model_validate(selector, strict=True)  # lists are not tuples
    with pytest.raises(ValidationError):
        NodeSelector.model_validate(selector, by_alias=False, by_name=True)
    assert NodeSelector.model_validate(selector) is not NodeSelector.model_validate(selector)
    assert NodeSelector.model_validate_json(json.dumps(selector)) == NodeSelector.model_validate(
        selector
    )


def spec_with_parameters(parameters: Any) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": "r",
                    "exactly": {"deviceClassName": "c", "capacity": {"requests": {"a": "1"}}},
                }
            ],
            "config": [{"opaque": {"driver": "d.example.com", "parameters": parameters}}],
        }
    }


def parameters_of(parsed: Any) -> Any:
    return parsed.spec.devices.config[0].opaque.parameters


def test_an_int_key_is_not_read_as_its_text() -> None:
    ok = parse_object(claim("a", "n", spec_with_parameters({"1": "x"})))
    assert parameters_of(ok) == {"1": "x"}
    for _ in range(2):
        with pytest.raises(InvalidObjectError):
            parse_object(claim("b", "n", spec_with_parameters({1: "x"})))


def test_strings_that_escape_alike_are_kept_apart() -> None:
    emoji = "\U0001f600"
    pair = "\ud83d\ude00"  # two lone surrogates: in ASCII JSON, written as the emoji is
    parsed = parse_object(claim("a", "n", spec_with_parameters({"s": emoji})))
    assert parameters_of(parsed) == {"s": emoji}
    for _ in range(2):
        with pytest.raises(InvalidObjectError, match="surrogates"):
            parse_object(claim("b", "n", spec_with_parameters({"s": pair})))


def test_key_order_is_kept() -> None:
    first = parse_object(claim("a", "n", spec_with_parameters({"x": 1, "y": 2})))
    second = parse_object(claim("b", "n", spec_with_parameters({"y": 2, "x": 1})))
    assert list(parameters_of(first)) == ["x", "y"]
    assert list(parameters_of(second)) == ["y", "x"]


def test_a_shared_part_holds_nothing_of_its_input() -> None:
    body = claim("a", "n", spec_with_parameters({"nested": {"k": "v"}}))
    first = parse_object(body)
    body["spec"]["devices"]["config"][0]["opaque"]["parameters"]["nested"]["k"] = "changed"
    assert parameters_of(first) == {"nested": {"k": "v"}}
    second = parse_object(claim("b", "n", spec_with_parameters({"nested": {"k": "v"}})))
    assert parameters_of(second) == {"nested": {"k": "v"}}


def test_keys() -> None:
    assert scalar_items({"int": 1}) != scalar_items({"int": True})
    not_scalars: tuple[dict[Any, Any], ...] = ({"int": 1.0}, {1: "x"}, {"s": ["a"]})
    for unkeyed in not_scalars:
        with pytest.raises(TypeError):
            scalar_items(unkeyed)
    value = {"b": [1, 1.0, True, None, "\u00e9\U0001f600"], "a": {"x": -0.0}, "i": 2**63}
    copied = json_copy(json_text(value))
    assert copied == value and copied is not value
    assert [type(v) for v in copied["b"]] == [int, float, bool, type(None), str]
    assert list(copied) == ["b", "a", "i"]
    assert json_text({"x": 0.0}) != json_text({"x": -0.0})
    assert json_text({"x": 1}) != json_text({"x": 1.0}) != json_text({"x": True})
    not_json: tuple[dict[Any, Any], ...] = (
        {1: "x"},
        {"t": (1,)},
        {"n": json},
        {"s": "\ud800"},  # a lone surrogate: validated unshared
        {"i": 2**64},
    )
    for unkeyed in not_json:
        with pytest.raises(TypeError):
            json_text(unkeyed)
    for not_finite in (float("nan"), float("inf")):  # orjson would write null
        with pytest.raises(ValueError):
            json_text({"f": not_finite})
    deep: Any = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(ValueError):
        json_text({"d": deep})


# --- the sets of fields given ---------------------------------------------------------------


def _claim(name: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", **metadata},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}},
    }


def test_objects_given_the_same_fields_share_one_set_of_them() -> None:
    labels = {"labels": {"a": "b"}, "resourceVersion": "1", "generation": 1}
    first, second = (parse_object(_claim(name, **labels)) for name in ("one", "two"))
    assert first.metadata.model_fields_set == {
        "name", "namespace", "uid", "labels", "resource_version", "generation",
    }  # fmt: skip
    assert first.metadata.model_fields_set is second.metadata.model_fields_set
    assert first.model_fields_set is second.model_fields_set
    other = parse_object(_claim("three"))
    assert other.metadata.model_fields_set == {"name", "namespace", "uid"}
    assert other.metadata.model_fields_set is not first.metadata.model_fields_set


def test_a_copy_with_changes_leaves_the_shared_set_alone() -> None:
    first, second = (parse_object(_claim(name)) for name in ("one", "two"))
    changed = first.metadata.model_copy(update={"labels": {"x": "y"}})
    assert "labels" in changed.model_fields_set
    assert "labels" not in first.metadata.model_fields_set
    assert "labels" not in second.metadata.model_fields_set


def test_every_model_is_frozen_as_sharing_its_set_of_fields_needs() -> None:
    from operators.api.base import KubeModel

    def subclasses(cls: type[KubeModel]) -> list[type[KubeModel]]:
        return [cls, *(s for sub in cls.__subclasses__() for s in subclasses(sub))]

    models = subclasses(KubeModel)
    assert len(models) > 30
    assert [m.__name__ for m in models if not m.model_config.get("frozen")] == []
