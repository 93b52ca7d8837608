"""AllocatorState: incremental updates, assume/release, find_node, explanations, budget."""

from __future__ import annotations

from typing import Any

import pytest

from operators import api
from operators.allocator import (
    AllocationError,
    AllocatorState,
    Features,
    NodeInfo,
    SearchBudgetExceeded,
)

DRIVER = "gpu.example.com"


def gpu_slice(
    node: str, count: int, model: str = "a100", generation: int = 0, taint: bool = False
) -> dict[str, Any]:
    devices = []
    for i in range(count):
        device: dict[str, Any] = {
            "name": f"gpu-{i}",
            "attributes": {"model": {"string": model}, "index": {"int": i}},
        }
        if taint:
            device["taints"] = [{"key": "broken", "effect": "NoSchedule"}]
        devices.append(device)
    return {
        "metadata": {"name": f"{node}-gpus", "resourceVersion": str(generation)},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def gpu_class(name: str = "a100", model: str = "a100") -> dict[str, Any]:
    expr = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "{model}"'
    return {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": expr}}]}}


def gpu_claim(name: str, count: int = 1, cls: str = "a100", **extra: Any) -> dict[str, Any]:
    exactly = {"deviceClassName": cls, "count": count, **extra}
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def cluster(nodes: int = 3, per_node: int = 4) -> AllocatorState:
    state = AllocatorState()
    for n in range(nodes):
        state.upsert_slice(gpu_slice(f"node-{n}", per_node))
    state.upsert_class(gpu_class())
    return state


NODES = [f"node-{n}" for n in range(3)]


def test_allocate_returns_devices_and_pins_the_node() -> None:
    state = cluster()
    results = state.allocate([gpu_claim("c", 2)], "node-1")
    assert results is not None
    (alloc,) = results
    assert [d.device for d in alloc.devices] == ["gpu-0", "gpu-1"]
    assert alloc.to_dict()["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
        "node-1"
    ]


def test_assume_hides_devices_and_release_returns_them() -> None:
    state = cluster(nodes=1, per_node=2)
    first = state.allocate([gpu_claim("a", 2)], "node-0")
    assert first is not None
    state.assume(gpu_claim("a", 2), first[0])
    assert state.allocate([gpu_claim("b")], "node-0") is None
    state.release(gpu_claim("a", 2))
    assert state.allocate([gpu_claim("b")], "node-0") is not None


def test_confirmed_status_replaces_the_assumption() -> None:
    state = cluster(nodes=1, per_node=2)
    (alloc,) = state.allocate([gpu_claim("a")], "node-0") or []
    state.assume(gpu_claim("a"), alloc)
    confirmed = gpu_claim("a") | {"status": {"allocation": alloc.to_dict()}}
    state.upsert_claim(confirmed)
    assert not state.is_assumed(gpu_claim("a"))
    assert state.allocated.in_use((DRIVER, "node-0", "gpu-0"))
    state.remove_claim(confirmed)
    assert not state.allocated.in_use((DRIVER, "node-0", "gpu-0"))


def at_version(claim: dict[str, Any], version: int, allocation: Any = None) -> dict[str, Any]:
    out = {**claim, "metadata": {**claim["metadata"], "resourceVersion": str(version)}}
    if allocation is not None:
        out["status"] = {"allocation": allocation.to_dict()}
    return out


def test_a_claim_watched_on_one_device_and_decided_again_onto_another_holds_both() -> None:
    # The watch shows a on gpu-0 (version 11). dralloc gives it back (its answer, version 12,
    # is not watched yet) and decides it again onto gpu-1: until the watch catches up, both
    # are a's, or the next claim is handed one of them.
    state = cluster(nodes=1, per_node=3)
    (old,) = state.allocate([gpu_claim("a")], "node-0") or []
    state.upsert_claim(at_version(gpu_claim("a"), 11, old))
    given_back = at_version(gpu_claim("a"), 12)
    (new,) = state.allocate([given_back], "node-0") or []
    assert [d.device for d in new.devices] == ["gpu-1"]
    state.assume(given_back, new)
    assert state.allocated.in_use((DRIVER, "node-0", "gpu-0"))
    assert state.allocated.in_use((DRIVER, "node-0", "gpu-1"))
    (other,) = state.allocate([gpu_claim("b")], "node-0") or []
    assert [d.device for d in other.devices] == ["gpu-2"]
    assert state.clashes([other]) == []
    # The watch shows the give-back, then the new allocation: gpu-0 is free again.
    state.upsert_claim(at_version(gpu_claim("a"), 12))
    assert not state.allocated.in_use((DRIVER, "node-0", "gpu-0"))
    state.upsert_claim(at_version(gpu_claim("a"), 13, new))
    assert not state.is_assumed(gpu_claim("a"))
    assert [state.allocated.in_use((DRIVER, "node-0", f"gpu-{n}")) for n in range(3)] == [
        False, True, False,
    ]  # fmt: skip


def test_a_watched_allocation_older_than_the_write_does_not_end_its_assumption() -> None:
    state = cluster(nodes=1, per_node=3)
    written = at_version(gpu_claim("a"), 12)
    (new,) = state.allocate([written], "node-0") or []
    state.assume(written, new)  # gpu-0, written over version 12
    (old,) = state.allocate([gpu_claim("z")], "node-0") or []
    assert [d.device for d in old.devices] == ["gpu-1"]
    state.upsert_claim(at_version(gpu_claim("a"), 11, old))  # the watch, behind, shows gpu-1
    assert state.is_assumed(gpu_claim("a"))
    (other,) = state.allocate([gpu_claim("b")], "node-0") or []
    assert [d.device for d in other.devices] == ["gpu-2"]


def test_slice_update_and_removal_change_what_is_allocatable() -> None:
    state = cluster(nodes=1, per_node=1)
    assert state.allocate([gpu_claim("c", 2)], "node-0") is None
    state.upsert_slice(gpu_slice("node-0", 2, generation=1))
    assert state.allocate([gpu_claim("c", 2)], "node-0") is not None
    state.remove_slice("node-0-gpus")
    assert state.allocate([gpu_claim("c")], "node-0") is None


def test_class_change_is_seen() -> None:
    state = cluster(nodes=1)
    state.upsert_class(gpu_class(model="h100"))
    assert state.allocate([gpu_claim("c")], "node-0") is None
    state.remove_class("a100")
    with pytest.raises(AllocationError, match="could not retrieve device class a100"):
        state.allocate([gpu_claim("c")], "node-0")


def test_taint_rule_blocks_and_toleration_allows() -> None:
    state = cluster(nodes=1)
    rule = {
        "metadata": {"name": "maintenance"},
        "spec": {
            "deviceSelector": {"pool": "node-0"},
            "taint": {"key": "m", "effect": "NoExecute"},
        },
    }
    state.upsert_taint_rule(rule)
    assert state.allocate([gpu_claim("c")], "node-0") is None
    tolerant = gpu_claim("c", tolerations=[{"key": "m", "operator": "Exists"}])
    (alloc,) = state.allocate([tolerant], "node-0") or []
    assert alloc.devices[0].tolerations == ({"key": "m", "operator": "Exists"},)
    state.remove_taint_rule("maintenance")
    assert state.allocate([gpu_claim("c")], "node-0") is not None


def test_taint_rule_without_selector_matches_nothing() -> None:
    state = cluster(nodes=1)
    state.upsert_taint_rule(
        {"metadata": {"name": "r"}, "spec": {"taint": {"key": "m", "effect": "NoSchedule"}}}
    )
    assert state.allocate([gpu_claim("c")], "node-0") is not None


def test_find_node_binpack_spread_and_first_fit() -> None:
    state = cluster()
    (alloc,) = state.allocate([gpu_claim("a")], "node-1") or []
    state.assume(gpu_claim("a"), alloc)
    assert state.find_node([gpu_claim("b")], NODES).node == "node-1"  # fewest left
    assert (
        state.find_node([gpu_claim("b")], NODES, "spread").node == "node-0"
    )  # most left, then name
    assert state.find_node([gpu_claim("b")], ["node-2", "node-0"], "first-fit").node == "node-2"
    with pytest.raises(ValueError, match="unknown placement policy"):
        state.find_node([gpu_claim("b")], NODES, "random")


def test_find_node_skips_nodes_the_index_rules_out() -> None:
    state = cluster()
    state.upsert_slice(gpu_slice("node-9", 8, model="h100"))
    placement = state.find_node([gpu_claim("b", 4)], [*NODES, "node-9"])
    assert placement.node == "node-0"
    assert placement.nodes_searched == 1


def test_find_node_tracks_allocations_incrementally() -> None:
    state = cluster(nodes=2, per_node=2)
    placed = []
    for i in range(4):
        placement = state.find_node([gpu_claim(f"c{i}")], ["node-0", "node-1"])
        assert placement.node is not None
        state.assume(gpu_claim(f"c{i}"), placement.allocations[0])
        placed.append(placement.node)
    assert placed == ["node-0", "node-0", "node-1", "node-1"]
    assert state.find_node([gpu_claim("c5")], ["node-0", "node-1"]).node is None
    state.release(gpu_claim("c1"))
    assert state.find_node([gpu_claim("c5")], ["node-0", "node-1"]).node == "node-0"


def test_explanation_lines_group_identical_nodes() -> None:
    state = cluster()
    state.upsert_slice(gpu_slice("node-7", 8))
    for i in range(7):
        state.assume(
            gpu_claim(f"x{i}"),
            {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": "node-7", "device": f"gpu-{i}"}
                    ]
                }
            },
        )
    placement = state.find_node([gpu_claim("big", 5)], [*NODES, "node-7"])
    assert placement.node is None and placement.explanation is not None
    lines = placement.explanation.lines()
    assert (
        lines[0]
        == '0/4 nodes: 3 not enough devices of class "a100" (need 5), 1 not enough free devices of class "a100" (need 5)'
    )
    assert 'node-7: request "gpu": 8 devices match class "a100", 1 free, 5 wanted' in lines


def test_explanation_reports_untolerated_taints_and_missing_class() -> None:
    state = AllocatorState()
    state.upsert_slice(gpu_slice("node-0", 2, taint=True))
    state.upsert_class(gpu_class())
    explanation = state.explain([gpu_claim("c")], ["node-0"])
    assert "untolerated taints" in explanation.aggregate_line()
    assert state.explain([gpu_claim("c", cls="nope")], ["node-0"]).fatal_error is not None


def test_explanation_mentions_constraints_when_devices_fit_alone() -> None:
    state = cluster(nodes=1)
    claim = gpu_claim("c", 2)
    claim["spec"]["devices"]["constraints"] = [{"matchAttribute": f"{DRIVER}/index"}]
    placement = state.find_node([claim], ["node-0"])
    assert placement.node is None and placement.explanation is not None
    assert "not together" in placement.explanation.aggregate_line()


def test_search_budget_gives_a_clear_error() -> None:
    state = AllocatorState(budget=50)
    state.upsert_slice(gpu_slice("node-0", 12))
    state.upsert_class(gpu_class())
    claim = gpu_claim("c", 6)
    # Two more devices with distinct models cannot exist (all are a100), but only the
    # search finds out, after trying every combination for the first request.
    claim["spec"]["devices"]["requests"].append(
        {"name": "pair", "exactly": {"deviceClassName": "a100", "count": 2}}
    )
    claim["spec"]["devices"]["constraints"] = [
        {"distinctAttribute": f"{DRIVER}/model", "requests": ["pair"]}
    ]
    with pytest.raises(SearchBudgetExceeded, match="search budget of 50 steps exceeded"):
        state.allocate([claim], "node-0")
    placement = state.find_node([claim], ["node-0"])
    assert placement.explanation is not None
    assert "search budget" in placement.explanation.lines()[1]


def test_features_from_gates() -> None:
    features = Features.from_gates({"DRAListTypeAttributes": True, "DRAAdminAccess": False})
    assert features.list_type_attributes and not features.admin_access and features.prioritized_list
    with pytest.raises(ValueError):
        Features.from_gates({"NoSuchGate": True})


def test_models_parse_the_same_as_dicts() -> None:
    slice_obj = gpu_slice("node-0", 2) | {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
    }
    class_obj = gpu_class() | {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass"}
    claim_obj = gpu_claim("c", 2) | {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim"}
    from_dicts = cluster(nodes=0)
    from_dicts.upsert_slice(slice_obj)
    from_models = AllocatorState()
    from_models.upsert_slice(api.parse_object(slice_obj))
    from_models.upsert_class(api.parse_object(class_obj))
    a = from_dicts.allocate([claim_obj], NodeInfo("node-0"))
    b = from_models.allocate([api.parse_object(claim_obj)], NodeInfo("node-0"))
    assert a is not None and b is not None
    assert [x.to_dict() for x in a] == [x.to_dict() for x in b]


def test_a_malformed_version_attribute_fails_the_selector_not_the_allocator() -> None:
    state = AllocatorState()
    broken = gpu_slice("node-0", 1)
    broken["spec"]["devices"][0]["attributes"]["driverVersion"] = {"version": "not-semver"}
    state.upsert_slice(broken)
    expr = f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("1.0.0"))'
    state.upsert_class(
        {"metadata": {"name": "a100"}, "spec": {"selectors": [{"cel": {"expression": expr}}]}}
    )
    placement = state.find_node([gpu_claim("c")], [NodeInfo("node-0", {})])
    assert placement.node is None
    assert placement.explanation is not None
    assert "not-semver" in "\n".join(placement.explanation.lines())


def test_a_pool_whose_slices_disagree_on_the_slice_count_is_invalid() -> None:
    state = AllocatorState()
    first, second = gpu_slice("node-0", 1), gpu_slice("node-0", 1)
    second["metadata"]["name"] = "node-0-more"
    second["spec"]["devices"][0]["name"] = "gpu-9"
    first["spec"]["pool"]["resourceSliceCount"] = 2
    state.upsert_slice(first)
    state.upsert_slice(second)
    state.upsert_class(gpu_class())
    placement = state.find_node([gpu_claim("c")], [NodeInfo("node-0", {})])
    assert placement.node is None
    assert placement.explanation is not None
    assert "disagree on resourceSliceCount (1, 2)" in "\n".join(placement.explanation.lines())


def test_claims_with_one_spec_share_its_compiled_form_but_keep_their_own_names() -> None:
    from operators.api import parse_object

    state = cluster()
    first = parse_object(
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", **gpu_claim("a")}
    )
    second = parse_object(
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", **gpu_claim("b")}
    )
    other = parse_object(
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", **gpu_claim("c", count=2)}
    )
    a, b, c = state.compile_claims([first, second, other])
    assert (a.name, b.name, c.name) == ("a", "b", "c")
    assert a.requests is b.requests  # compiled once
    assert c.requests is not a.requests
    assert c.requests[0].exactly is not None and c.requests[0].exactly.count == 2
    placement = state.find_node([other], [NodeInfo("node-0", {})], "first-fit")
    assert placement.node == "node-0"
    assert [d.device for d in placement.allocations[0].devices] == ["gpu-0", "gpu-1"]


def test_index_free_counts_follow_every_assume_and_release() -> None:
    state = cluster(nodes=2, per_node=3)
    nodes = [NodeInfo("node-0", {}), NodeInfo("node-1", {})]
    claims = [gpu_claim(f"c{i}") for i in range(7)]
    placed = []
    for claim in claims[:6]:
        found = state.find_node([claim], nodes, "first-fit")
        assert found.node is not None
        state.assume(claim, found.allocations[0])
        placed.append((claim, found.node))
    assert [node for _, node in placed] == ["node-0"] * 3 + ["node-1"] * 3
    assert state.find_node([claims[6]], nodes, "first-fit").node is None
    state.release(placed[4][0])  # a device on node-1 is free again
    assert state.find_node([claims[6]], nodes, "first-fit").node == "node-1"
    state.release(placed[0][0])
    assert state.find_node([claims[6]], nodes, "first-fit").node == "node-0"


def test_a_claim_keeps_one_compiled_version_and_none_once_gone() -> None:
    state = cluster()
    pending = gpu_claim("c")
    pending["metadata"]["resourceVersion"] = "1"
    first = state.compile_claims([pending])[0]
    assert state.compile_claims([pending])[0] is first  # compiled once per version
    allocated = gpu_claim("c")
    allocated["metadata"]["resourceVersion"] = "2"
    allocated["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": "node-0", "device": "gpu-0"}
                ]
            }
        }
    }
    state.upsert_claim(allocated)
    assert state._claim_cache == {}  # the unallocated version is not asked for again
    newer = state.compile_claims([allocated])[0]
    assert newer.resource_version == "2"
    assert state.compile_claims([pending])[0].resource_version == "1"
    state.remove_claim(allocated)
    assert state._claim_cache == {}


def test_a_landed_write_is_ended_by_any_later_watched_version() -> None:
    # Our write over version 5 was answered at 7; a relist skips 7 and shows 8, given back
    # by someone: the watch has passed our write and alone says what the claim holds.
    state = cluster(nodes=1, per_node=1)
    written = at_version(gpu_claim("a"), 5)
    (new,) = state.allocate([written], "node-0") or []
    state.assume(written, new)
    state.landed(written, "7")
    state.upsert_claim(at_version(gpu_claim("a"), 6))  # older than the write: kept
    assert state.is_assumed(written)
    state.upsert_claim(at_version(gpu_claim("a"), 8))
    assert not state.is_assumed(written)
    assert state.allocate([gpu_claim("b")], "node-0") is not None, "the device leaked"
