"""The device search gives upstream's outcome even where it takes shortcuts: the pinned
``matchAttribute`` value, and the straight walk that stands in for the recursion.

Upstream evaluates a request's selectors on every device that is not in use before it
looks at constraints, and a CEL runtime error there ends the allocation with that error.
dralloc passes over devices (and whole slices) that a pinned ``matchAttribute`` value rules
out; that must not hide the error upstream would have met on them.
"""

from __future__ import annotations

import copy
import dataclasses
from contextlib import nullcontext
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.allocator import AllocationError, AllocatorState
from operators.allocator.allocated import UsedDevice
from operators.allocator.errors import SearchAborted
from operators.allocator.search import Search

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


# --- the straight path: the recursion's answer without recursing --------------------------


def plain_claim(
    *requests: tuple[str, int, str | None], constraint: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A claim of exact-count requests (name, count, selector expression or None), and a
    constraint over all of them."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p", "resourceVersion": "1"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": name,
                        "exactly": {
                            "deviceClassName": "any",
                            "count": count,
                            **({"selectors": [{"cel": {"expression": cel}}]} if cel else {}),
                        },
                    }
                    for name, count, cel in requests
                ],
                **({"constraints": [constraint]} if constraint else {}),
            }
        },
    }


def outcome(state: AllocatorState, claim: dict[str, Any], straight: bool) -> tuple[object, int]:
    """(the devices per request, or the error) and the steps, with or without the
    straight path."""
    search = state.search([claim], NODE)
    patch = nullcontext() if straight else mock.patch.object(Search, "_straight_through", no)
    with patch:
        try:
            result = search.run()
        except AllocationError as err:
            return str(err), search.steps
    if result is None:
        return None, search.steps
    return [(r.request, r.device) for r in result[0].devices], search.steps


def no(_search: Search) -> bool:
    return False


def test_a_dead_end_of_the_straight_walk_is_searched_by_the_recursion() -> None:
    # The walk gives r0 the first device (model a) and then has none left for r1, which
    # takes model a only: the recursion backtracks and gives r0 d1 instead.
    state = state_with(slice_("s", [device("d0", "a"), device("d1", "b")]))
    claim = plain_claim(("r0", 1, None), ("r1", 1, f'device.attributes["{DRIVER}"].model == "a"'))
    taken, steps = outcome(state, claim, straight=True)
    assert taken == [("r0", "d1"), ("r1", "d0")]
    assert (taken, steps) == outcome(state, claim, straight=False)


def test_the_straight_walk_takes_what_the_recursion_takes_in_as_many_steps() -> None:
    state = state_with(slice_("s", [device(f"d{i}", "ab"[i % 2], memory=i) for i in range(6)]))
    state.allocated.add(UsedDevice((DRIVER, "pool", "d0")))
    claim = plain_claim(("r0", 2, f'device.attributes["{DRIVER}"].model == "b"'), ("r1", 2, None))
    taken = [("r0", "d1"), ("r0", "d3"), ("r1", "d2"), ("r1", "d4")]
    assert outcome(state, claim, straight=True) == (taken, 8)
    assert outcome(state, claim, straight=False) == (taken, 8)


SELECTORS = (
    None,
    f'device.attributes["{DRIVER}"].model == "a"',
    f'device.attributes["{DRIVER}"].model == "b"',
    f'device.attributes["{DRIVER}"].memory > 1',  # a runtime error where `memory` is missing
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    devices=st.lists(
        st.tuples(st.sampled_from("ab"), st.one_of(st.none(), st.integers(0, 3)), st.booleans()),
        min_size=0,
        max_size=7,
    ),
    requests=st.lists(
        st.tuples(st.integers(1, 3), st.sampled_from(SELECTORS)), min_size=1, max_size=3
    ),
    constraint=st.sampled_from((None, "matchAttribute", "distinctAttribute")),
)
def test_the_straight_walk_agrees_with_the_recursion(
    devices: list[tuple[str, int | None, bool]],
    requests: list[tuple[int, str | None]],
    constraint: str | None,
) -> None:
    """Same devices or the same error, in as many steps, with and without the walk, over
    devices with and without the attribute a selector reads, some already in use, under a
    constraint on the model (matched) or the memory (distinct; some devices lack it)."""
    items = [
        device(f"d{i}", model, **({"memory": memory} if memory is not None else {}))
        for i, (model, memory, _) in enumerate(devices)
    ]
    state = state_with(slice_("s", items))
    for i, (_, _, in_use) in enumerate(devices):
        if in_use:
            state.allocated.add(UsedDevice((DRIVER, "pool", f"d{i}")))
    names = [f"r{i}" for i in range(len(requests))]
    attribute = {"matchAttribute": "model", "distinctAttribute": "memory"}.get(constraint or "")
    claim = plain_claim(
        *((name, count, cel) for name, (count, cel) in zip(names, requests, strict=True)),
        constraint={"requests": names, constraint: f"{DRIVER}/{attribute}"} if constraint else None,
    )
    assert outcome(state, claim, straight=True) == outcome(state, claim, straight=False)


def test_a_cancelled_search_stops_at_the_step_the_recursion_polls() -> None:
    state = state_with(slice_("s", [device(f"d{i}", "a") for i in range(64)]))
    first = plain_claim(("r0", 32, None))
    second = copy.deepcopy(first)
    second["metadata"].update(name="q", uid="uid-q")

    def run(straight: bool) -> tuple[str, int]:
        search = state.search([first, second], NODE)
        search.inputs = dataclasses.replace(search.inputs, cancelled=lambda: "claim deleted")
        patch = nullcontext() if straight else mock.patch.object(Search, "_straight_through", no)
        with patch, pytest.raises(SearchAborted, match="claim deleted"):
            search.run()
        return "aborted", search.steps

    assert run(straight=True) == run(straight=False) == ("aborted", 64)
