"""Kubernetes 1.37's alpha allocator features beyond upstream's table: derived attributes whose
CEL fails (compile, runtime, cost) end the allocation with a reason like a selector's; the gate
off refuses such a request; devices that skip node operations are explained per node, and the
operator's node view carries what the node declares."""

from __future__ import annotations

from typing import Any

import pytest

from operators.allocator import AllocationError, AllocatorState, Features, NodeInfo
from operators.scheduling.model import parse_node

DRIVER = "gpu.example.com"
NUMA = "derived/numa"
DECLARING = frozenset({"DRAOptionalNodeOperations"})


def gpu_slice(node: str, count: int = 2, skips: tuple[str, ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": DRIVER,
        "nodeName": node,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "devices": [
            {"name": f"gpu-{i}", "attributes": {"topology": {"string": f"numa-{i // 2}"}}}
            for i in range(count)
        ],
    }
    if skips:
        spec["skipNodeOperations"] = list(skips)
    return {"metadata": {"name": f"{node}-gpus"}, "spec": spec}


def gpu_class() -> dict[str, Any]:
    expression = f'device.driver == "{DRIVER}"'
    return {
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def numa_claim(expression: str, count: int = 2) -> dict[str, Any]:
    exactly = {
        "deviceClassName": "gpu",
        "count": count,
        "derivedAttributes": [{"name": NUMA, "expression": expression}],
    }
    return {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": exactly}],
                "constraints": [{"matchAttribute": NUMA}],
            }
        },
    }


def state(features: Features, *slices: dict[str, Any]) -> AllocatorState:
    out = AllocatorState(features)
    for slice_obj in slices or (gpu_slice("node-0"),):
        out.upsert_slice(slice_obj)
    out.upsert_class(gpu_class())
    return out


DERIVED = Features(derived_attributes=True)
TOPOLOGY = f'device.attributes["{DRIVER}"].topology'


def test_a_derived_attribute_groups_devices() -> None:
    found = state(DERIVED, gpu_slice("node-0", 4)).allocate([numa_claim(TOPOLOGY)], "node-0")
    assert found is not None
    assert [d.device for d in found[0].devices] == ["gpu-0", "gpu-1"]


def test_list_values_match_only_with_list_attributes() -> None:
    # Scalar mode compares scalars only, as upstream's; list mode wants a common element.
    assert state(DERIVED).allocate([numa_claim("[1, 2]")], "node-0") is None
    lists = Features(derived_attributes=True, list_type_attributes=True)
    assert state(lists).allocate([numa_claim("[1, 2]")], "node-0") is not None


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("1.5", "derived attribute derived/numa: CEL compile error: must evaluate to a primitive"),
        (
            "device.attributes[",
            "derived attribute derived/numa: CEL compile error: compilation failed",
        ),
        (
            f'device.attributes["{DRIVER}"].missing',
            "derived attribute derived/numa on device gpu.example.com/node-0/gpu-0: "
            "CEL runtime error: no such key: missing",
        ),
        ("dyn(2.5)", "CEL runtime error: unsupported CEL return type: double"),
    ],
)
def test_a_failing_derived_attribute_ends_the_allocation(expression: str, reason: str) -> None:
    with pytest.raises(AllocationError) as caught:
        state(DERIVED).allocate([numa_claim(expression)], "node-0")
    assert "claim ns/c, request gpu: " in str(caught.value)
    assert reason in str(caught.value)


def test_the_runtime_cost_limit_ends_the_allocation() -> None:
    ten = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
    bomb = "1"
    for variable in "abcdef":  # a million evaluations of the innermost expression
        bomb = f"{ten}.map({variable}, {bomb})"
    bomb += ".size()"
    with pytest.raises(AllocationError, match="actual cost limit exceeded"):
        state(DERIVED).allocate([numa_claim(bomb)], "node-0")


def test_derived_attributes_with_the_gate_off_are_refused() -> None:
    with pytest.raises(AllocationError, match="cannot handle request with derived attributes"):
        state(Features()).allocate([numa_claim(TOPOLOGY)], "node-0")


NODE_OPS = Features(optional_node_operations=True)


@pytest.mark.parametrize(
    ("features", "declared", "allocated"),
    [(NODE_OPS, DECLARING, True), (NODE_OPS, frozenset(), False), (Features(), DECLARING, False)],
)
def test_devices_that_skip_node_operations(
    features: Features, declared: frozenset[str], allocated: bool
) -> None:
    s = state(
        features, gpu_slice("node-0", skips=("NodePrepareResources", "NodeUnprepareResources"))
    )
    claim = {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    found = s.allocate([claim], NodeInfo("node-0", {}, declared))
    assert (found is not None) == allocated
    if found is not None:
        written = found[0].to_dict()["devices"]["results"][0]
        assert written["skipNodeOperations"] == ["NodePrepareResources", "NodeUnprepareResources"]
        return
    explanation = s.explain([claim], [NodeInfo("node-0", {}, declared)])
    assert "skip node operations" in explanation.reasons[0].summary
    assert "2 free, 0 not skipping node operations" in explanation.reasons[0].line()


def test_the_node_view_carries_declared_features() -> None:
    raw = {
        "metadata": {"name": "n", "labels": {"a": "b"}},
        "status": {"declaredFeatures": ["DRAOptionalNodeOperations"]},
    }
    assert parse_node(raw).info() == NodeInfo("n", {"a": "b"}, DECLARING)
    assert NodeInfo.from_object(raw).declared_features == DECLARING
