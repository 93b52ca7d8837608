"""The pack device policy: best fit on partitioned devices, used pools first; first-fit as is."""

from __future__ import annotations

from typing import Any

import pytest

from operators.allocator import AllocatorState, UsedDevice

DRIVER = "gpu.example.com"
SIZES = {"whole": 8, "half": 4, "quarter": 2}


def partition(gpu: int, kind: str, index: int) -> dict[str, Any]:
    return {
        "name": f"gpu-{gpu}-{kind}-{index}",
        "attributes": {"profile": {"string": kind}},
        "consumesCounters": [
            {"counterSet": f"gpu-{gpu}", "counters": {"memory": {"value": str(SIZES[kind])}}}
        ],
    }


def gpus(count: int) -> list[dict[str, Any]]:
    """One node, ``count`` partitionable GPUs of 8 memory units: a whole, 2 halves, 4
    quarters each; the counters in a slice of their own, as the API wants."""
    devices = [
        partition(gpu, kind, index)
        for gpu in range(count)
        for kind, many in (("whole", 1), ("half", 2), ("quarter", 4))
        for index in range(many)
    ]
    counters = {f"gpu-{gpu}": {"memory": "8"} for gpu in range(count)}
    return partitionable(counters, devices)


def partitionable(
    counter_sets: dict[str, dict[str, str]], devices: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """node-a's pool: the counter sets in a slice of their own (as the API wants), then the
    devices."""
    pool = {"name": "node-a", "generation": 0, "resourceSliceCount": 2}
    common = {"driver": DRIVER, "nodeName": "node-a", "pool": pool}
    shared = [
        {"name": name, "counters": {k: {"value": v} for k, v in counters.items()}}
        for name, counters in counter_sets.items()
    ]
    return [
        {"metadata": {"name": "node-a-counters"}, "spec": {**common, "sharedCounters": shared}},
        {"metadata": {"name": "node-a-gpus"}, "spec": {**common, "devices": devices}},
    ]


def kind_class(kind: str) -> dict[str, Any]:
    expr = f'device.attributes["{DRIVER}"].profile == "{kind}"'
    return {"metadata": {"name": kind}, "spec": {"selectors": [{"cel": {"expression": expr}}]}}


def claim(name: str, kind: str) -> dict[str, Any]:
    request = {"name": "r", "exactly": {"deviceClassName": kind}}
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"devices": {"requests": [request]}},
    }


def state_with(policy: str, slices: list[dict[str, Any]], used: list[str]) -> AllocatorState:
    state = AllocatorState(device_policy=policy)
    for slice_ in slices:
        state.upsert_slice(slice_)
    for kind in SIZES:
        state.upsert_class(kind_class(kind))
    for device in used:
        pool = "node-a" if device.startswith("gpu-") else device.split("/")[0]
        state.allocated.add(UsedDevice(device=(DRIVER, pool, device.split("/")[-1])))
    return state


def chosen(state: AllocatorState, kind: str) -> str:
    found = state.allocate([claim("c", kind)], "node-a")
    assert found is not None
    [allocation] = found
    return allocation.devices[0].device


def test_pack_puts_a_partition_where_it_fits_best_first_fit_where_it_comes_first() -> None:
    # gpu-0 has a quarter in use (6 left), gpu-1 a half (4 left), gpu-2 is untouched.
    used = ["gpu-0-quarter-0", "gpu-1-half-0"]
    assert chosen(state_with("first-fit", gpus(3), used), "half") == "gpu-0-half-0"
    assert chosen(state_with("pack", gpus(3), used), "half") == "gpu-1-half-1"


def test_pack_keeps_untouched_gpus_for_whole_requests() -> None:
    # Nothing in use yet on gpu-1: a quarter goes next to the one on gpu-0, not onto gpu-1
    # (first-fit agrees here: the slice lists gpu-0 first) ...
    assert chosen(state_with("pack", gpus(2), ["gpu-0-quarter-0"]), "quarter") == "gpu-0-quarter-1"
    # ... and when gpu-0's first partitions are free again but another is held, pack still
    # goes to the used GPU, first-fit to the first free partition of the list.
    used = ["gpu-1-quarter-3"]
    assert chosen(state_with("first-fit", gpus(2), used), "quarter") == "gpu-0-quarter-0"
    assert chosen(state_with("pack", gpus(2), used), "quarter") == "gpu-1-quarter-0"


def plain_pool(pool: str) -> dict[str, Any]:
    devices = [{"name": f"d{i}", "attributes": {"profile": {"string": "whole"}}} for i in range(2)]
    return {
        "metadata": {"name": f"{pool}-slice"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-a",
            "pool": {"name": pool, "generation": 0, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def test_pack_prefers_a_pool_already_in_use() -> None:
    slices = [plain_pool("pool-a"), plain_pool("pool-b")]
    used = ["pool-b/d0"]
    first = state_with("first-fit", slices, used).allocate([claim("c", "whole")], "node-a")
    packed = state_with("pack", slices, used).allocate([claim("c", "whole")], "node-a")
    assert first is not None and packed is not None
    assert first[0].devices[0].pool == "pool-a"
    assert (packed[0].devices[0].pool, packed[0].devices[0].device) == ("pool-b", "d1")


def test_an_unknown_device_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown device policy"):
        AllocatorState(device_policy="tetris")


def mig_gpu() -> list[dict[str, Any]]:
    """One GPU of 4 memory slices (a counter each); partitions at aligned positions, as
    MIG places them: 1g at 0..3, 2g at 0-1 and 2-3, 4g over all."""
    shapes = [
        *((f"1g-{p}", "quarter", [p]) for p in range(4)),
        ("2g-0", "half", [0, 1]),
        ("2g-2", "half", [2, 3]),
        ("4g-0", "whole", [0, 1, 2, 3]),
    ]
    devices = [
        {
            "name": name,
            "attributes": {"profile": {"string": kind}},
            "consumesCounters": [
                {"counterSet": "gpu", "counters": {f"s{p}": {"value": "1"} for p in slots}}
            ],
        }
        for name, kind, slots in shapes
    ]
    return partitionable({"gpu": {f"s{p}": "1" for p in range(4)}}, devices)


@pytest.mark.parametrize(
    ("policy", "device", "half_fits"), [("first-fit", "1g-0", False), ("pack", "1g-2", True)]
)
def test_pack_places_a_slice_where_it_blocks_no_bigger_partition(
    policy: str, device: str, half_fits: bool
) -> None:
    # Slice 3 is in use: a 1g at slice 0 (first in the list) would break the last free
    # aligned 2g; at slice 2 it breaks nothing that is not broken already.
    state = state_with(policy, mig_gpu(), [])
    state.allocated.add(UsedDevice(device=(DRIVER, "node-a", "1g-3")))
    found = state.allocate([claim("c1", "quarter")], "node-a")
    assert found is not None
    [small] = found
    assert small.devices[0].device == device
    state.assume(claim("c1", "quarter"), small)
    half = state.allocate([claim("c2", "half")], "node-a")
    assert (half is not None) is half_fits


def whole_gpus(*attributes: dict[str, Any]) -> list[dict[str, Any]]:
    """node-a: one whole GPU per mapping of attributes, named d0, d1, ... in that order."""
    devices = [
        {"name": f"d{i}", "attributes": {"profile": {"string": "whole"}, **attrs}}
        for i, attrs in enumerate(attributes)
    ]
    pool = {"name": "node-a", "generation": 0, "resourceSliceCount": 1}
    spec = {"driver": DRIVER, "nodeName": "node-a", "pool": pool, "devices": devices}
    return [{"metadata": {"name": "node-a-gpus"}, "spec": spec}]


def numa_devices(attribute: str) -> list[dict[str, Any]]:
    """node-a: four GPUs listed alternately on two NUMA nodes (0, 1, 0, 1)."""
    return whole_gpus(*({attribute: {"int": i % 2}} for i in range(4)))


def allocated_devices(state: AllocatorState, count: int) -> list[str]:
    request = {"name": "r", "exactly": {"deviceClassName": "whole", "count": count}}
    body = {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": [request]}},
    }
    found = state.allocate([body], "node-a")
    assert found is not None
    [allocation] = found
    return [d.device for d in allocation.devices]


NUMA = "resource.kubernetes.io/numaNode"
PCIE = "resource.kubernetes.io/pcieRoot"


@pytest.mark.parametrize("attribute", ["numaNode", NUMA, PCIE])
@pytest.mark.parametrize(
    ("policy", "used", "expected"),
    [
        ("first-fit", [], ["d0", "d1"]),
        ("pack", [], ["d0", "d2"]),
        # d0 taken: NUMA node 1's first free device (d1) leads, so its group goes first.
        ("pack", ["d0"], ["d1", "d3"]),
    ],
)
def test_pack_takes_a_claims_devices_from_one_numa_node(
    attribute: str, policy: str, used: list[str], expected: list[str]
) -> None:
    state = state_with(policy, numa_devices(attribute), [f"node-a/{d}" for d in used])
    assert allocated_devices(state, 2) == expected


def socket_of_two(node: int, other: int) -> dict[str, Any]:
    """The standard NUMA attribute's list form: the device's node, then its socket's other."""
    return {NUMA: {"ints": [node, other]}}


@pytest.mark.parametrize(
    ("policy", "numa", "expected"),
    [
        ("first-fit", "list", ["d0", "d1"]),
        # Each NUMA node has one GPU; nodes 0 and 1 share a socket, 2 and 3 the other. The
        # list form says so: the second GPU comes from node 1, not from node 2 listed before.
        ("pack", "list", ["d0", "d2"]),
        # The number form does not say which nodes are near: the groups keep their order.
        ("pack", "number", ["d0", "d1"]),
    ],
)
def test_pack_goes_to_a_numa_node_of_the_same_socket_when_one_runs_out(
    policy: str, numa: str, expected: list[str]
) -> None:
    nodes = [(0, 1), (2, 3), (1, 0), (3, 2)]
    if numa == "list":
        gpus_ = whole_gpus(*(socket_of_two(n, o) for n, o in nodes))
    else:
        gpus_ = whole_gpus(*({NUMA: {"int": n}} for n, _ in nodes))
    assert allocated_devices(state_with(policy, gpus_, []), 2) == expected


def test_pack_keeps_a_claim_on_one_numa_node_before_one_pcie_root() -> None:
    # Three GPUs on NUMA node 0 behind two PCIe roots (a, c), one on node 1 (root b): three
    # devices come from node 0, those of root a first, rather than root a's and root b's.
    gpus_ = whole_gpus(
        {NUMA: {"int": 0}, PCIE: {"string": "a"}},
        {NUMA: {"int": 1}, PCIE: {"string": "b"}},
        {NUMA: {"int": 0}, PCIE: {"string": "c"}},
        {NUMA: {"int": 0}, PCIE: {"string": "a"}},
    )
    assert allocated_devices(state_with("pack", gpus_, []), 3) == ["d0", "d3", "d2"]
    assert allocated_devices(state_with("first-fit", gpus_, []), 3) == ["d0", "d1", "d2"]
