"""binpack on partitionable devices: a node where the pod breaks no whole device first."""

from __future__ import annotations

from typing import Any

import pytest

from operators.allocator import AllocatorState, NodeInfo, UsedDevice
from tests.unit.allocator.test_packing import DRIVER, SIZES, claim, kind_class, partition


def node_gpus(node: str, count: int) -> list[dict[str, Any]]:
    """``count`` partitionable GPUs of 8 memory units on the node (a whole, 2 halves and 4
    quarters each), the counters in a slice of their own."""
    devices = [
        partition(gpu, kind, index)
        for gpu in range(count)
        for kind, many in (("whole", 1), ("half", 2), ("quarter", 4))
        for index in range(many)
    ]
    pool = {"name": node, "generation": 0, "resourceSliceCount": 2}
    common = {"driver": DRIVER, "nodeName": node, "pool": pool}
    counters = [
        {"name": f"gpu-{gpu}", "counters": {"memory": {"value": "8"}}} for gpu in range(count)
    ]
    return [
        {"metadata": {"name": f"{node}-counters"}, "spec": {**common, "sharedCounters": counters}},
        {"metadata": {"name": f"{node}-gpus"}, "spec": {**common, "devices": devices}},
    ]


def two_nodes(device_policy: str) -> AllocatorState:
    """node-a: one untouched GPU; node-b: one GPU with a quarter in use."""
    state = AllocatorState(device_policy=device_policy)
    for node in ("node-a", "node-b"):
        for slice_ in node_gpus(node, 1):
            state.upsert_slice(slice_)
    for kind in SIZES:
        state.upsert_class(kind_class(kind))
    state.allocated.add(UsedDevice(device=(DRIVER, "node-b", "gpu-0-quarter-0")))
    return state


NODES = [NodeInfo("node-a"), NodeInfo("node-b")]


@pytest.mark.parametrize("device_policy", ["first-fit", "pack"])
def test_binpack_takes_the_node_where_no_whole_gpu_breaks(device_policy: str) -> None:
    state = two_nodes(device_policy)
    # First fit over nodes breaks node-a's whole GPU for a quarter ...
    assert state.find_node([claim("c", "quarter")], NODES, "first-fit").node == "node-a"
    # ... binpack puts it next to the quarter on node-b, and node-a keeps its whole GPU.
    found = state.find_node([claim("c", "quarter")], NODES, "binpack")
    assert found.node == "node-b"
    state.assume(claim("c", "quarter"), found.allocations[0])
    assert state.find_node([claim("w", "whole")], NODES, "binpack").node == "node-a"


def test_binpack_breaks_a_whole_gpu_when_no_used_one_has_room() -> None:
    state = two_nodes("pack")
    # node-b's GPU has 6 units left: a whole GPU (8) only fits on node-a.
    assert state.find_node([claim("w", "whole")], NODES, "binpack").node == "node-a"
    # A half fits next to the quarter on node-b: no whole GPU broken there.
    assert state.find_node([claim("h", "half")], NODES, "binpack").node == "node-b"
