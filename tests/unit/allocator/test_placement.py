"""find_node: prioritized-list ranking, the index prefilter, and agreement with per-node search."""

from __future__ import annotations

import random
from typing import Any

import pytest

from operators.allocator import AllocatorState, NodeInfo, compile_claim, placement
from operators.allocator.ranking import allocation_score

DRIVER = "gpu.example.com"


def device(name: str, model: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "attributes": {"model": {"string": model}}, **extra}


def node_slice(node: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-slice"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def model_class(model: str) -> dict[str, Any]:
    expr = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "{model}"'
    return {"metadata": {"name": model}, "spec": {"selectors": [{"cel": {"expression": expr}}]}}


def prioritized(name: str, *subs: tuple[str, str, int]) -> dict[str, Any]:
    """A firstAvailable request from (subrequest name, class, count) alternatives."""
    return {
        "name": name,
        "firstAvailable": [
            {"name": sub, "deviceClassName": cls, "count": count} for sub, cls, count in subs
        ],
    }


def claim_of(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"devices": {"requests": list(requests)}},
    }


def large_or_two_small() -> dict[str, Any]:
    return claim_of("c", prioritized("gpu", ("large", "large", 1), ("two-small", "small", 2)))


def two_models(**nodes: tuple[str, int]) -> AllocatorState:
    """node name -> (model, device count)."""
    state = AllocatorState()
    for node, (model, count) in nodes.items():
        state.upsert_slice(node_slice(node, [device(f"d{i}", model) for i in range(count)]))
    state.upsert_class(model_class("large"))
    state.upsert_class(model_class("small"))
    return state


def requests_of(placement: Any) -> list[str]:
    return [d.request for a in placement.allocations for d in a.devices]


@pytest.mark.parametrize("policy", ["binpack", "spread", "first-fit"])
def test_a_node_where_the_first_subrequest_fits_wins_over_every_policy(policy: str) -> None:
    # Binpack alone prefers node-b (no device left after two-small); first-fit
    # alone prefers node-b (listed first). The prioritized list says node-a.
    state = two_models(**{"node-a": ("large", 3), "node-b": ("small", 2)})
    placement = state.find_node([large_or_two_small()], ["node-b", "node-a"], policy)
    assert placement.node == "node-a"
    assert requests_of(placement) == ["gpu/large"]


def test_the_policy_orders_nodes_with_the_same_subrequest() -> None:
    state = two_models(**{"node-a": ("large", 3), "node-b": ("large", 1), "node-c": ("small", 2)})
    nodes = ["node-a", "node-b", "node-c"]
    assert state.find_node([large_or_two_small()], nodes, "binpack").node == "node-b"
    assert state.find_node([large_or_two_small()], nodes, "spread").node == "node-a"


def test_the_search_has_the_last_word_when_the_counts_promise_too_much() -> None:
    # node-a's large devices are tainted: the counts say "large fits", the
    # search takes two-small. node-b really fits large and must win, although
    # binpack would try node-a first.
    state = AllocatorState()
    taint = {"taints": [{"key": "broken", "effect": "NoSchedule"}]}
    state.upsert_slice(
        node_slice(
            "node-a",
            [device("l0", "large", **taint), device("s0", "small"), device("s1", "small")],
        )
    )
    state.upsert_slice(node_slice("node-b", [device(f"l{i}", "large") for i in range(4)]))
    state.upsert_class(model_class("large"))
    state.upsert_class(model_class("small"))
    placement = state.find_node([large_or_two_small()], ["node-a", "node-b"])
    assert placement.node == "node-b"
    assert requests_of(placement) == ["gpu/large"]
    assert placement.nodes_searched == 2


def test_scores_add_up_across_requests_as_upstream() -> None:
    # node-x: a gets s0 (8), b gets s2 (6) = 14; node-y: 7 + 7 = 14;
    # node-z: 8 + 7 = 15 wins, although node-x comes before it by name.
    state = AllocatorState()
    models = {
        "node-x": ["m0", "m2", "m2"],
        "node-y": ["m1", "m1", "m1", "m1"],
        "node-z": ["m0", "m1", "m1", "m1", "m1"],
    }
    for node, names in models.items():
        state.upsert_slice(node_slice(node, [device(f"d{i}", m) for i, m in enumerate(names)]))
    for model in ("m0", "m1", "m2"):
        state.upsert_class(model_class(model))
    subs = (("s0", "m0", 1), ("s1", "m1", 1), ("s2", "m2", 1))
    pod = claim_of("c", prioritized("a", *subs), prioritized("b", *subs))
    placement = state.find_node([pod], list(models))
    assert placement.node == "node-z"
    assert sorted(requests_of(placement)) == ["a/s0", "b/s1"]
    compiled = [compile_claim(pod)]
    assert allocation_score(compiled, placement.allocations) == 15


def test_firstavailable_prefilter_searches_only_nodes_with_a_fitting_subrequest() -> None:
    state = two_models(
        **{f"node-{i}": ("small", 1) for i in range(5)},
        **{"node-8": ("small", 2), "node-9": ("medium", 4)},
    )
    placement = state.find_node([large_or_two_small()], [f"node-{i}" for i in range(10)])
    assert placement.node == "node-8"
    assert placement.nodes_searched == 1


def test_prefilter_keeps_a_node_where_a_later_subrequest_fits_next_to_a_plain_request() -> None:
    # Taking "large" greedily (2 devices) would leave nothing for the plain
    # request; the search takes "one" instead. The node must stay a candidate.
    state = two_models(**{"node-a": ("large", 2)})
    pod = claim_of(
        "c",
        prioritized("gpu", ("two", "large", 2), ("one", "large", 1)),
        {"name": "plain", "exactly": {"deviceClassName": "large"}},
    )
    placement = state.find_node([pod], ["node-a"], "first-fit")
    assert placement.node == "node-a"
    assert sorted(requests_of(placement)) == ["gpu/one", "plain"]


def test_prefilter_keeps_a_node_whose_shared_device_serves_two_requests() -> None:
    state = AllocatorState()
    nic = {
        "name": "nic",
        "allowMultipleAllocations": True,
        "capacity": {"bandwidth": {"value": "10"}},
    }
    state.upsert_slice(node_slice("node-a", [nic]))
    state.upsert_class(
        {
            "metadata": {"name": "nic"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    wants = {"deviceClassName": "nic", "capacity": {"requests": {"bandwidth": "1"}}}
    pod = claim_of("c", {"name": "a", "exactly": wants}, {"name": "b", "exactly": wants})
    assert state.allocate([pod], "node-a") is not None
    assert state.find_node([pod], ["node-a"]).node == "node-a"


# --- agreement with the per-node search on random clusters -----------------------------

MODELS = ("m0", "m1", "m2")


def random_cluster(rng: random.Random, nodes: int) -> AllocatorState:
    state = AllocatorState()
    for n in range(nodes):
        devices = []
        for i in range(rng.randint(0, 5)):
            extra: dict[str, Any] = {}
            if rng.random() < 0.15:
                extra["taints"] = [{"key": "broken", "effect": "NoSchedule"}]
            devices.append(device(f"d{i}", rng.choice(MODELS), **extra))
        state.upsert_slice(node_slice(f"node-{n}", devices))
    for model in MODELS:
        state.upsert_class(model_class(model))
    return state


def random_request(rng: random.Random, name: str) -> dict[str, Any]:
    if rng.random() < 0.5:
        return {
            "name": name,
            "exactly": {"deviceClassName": rng.choice(MODELS), "count": rng.randint(1, 2)},
        }
    subs = [(f"s{i}", rng.choice(MODELS), rng.randint(1, 3)) for i in range(rng.randint(1, 3))]
    return prioritized(name, *subs)


@pytest.mark.parametrize("seed", range(40))
def test_find_node_finds_the_best_score_and_never_misses_a_node(seed: int) -> None:
    rng = random.Random(seed)
    state = random_cluster(rng, 8)
    nodes = [NodeInfo(f"node-{n}") for n in range(8)]
    for round_ in range(4):
        pod = claim_of(
            f"c{round_}", *(random_request(rng, f"r{i}") for i in range(rng.randint(1, 3)))
        )
        compiled = [compile_claim(pod)]
        scores = {}
        for node in nodes:
            results = state.allocate([pod], node)
            if results is not None:
                scores[node.name] = allocation_score(compiled, results)
        for policy in ("binpack", "spread", "first-fit"):
            placement = state.find_node([pod], nodes, policy)
            if not scores:
                assert placement.node is None
                continue
            assert placement.node is not None
            assert allocation_score(compiled, placement.allocations) == max(scores.values())
        placement = state.find_node([pod], nodes)
        if placement.node is not None:  # fill the cluster a little between rounds
            state.assume(pod, placement.allocations[0])


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("policy", ["binpack", "spread"])
@pytest.mark.parametrize("first_fit_before", [False, True])
def test_bucket_fast_path_ranks_like_the_per_node_loop(
    seed: int, policy: str, first_fit_before: bool
) -> None:
    rng = random.Random(seed)
    state = random_cluster(rng, 12)
    nodes = [NodeInfo(f"node-{n}") for n in range(12)]
    index = state.device_index()
    if first_fit_before:
        # Allocations while only first fit has asked: the index keeps no buckets then,
        # and builds them from the free counts when a ranking policy first asks.
        for i in range(rng.randint(1, 6)):
            model = rng.choice(MODELS)
            exactly = {"deviceClassName": model, "count": rng.randint(1, 2)}
            pod = claim_of(f"ff{i}", {"name": "gpu", "exactly": exactly})
            found = state.find_node([pod], tuple(nodes), "first-fit")
            if found.node is not None:
                state.assume(pod, found.allocations[0])

    for round_ in range(3):
        subs = [(f"s{i}", rng.choice(MODELS), rng.randint(1, 3)) for i in range(rng.randint(1, 3))]
        pod = claim_of(f"c{round_}", prioritized("gpu", *subs))
        compiled = state.compile_claims([pod])
        plan = placement._plan(compiled)
        fast = placement._bucket_order(index, plan, nodes, policy)
        assert fast is not None
        fast_keys = [key for key, _ in fast]
        slow_keys = []
        for node in nodes:
            counts = {
                d.signature: (*index.counts(d.signature, node), False) for d in plan.choices[0]
            }
            rank = placement._rank_node(counts, plan)
            if rank is not None:
                left = rank[1] if policy == "binpack" else -rank[1]
                slow_keys.append((-rank[0], left, node.name))
        assert fast_keys == sorted(slow_keys)
        found = state.find_node([pod], nodes, policy)
        if found.node is not None:
            state.assume(pod, found.allocations[0])


def test_free_counts_of_network_attached_devices_follow_assume_and_release() -> None:
    state = AllocatorState()
    state.upsert_slice(
        {
            "metadata": {"name": "rack"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "rack", "generation": 0, "resourceSliceCount": 1},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]}]}
                    ]
                },
                "devices": [device(f"d{i}", "large") for i in range(3)],
            },
        }
    )
    state.upsert_class(model_class("large"))
    in_rack = [NodeInfo("node-1", {"rack": "a"}), NodeInfo("node-2", {"rack": "a"})]
    elsewhere = NodeInfo("node-3", {"rack": "b"})
    pods = [
        claim_of(f"c{i}", {"name": "r", "exactly": {"deviceClassName": "large"}}) for i in range(4)
    ]
    placed = []
    for pod in pods:
        found = state.find_node([pod], [*in_rack, elsewhere])
        if found.node is not None:
            state.assume(pod, found.allocations[0])
            placed.append(pod)
    assert len(placed) == 3  # three devices, reached from two nodes: counted once
    signature = placement._plan(state.compile_claims(pods[:1])).plain[0].signature
    index = state.device_index()
    assert index.counts(signature, in_rack[0]) == (3, 0)
    assert index.counts(signature, elsewhere) == (0, 0)
    state.release(placed[1])
    assert index.counts(signature, in_rack[1]) == (3, 1)
    assert state.find_node([pods[3]], [elsewhere, *in_rack]).node == "node-1"


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("policy", ["binpack", "spread", "first-fit"])
def test_a_node_check_places_as_the_nodes_it_admits_would(seed: int, policy: str) -> None:
    """``admits`` asked during the walk gives the placement of the filtered node list, and
    is asked only of nodes the device counts let through."""
    rng = random.Random(seed)
    state = random_cluster(rng, 10)
    nodes = tuple(NodeInfo(f"node-{n}") for n in range(10))
    for round_ in range(4):
        allowed = {node.name for node in nodes if rng.random() < 0.6}
        asked: list[str] = []

        def admits(node: NodeInfo, allowed: set[str] = allowed, asked: list[str] = asked) -> bool:
            asked.append(node.name)
            return node.name in allowed

        pod = claim_of(
            f"c{round_}", *(random_request(rng, f"r{i}") for i in range(rng.randint(1, 2)))
        )
        filtered = [node for node in nodes if node.name in allowed]
        expected = state.find_node([pod], filtered, policy, explain=False)
        found = state.find_node([pod], nodes, policy, explain=False, admits=admits)
        assert (found.node, found.allocations) == (expected.node, expected.allocations)
        assert found.nodes_searched == expected.nodes_searched
        index = state.device_index()
        plan = placement._plan(state.compile_claims([pod]))
        signatures = [d.signature for d in plan.plain]
        signatures += [d.signature for options in plan.choices for d in options]
        for name in asked:  # never a node without a free device the pod could use
            assert any(index.counts(sig, NodeInfo(name))[1] for sig in signatures)
        if found.node is not None:
            state.assume(pod, found.allocations[0])
