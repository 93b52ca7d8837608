"""Compatibility groups: the common-groups rule, undoing takes, the gate, the explanation.

Upstream's table cases are in tests/conformance; these cover dralloc's own parts: the
tracker's undo order, the pool flag that keeps pools without groups off the check, the
funnel's reason, and the API models of both groups carrying the field to the allocator.
"""

from __future__ import annotations

from typing import Any

import pytest

from operators import api
from operators.allocator import AllocatorState, Features, NodeInfo, UsedDevice
from operators.allocator.allocated import AllocatedDevices
from operators.allocator.compatibility import Common, GroupTracker
from operators.allocator.compiled import compile_slice
from operators.allocator.pools import Pool

DRIVER = "gpu.example.com"
NODE = "node-0"
ON = Features(compatibility_groups=True)


def part(name: str, *groups: str, counter_set: str = "gpu-0") -> dict[str, Any]:
    use: dict[str, Any] = {"counterSet": counter_set, "counters": {"mem": {"value": "1"}}}
    if groups:
        use["compatibilityGroups"] = list(groups)
    return {"name": name, "consumesCounters": [use]}


def slices(*devices: dict[str, Any], api_version: str = "") -> list[dict[str, Any]]:
    """A pool of two slices: the devices, and the counter set they draw from."""
    pool = {"name": NODE, "generation": 1, "resourceSliceCount": 2}
    out = [
        {
            "metadata": {"name": "parts"},
            "spec": {"driver": DRIVER, "nodeName": NODE, "pool": pool, "devices": list(devices)},
        },
        {
            "metadata": {"name": "counters"},
            "spec": {
                "driver": DRIVER,
                "nodeName": NODE,
                "pool": pool,
                "sharedCounters": [{"name": "gpu-0", "counters": {"mem": {"value": "8"}}}],
            },
        },
    ]
    if api_version:
        for obj in out:
            obj.update(apiVersion=api_version, kind="ResourceSlice")
    return out


def gpu_class() -> dict[str, Any]:
    expr = f'device.driver == "{DRIVER}"'
    return {"metadata": {"name": "part"}, "spec": {"selectors": [{"cel": {"expression": expr}}]}}


def part_claim(name: str, count: int = 1) -> dict[str, Any]:
    exactly = {"deviceClassName": "part", "count": count}
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "p", "exactly": exactly}]}},
    }


def state_with(features: Features, *devices: dict[str, Any]) -> AllocatorState:
    state = AllocatorState(features)
    for obj in slices(*devices):
        state.upsert_slice(obj)
    state.upsert_class(gpu_class())
    return state


def chosen(state: AllocatorState, count: int = 1) -> list[str] | None:
    results = state.allocate([part_claim("c", count)], NODE)
    return None if results is None else [d.device for d in results[0].devices]


# --- the rule ----------------------------------------------------------------------------


def test_devices_must_keep_a_group_in_common() -> None:
    common = Common.of(frozenset({"a", "b"}))
    assert common.admits(frozenset({"b", "c"})) and not common.admits(frozenset({"c"}))
    common = common.with_device(frozenset({"b", "c"}))
    # "a" was common to the first device only: a third one needs "b".
    assert not common.admits(frozenset({"a"})) and common.admits(frozenset({"b"}))


def test_devices_without_groups_go_only_with_each_other() -> None:
    ungrouped = Common.of(frozenset())
    assert ungrouped.admits(frozenset()) and not ungrouped.admits(frozenset({"a"}))
    assert not Common.of(frozenset({"a"})).admits(frozenset())
    assert ungrouped.with_device(frozenset()) == ungrouped


def test_a_refused_take_leaves_every_counter_set_as_it_was() -> None:
    """A device on two sets, admitted by the first and refused by the second."""
    spanning = {
        "name": "wide",
        "consumesCounters": [
            {"counterSet": "one", "counters": {"c": {"value": "1"}}, "compatibilityGroups": ["x"]},
            {"counterSet": "two", "counters": {"c": {"value": "1"}}, "compatibilityGroups": ["x"]},
        ],
    }
    grouped = slices(part("a", "x", counter_set="one"), part("b", "y", counter_set="two"), spanning)
    a, b, wide = compile_slice(grouped[0]).devices
    pool = Pool(id=(DRIVER, NODE), compatibility_groups=True)
    tracker = GroupTracker()
    nothing = AllocatedDevices()
    assert tracker.take(a, pool, nothing) and tracker.take(b, pool, nothing)
    before = dict(tracker.common[pool.id])
    assert not tracker.take(wide, pool, nothing)
    assert tracker.common[pool.id] == before
    tracker.give_back(b)
    tracker.give_back(a)
    assert tracker.common[pool.id] == {}
    assert tracker.take(wide, pool, nothing)


def test_takes_are_given_back_newest_first() -> None:
    a, b = compile_slice(slices(part("a", "x"), part("b", "x"))[0]).devices
    pool = Pool(id=(DRIVER, NODE), compatibility_groups=True)
    tracker = GroupTracker()
    assert tracker.take(a, pool, AllocatedDevices()) and tracker.take(b, pool, AllocatedDevices())
    with pytest.raises(AssertionError, match="out of order"):
        tracker.give_back(a)


# --- compiled objects and pools ------------------------------------------------------------


def test_only_slices_that_name_groups_are_marked() -> None:
    grouped, counters = map(compile_slice, slices(part("a"), part("b", "x")))
    assert grouped.uses_compatibility_groups and not counters.uses_compatibility_groups
    plain = compile_slice(slices(part("a"))[0])
    assert not plain.uses_compatibility_groups and plain.devices[0].compatibility_groups == ()
    assert grouped.devices[1].compatibility_groups == (frozenset({"x"}),)


def test_pools_without_groups_are_not_checked() -> None:
    """Where no device names a group every device is admitted: the search skips the check."""
    for devices, expected in (((part("a"), part("b")), False), ((part("a", "x"),), True)):
        state = state_with(ON, *devices)
        (pool,) = state.pools_for(NodeInfo(NODE))
        assert pool.compatibility_groups is expected


def test_the_gate_is_off_by_default_and_then_the_pool_is_left_out() -> None:
    assert not Features().compatibility_groups
    assert Features.from_gates({"DRADeviceCompatibilityGroups": True}).compatibility_groups
    # device "a" names no group but shares the pool with "b", which does.
    assert chosen(state_with(Features(), part("a"), part("b", "x"))) is None
    assert chosen(state_with(ON, part("a"), part("b", "x"))) == ["a"]


def test_the_search_takes_the_devices_that_go_together() -> None:
    state = state_with(ON, part("a", "mig"), part("b", "vgpu"), part("c", "mig", "vgpu"))
    assert chosen(state, 2) == ["a", "c"]
    state.allocated.add(UsedDevice((DRIVER, NODE, "b")))
    assert chosen(state) == ["c"]


# --- explanations --------------------------------------------------------------------------


def test_a_device_refused_by_an_allocated_peer_is_explained() -> None:
    state = state_with(ON, part("a", "mig"), part("b", "vgpu"))
    state.allocated.add(UsedDevice((DRIVER, NODE, "a")))
    placement = state.find_node([part_claim("c")], [NodeInfo(NODE)])
    assert placement.node is None and placement.explanation is not None
    lines = placement.explanation.lines()
    assert lines[0] == (
        '0/1 nodes: 1 devices of class "part" share no compatibility group with the devices '
        "allocated on their counter sets (need 1)"
    )
    assert lines[1] == (
        'node-0: request "p": 2 devices match class "part", 1 free, '
        "0 compatible with the devices allocated beside them, 1 wanted"
    )


def test_devices_that_clash_with_each_other_are_explained() -> None:
    state = state_with(ON, part("a", "mig"), part("b", "vgpu"))
    placement = state.find_node([part_claim("c", 2)], [NodeInfo(NODE)])
    assert placement.explanation is not None
    assert "compatibility groups" in placement.explanation.aggregate_line()


# --- API models --------------------------------------------------------------------------


@pytest.mark.parametrize("api_version", ["resource.k8s.io/v1", "resource.dralloc.dev/v1"])
def test_both_api_groups_carry_the_groups_to_the_allocator(api_version: str) -> None:
    state = AllocatorState(ON)
    for obj in slices(part("a", "mig"), part("b", "vgpu"), api_version=api_version):
        model = api.parse_object(obj)
        if obj["spec"].get("devices"):
            assert '"compatibilityGroups":["mig"]' in model.model_dump_json(by_alias=True)
        state.upsert_slice(model)
    state.upsert_class(gpu_class())
    assert state.allocate([part_claim("c", 2)], NODE) is None
