"""Parts that repeat across objects are validated once and shared (frozen models)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from operators.api.meta import NodeSelector
from operators.api.models import ResourceClaim
from operators.api.resourceslice import DeviceAttribute, DeviceCapacity


def test_equal_attributes_are_one_instance() -> None:
    first = DeviceAttribute.model_validate({"string": "A100"})
    assert DeviceAttribute.model_validate({"string": "A100"}) is first
    assert DeviceAttribute.model_validate({"string": "H100"}) is not first
    assert DeviceCapacity.model_validate({"value": "1Gi"}) is DeviceCapacity.model_validate(
        {"value": "1Gi"}
    )


def test_values_equal_in_python_but_not_in_json_are_not_confused() -> None:
    assert DeviceAttribute.model_validate({"int": 1}).int_value == 1
    with pytest.raises(ValidationError):
        DeviceAttribute.model_validate({"int": True})  # equal to 1, and hashes alike
    with pytest.raises(ValidationError):
        DeviceAttribute.model_validate({"int": 1.0})


def test_an_invalid_input_fails_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ValidationError):
            DeviceAttribute.model_validate({"string": "x" * 65})


def test_lists_are_validated_unshared() -> None:
    one = DeviceAttribute.model_validate({"strings": ["a", "b"]})
    assert one.strings == ("a", "b")
    assert DeviceAttribute.model_validate({"strings": ["a", "b"]}) == one


def claim(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": name},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}},
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
    a = ResourceClaim.model_validate(claim("a", "n1"))
    b = ResourceClaim.model_validate(claim("b", "n1"))
    c = ResourceClaim.model_validate(claim("c", "n2"))
    assert a.spec is b.spec is c.spec
    assert a.status and b.status and c.status
    assert a.status.allocation and b.status.allocation and c.status.allocation
    assert a.status.allocation.node_selector is b.status.allocation.node_selector
    assert c.status.allocation.node_selector != a.status.allocation.node_selector
    assert isinstance(c.status.allocation.node_selector, NodeSelector)
