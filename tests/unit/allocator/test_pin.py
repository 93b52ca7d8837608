"""AttributePin: a search restricted to devices with one value of an attribute (what a gang
with a device-attribute topology searches under)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from operators.allocator import AllocatorState, NodeInfo
from operators.allocator.constraints import AttributePin
from tests.unit.allocator.test_placement import DRIVER, claim_of, model_class, node_slice

NVL = f"{DRIVER}/nvlinkDomain"


def gpu(name: str, domain: str | int | None) -> dict[str, Any]:
    """A "small" GPU in an NVLink domain (None: without the attribute)."""
    attributes: dict[str, Any] = {"model": {"string": "small"}}
    if isinstance(domain, str):
        attributes["nvlinkDomain"] = {"string": domain}
    elif isinstance(domain, int):
        attributes["nvlinkDomain"] = {"int": domain}
    return {"name": name, "attributes": attributes}


def cluster(**nodes: Sequence[str | int | None]) -> AllocatorState:
    state = AllocatorState()
    for node, domains in nodes.items():
        state.upsert_slice(node_slice(node, [gpu(f"d{i}", d) for i, d in enumerate(domains)]))
    state.upsert_class(model_class("small"))
    return state


def pin(value: str | int) -> AttributePin:
    return AttributePin(NVL, ("string" if isinstance(value, str) else "int", (value,)))


def request(count: int | None = 1, **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "small", **extra}
    if count is None:
        exactly["allocationMode"] = "All"
    else:
        exactly["count"] = count
    return {"name": "gpu", "exactly": exactly}


def devices_of(found: Any) -> list[str]:
    return [d.device for a in found.allocations for d in a.devices]


def test_a_pinned_search_takes_only_devices_with_the_value() -> None:
    state = cluster(**{"node-a": ["A", None, "B", "A"]})
    claim = claim_of("c", request(2))
    assert devices_of(state.find_node([claim], ["node-a"], "first-fit")) == ["d0", "d1"]
    found = state.find_node([claim], ["node-a"], "first-fit", pin=pin("A"))
    assert devices_of(found) == ["d0", "d3"]
    # One device has B, and the one without the attribute is not usable under a pin.
    assert state.find_node([claim], ["node-a"], "first-fit", pin=pin("B")).node is None
    # The pin was for that search only.
    assert devices_of(state.find_node([claim], ["node-a"], "first-fit")) == ["d0", "d1"]


def test_a_pin_compares_typed_values() -> None:
    domains: list[str | int | None] = ["1", 1]
    state = cluster(**{"node-a": domains})
    claim = claim_of("c", request(1))
    assert devices_of(state.find_node([claim], ["node-a"], "first-fit", pin=pin(1))) == ["d1"]
    assert devices_of(state.find_node([claim], ["node-a"], "first-fit", pin=pin("1"))) == ["d0"]


@pytest.mark.parametrize("policy", ["binpack", "spread", "first-fit"])
def test_a_pinned_search_passes_over_nodes_without_the_value(policy: str) -> None:
    # The index counts devices without the pin (it may only admit too many nodes): the
    # search has the last word.
    state = cluster(**{"node-a": ["B", "B"], "node-b": ["A"], "node-c": ["A", "A"]})
    claim = claim_of("c", request(2))
    found = state.find_node([claim], ["node-a", "node-b", "node-c"], policy, pin=pin("A"))
    assert found.node == "node-c" and devices_of(found) == ["d0", "d1"]


@pytest.mark.parametrize("policy", ["binpack", "spread", "first-fit"])
def test_all_mode_under_a_pin_needs_every_matching_device_to_have_the_value(policy: str) -> None:
    # As with a matchAttribute constraint, "all devices" stays all of them: a node whose
    # matching devices span two values does not fit (and is no error either).
    state = cluster(**{"node-a": ["A", "B"], "node-b": ["A", "A"]})
    claim = claim_of("c", request(None))
    found = state.find_node([claim], ["node-a", "node-b"], policy, pin=pin("A"))
    assert found.node == "node-b" and devices_of(found) == ["d0", "d1"]
    assert state.find_node([claim], ["node-a", "node-b"], policy, pin=pin("B")).node is None
    unpinned = state.find_node([claim], ["node-a", "node-b"], "first-fit")
    assert unpinned.node == "node-a" and devices_of(unpinned) == ["d0", "d1"]


def test_admin_access_requests_are_not_pinned() -> None:
    # adminAccess takes no device from anyone (monitoring, health checks): its devices are
    # not held to the pin, the claim's other requests are.
    state = cluster(**{"node-a": ["A", "B", None]})
    claim = claim_of("c", request(1))
    watch = claim_of("w", request(None, adminAccess=True))
    found = state.find_node([claim, watch], ["node-a"], "first-fit", pin=pin("B"))
    assert found.node == "node-a"
    assert [[d.device for d in a.devices] for a in found.allocations] == [
        ["d1"],
        ["d0", "d1", "d2"],
    ]


def test_a_pinned_search_skips_a_network_attached_slice_without_the_value() -> None:
    state = cluster(**{"node-a": ["B"]})
    shared = node_slice("fabric", [gpu("f0", "A"), gpu("f1", "B")])
    del shared["spec"]["nodeName"]
    shared["spec"]["allNodes"] = True
    state.upsert_slice(shared)
    claim = claim_of("c", request(2))
    found = state.find_node([claim], [NodeInfo("node-a")], "first-fit", pin=pin("B"))
    assert found.node == "node-a"
    assert sorted(d.device_id[2] for a in found.allocations for d in a.devices) == ["d0", "f1"]
