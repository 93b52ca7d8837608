"""The device search gives upstream's outcome even where it takes shortcuts.

Upstream evaluates a request's selectors on every device that is not in use before it
looks at constraints, and a CEL runtime error there ends the allocation with that error.
dralloc passes over devices (and whole slices) that a pinned ``matchAttribute`` value rules
out; that must not hide the error upstream would have met on them.
"""

from __future__ import annotations

from typing import Any

import pytest

from operators.allocator import AllocationError, AllocatorState

DRIVER = "gpu.example.com"
NODE = "node-a"


def device(name: str, model: str, **extra: int) -> dict[str, Any]:
    attributes: dict[str, Any] = {"model": {"string": model}}
    attributes |= {key: {"int": value} for key, value in extra.items()}
    return {"name": name, "attributes": attributes}


def slice_(name: str, devices: list[dict[str, Any]], count: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-a",
            "pool": {"name": "pool", "generation": 0, "resourceSliceCount": count},
            "devices": devices,
        },
    }


def pinned_pair_claim() -> dict[str, Any]:
    """r0 takes any device and pins ``model``; r1's selector reads ``memory``."""
    needs_memory = f'device.attributes["{DRIVER}"].memory > 0'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns", "uid": "uid-c", "resourceVersion": "1"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "r0", "exactly": {"deviceClassName": "any"}},
                    {
                        "name": "r1",
                        "exactly": {
                            "deviceClassName": "any",
                            "selectors": [{"cel": {"expression": needs_memory}}],
                        },
                    },
                ],
                "constraints": [{"requests": ["r0", "r1"], "matchAttribute": f"{DRIVER}/model"}],
            }
        },
    }


def state_with(*slices: dict[str, Any]) -> AllocatorState:
    state = AllocatorState()
    for item in slices:
        state.upsert_slice(item)
    state.upsert_class({"metadata": {"name": "any"}, "spec": {}})
    return state


def test_a_device_the_pinned_value_rules_out_still_has_its_selectors_evaluated() -> None:
    # r0 takes d0 (model a). Upstream tries d1 for r1 next: its selector fails at run time
    # (no `memory`), which ends the allocation, although d2 would fit.
    state = state_with(
        slice_("s", [device("d0", "a", memory=1), device("d1", "b"), device("d2", "a", memory=1)])
    )
    with pytest.raises(AllocationError, match=r"device .*/d1: CEL runtime error"):
        state.allocate([pinned_pair_claim()], NODE)


def test_a_slice_the_pinned_value_rules_out_still_has_its_selectors_evaluated() -> None:
    # The same with d1 alone in its own slice, which a pinned model=a passes over whole.
    state = state_with(
        slice_("s0", [device("d0", "a", memory=1)], count=3),
        slice_("s1", [device("d1", "b")], count=3),
        slice_("s2", [device("d2", "a", memory=1)], count=3),
    )
    with pytest.raises(AllocationError, match=r"device .*/d1: CEL runtime error"):
        state.allocate([pinned_pair_claim()], NODE)


def test_ruled_out_devices_whose_selectors_evaluate_are_still_passed_over() -> None:
    # Every device has `memory`: no error anywhere, r1 skips d1 (model b) and takes d2.
    state = state_with(
        slice_("s0", [device("d0", "a", memory=1)], count=3),
        slice_("s1", [device("d1", "b", memory=1)], count=3),
        slice_("s2", [device("d2", "a", memory=1)], count=3),
    )
    result = state.allocate([pinned_pair_claim()], NODE)
    assert result is not None
    picked = [(r.request, r.device) for r in result[0].devices]
    assert picked == [("r0", "d0"), ("r1", "d2")]
