"""First-fit placement walks nodes lazily; per-pod work reads claims without dumping them."""

from __future__ import annotations

import random
from typing import Any

import pytest

from operators.allocator import AllocatorState, compile_claim
from operators.allocator.nodes import NodeInfo
from operators.allocator.state import claim_key
from operators.api import parse_object

DRIVER = "gpu.example.com"


def device(name: str, model: str, tainted: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "attributes": {"model": {"string": model}}}
    if tainted:
        out["taints"] = [{"key": "broken", "effect": "NoSchedule"}]
    return out


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


def claim_for(model: str, count: int = 1, name: str = "c") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {
            "devices": {
                "requests": [{"name": "r", "exactly": {"deviceClassName": model, "count": count}}]
            }
        },
    }


def cluster(nodes: dict[str, list[dict[str, Any]]]) -> AllocatorState:
    state = AllocatorState()
    for node, devices in nodes.items():
        state.upsert_slice(node_slice(node, devices))
    state.upsert_class(model_class("large"))
    state.upsert_class(model_class("small"))
    return state


def test_first_fit_stops_at_the_first_fitting_node_without_scanning_the_rest() -> None:
    # node-0 is ruled out by the index, node-1 fits; the eight "small" nodes after it
    # would also be ruled out, but a lazy walk never looks at them.
    nodes = {"node-0": [device("d", "small")], "node-1": [device("d", "large")]}
    nodes |= {f"node-{i}": [device("d", "small")] for i in range(2, 10)}
    state = cluster(nodes)
    placement = state.find_node([claim_for("large")], list(nodes), "first-fit")
    assert placement.node == "node-1"
    assert placement.nodes_searched == 1
    assert placement.nodes_prefiltered == 1


def test_first_fit_moves_on_when_the_search_rejects_a_node_the_index_kept() -> None:
    # The index ignores taints, so node-a passes the prefilter and fails the search.
    state = cluster(
        {"node-a": [device("d", "large", tainted=True)], "node-b": [device("d", "large")]}
    )
    placement = state.find_node([claim_for("large")], ["node-a", "node-b"], "first-fit")
    assert placement.node == "node-b"
    assert placement.nodes_searched == 2


def test_first_fit_counts_every_ruled_out_node_when_nothing_fits() -> None:
    state = cluster({f"node-{i}": [device("d", "small")] for i in range(4)})
    placement = state.find_node([claim_for("large")], [f"node-{i}" for i in range(4)], "first-fit")
    assert placement.node is None
    assert placement.nodes_prefiltered == 4
    assert placement.explanation is not None


@pytest.mark.parametrize("seed", range(20))
def test_first_fit_picks_the_first_node_in_order_where_allocate_succeeds(seed: int) -> None:
    rng = random.Random(seed)
    nodes = {
        f"node-{i}": [
            device(f"d{j}", rng.choice(["large", "small"]), tainted=rng.random() < 0.3)
            for j in range(rng.randint(0, 3))
        ]
        for i in range(12)
    }
    state = cluster(nodes)
    order = list(nodes)
    rng.shuffle(order)
    claim = claim_for(rng.choice(["large", "small"]), rng.randint(1, 2))
    expected = next((n for n in order if state.allocate([claim], n) is not None), None)
    assert state.find_node([claim], order, "first-fit").node == expected


def test_claim_key_and_compile_cache_read_a_model_without_dumping_it() -> None:
    model = parse_object(claim_for("large", name="gpu-claim"))
    assert claim_key(model) == "ns/gpu-claim"
    state = AllocatorState()
    first = state.compile_claims([model])[0]
    assert (first.namespace, first.name, first.uid) == ("ns", "gpu-claim", "uid-gpu-claim")
    # Same name and resourceVersion: the compiled claim comes from the cache.
    assert state.compile_claims([model])[0] is first


def test_a_compiled_request_carries_its_index_signature() -> None:
    claim = compile_claim(claim_for("small", name="x"))
    request = claim.requests[0].exactly
    assert request is not None
    assert request.signature == ("small", ())


def prioritized_claim(*models: str) -> dict[str, Any]:
    """One request whose alternatives are the given classes, best first."""
    claim = claim_for(models[0])
    claim["spec"]["devices"]["requests"] = [
        {
            "name": "r",
            "firstAvailable": [
                {"name": f"s{i}", "deviceClassName": model} for i, model in enumerate(models)
            ],
        }
    ]
    return claim


def test_first_fit_with_alternatives_prefers_a_later_node_with_a_better_one() -> None:
    # node-0 only offers the second choice; node-1 the first, so node-1 wins.
    state = cluster({"node-0": [device("d", "small")], "node-1": [device("d", "large")]})
    found = state.find_node(
        [prioritized_claim("large", "small")], ["node-0", "node-1"], "first-fit"
    )
    assert found.node == "node-1"
    assert found.allocations[0].devices[0].request == "r/s0"


def test_first_fit_with_an_alternative_no_device_matches_takes_the_first_node() -> None:
    # Nothing anywhere matches "huge": the best any node can do is the second choice, so
    # the first node offering it wins without the others being ranked.
    state = cluster({f"node-{i}": [device("d", "small")] for i in range(6)})
    state.upsert_class(model_class("huge"))
    found = state.find_node(
        [prioritized_claim("huge", "small")], [f"node-{i}" for i in range(6)], "first-fit"
    )
    assert found.node == "node-0"
    assert found.nodes_searched == 1


@pytest.mark.parametrize("seed", range(20))
def test_first_fit_with_alternatives_matches_a_full_ranking(seed: int) -> None:
    rng = random.Random(seed)
    models = ["large", "small", "huge"]
    nodes = {
        f"node-{i}": [
            device(f"d{j}", rng.choice(models[:2]), tainted=rng.random() < 0.3)
            for j in range(rng.randint(0, 3))
        ]
        for i in range(10)
    }
    state = cluster(nodes)
    state.upsert_class(model_class("huge"))
    order = list(nodes)
    rng.shuffle(order)
    choice = rng.sample(models, 2)
    claim = prioritized_claim(*choice)
    # The reference: every node allocated on its own, best alternative first, then order.
    results = [(n, state.allocate([claim], n)) for n in order]
    fitting = [(n, r) for n, r in results if r is not None]
    expected = None
    if fitting:
        best = min(
            fitting, key=lambda item: (int(item[1][0].devices[0].request[-1]), order.index(item[0]))
        )
        expected = best[0]
    assert state.find_node([claim], order, "first-fit").node == expected


@pytest.mark.parametrize("seed", range(40))
def test_the_first_fit_floor_changes_no_placement(seed: int) -> None:
    """A tuple of nodes lets first-fit start after the nodes it found full before (the
    index's floor); over fills and releases every pod must land where a walk over all
    nodes puts it, with the same devices and the same count of nodes ruled out."""
    rng = random.Random(seed)
    nodes = {
        f"node-{i}": [
            device(f"d{j}", rng.choice(["large", "large", "small"]), tainted=rng.random() < 0.1)
            for j in range(rng.randint(0, 4))
        ]
        for i in range(10)
    }
    with_floor, walked = cluster(nodes), cluster(nodes)
    infos = tuple(NodeInfo(name, {}) for name in nodes)
    live: list[dict[str, Any]] = []
    for step in range(60):
        if live and rng.random() < 0.35:
            gone = live.pop(rng.randrange(len(live)))
            with_floor.remove_claim(gone)
            walked.remove_claim(gone)
            continue
        claims = [
            claim_for(rng.choice(["large", "small"]), rng.randint(1, 2), name=f"c{step}-{k}")
            for k in range(rng.choice((1, 1, 2)))
        ]
        a = with_floor.find_node(claims, infos, "first-fit")
        b = walked.find_node(claims, list(infos), "first-fit")
        assert a.node == b.node
        assert a.nodes_prefiltered == b.nodes_prefiltered
        assert [x.to_dict() for x in a.allocations] == [x.to_dict() for x in b.allocations]
        if a.node is not None:
            for c, allocation in zip(claims, a.allocations, strict=True):
                with_floor.assume(c, allocation)
                walked.assume(c, allocation)
            live.extend(claims)
