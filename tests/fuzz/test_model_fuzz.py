"""Property tests of model parsing: broken objects give the API's error, never a crash.

Every object the operator watches passes through ``parse_object``; an exception other than
``InvalidObjectError`` there would escape the informer's handling. The seeds are the
checked-in examples plus objects that use the rarer fields (counters, shared capacity,
status), each mutated a few times; objects that still parse must also round-trip.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from operators.api import KINDS, InvalidObjectError, Quantity, QuantityParseError, parse_object

from .mutations import JSON_VALUES, mutated
from .settings import FUZZ

REPO: Final = Path(__file__).resolve().parents[2]
API: Final = "resource.dralloc.dev/v1"


def _example_objects() -> list[dict[str, Any]]:
    found = []
    for path in sorted((REPO / "manifests" / "examples").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") in KINDS:
                found.append(document)
    return found


RICH_SEEDS: Final[list[dict[str, Any]]] = [
    {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": "counters"},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": "p", "generation": 3, "resourceSliceCount": 2},
            "allNodes": True,
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
        },
    },
    {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": "partitions"},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": "p", "generation": 3, "resourceSliceCount": 2},
            "perDeviceNodeSelection": True,
            "devices": [
                {
                    "name": "gpu-0-half",
                    "nodeName": "node-a",
                    "attributes": {"model": {"string": "A100"}, "tags": {"strings": ["a"]}},
                    "capacity": {"memory": {"value": "40Gi"}},
                    "consumesCounters": [
                        {"counterSet": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}
                    ],
                    "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}],
                },
                {
                    "name": "shared",
                    "allNodes": True,
                    "allowMultipleAllocations": True,
                    "capacity": {
                        "memory": {
                            "value": "40Gi",
                            "requestPolicy": {
                                "default": "1Gi",
                                "validRange": {"min": "1Gi", "step": "1Gi"},
                            },
                        }
                    },
                },
            ],
        },
    },
    {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns", "finalizers": ["x/y"]},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "gpu", "count": 2},
                            {"name": "all", "deviceClassName": "gpu", "allocationMode": "All"},
                        ],
                    },
                    {
                        "name": "nic",
                        "exactly": {
                            "deviceClassName": "nic",
                            "adminAccess": True,
                            "selectors": [{"cel": {"expression": "device.driver != ''"}}],
                            "capacity": {"requests": {"bandwidth": "1G"}},
                        },
                    },
                ],
                "constraints": [{"requests": ["gpu/big", "nic"], "matchAttribute": "x.io/numa"}],
                "config": [{"requests": ["nic"], "opaque": {"driver": "nic.io", "parameters": {}}}],
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu/big",
                            "driver": "gpu.example.com",
                            "pool": "p",
                            "device": "shared",
                            "shareID": "0f0f0f0f-0000-4000-8000-00000000000a",
                            "consumedCapacity": {"memory": "2Gi"},
                        }
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["n"]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}],
        },
    },
]

SEEDS: Final = _example_objects() + RICH_SEEDS


def _parse_or_api_error(document: Any) -> Any:
    try:
        return parse_object(document)
    except InvalidObjectError as exc:
        assert exc.errors, "an InvalidObjectError must list at least one problem"
        assert all(str(e) for e in exc.errors)
        return None


def test_seeds_are_valid() -> None:
    assert len(SEEDS) >= 8
    for seed in SEEDS:
        parse_object(seed)


@FUZZ
@given(st.sampled_from(SEEDS).flatmap(mutated))
def test_mutated_objects_parse_or_raise_invalid_object_error(document: dict[str, Any]) -> None:
    model = _parse_or_api_error(document)
    if model is not None:
        assert parse_object(model.to_kube()) == model, "a parsed object must round-trip"


@FUZZ
@given(st.sampled_from(sorted(KINDS)), st.dictionaries(st.text(max_size=10), JSON_VALUES))
def test_random_bodies_of_each_kind_parse_or_raise_invalid_object_error(
    kind: str, body: dict[str, Any]
) -> None:
    _parse_or_api_error({**body, "apiVersion": API, "kind": kind})


@FUZZ
@given(JSON_VALUES)
def test_random_specs_parse_or_raise_invalid_object_error(spec: Any) -> None:
    for kind in sorted(KINDS):
        _parse_or_api_error(
            {"apiVersion": API, "kind": kind, "metadata": {"name": "x"}, "spec": spec}
        )


@FUZZ
@given(st.text(max_size=40))
def test_random_quantity_text_parses_or_raises_quantity_error(text: str) -> None:
    try:
        quantity = Quantity.parse(text)
    except QuantityParseError:
        return
    assert Quantity.parse(str(quantity)) == quantity


@FUZZ
@given(
    st.integers(-(10**12), 10**12),
    st.sampled_from([("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("k", 10**3), ("M", 10**6)]),
)
def test_quantity_suffixes_scale_exactly(number: int, suffix: tuple[str, int]) -> None:
    text, factor = suffix
    assume(abs(number * factor) < 2**63)  # beyond int64, upstream caps binary-SI values only
    assert Quantity.parse(f"{number}{text}") == Quantity.parse(str(number * factor))


@pytest.mark.parametrize("devices", [129, 1000])
def test_too_many_devices_is_an_api_error_naming_the_field(devices: int) -> None:
    seed = copy.deepcopy(RICH_SEEDS[1])
    seed["spec"]["devices"] = [{"name": f"d-{i}", "allNodes": True} for i in range(devices)]
    with pytest.raises(InvalidObjectError) as caught:
        parse_object(seed)
    assert any(e.path == "spec.devices" for e in caught.value.errors), caught.value.errors
