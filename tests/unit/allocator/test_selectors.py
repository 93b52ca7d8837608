"""Selector results are shared by devices that look the same, and only by them."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from operators.allocator import AllocationError, AllocatorState
from operators.allocator.compiled import compile_device
from operators.allocator.features import Features
from operators.allocator.search import Search
from operators.allocator.selectors import SelectorEvaluator, SelectorRuntimeError

DRIVER = "gpu.example.com"


def device(
    name: str, attributes: dict[str, Any], capacity: dict[str, str] | None = None, **extra: Any
) -> Any:
    data = {
        "name": name,
        "attributes": attributes,
        "capacity": {k: {"value": v} for k, v in (capacity or {}).items()},
        **extra,
    }
    return compile_device(DRIVER, "pool", "slice", data)


def test_devices_that_look_the_same_run_a_selector_once() -> None:
    evaluator = SelectorEvaluator(Features())
    a = device("a", {"model": {"string": "A100"}}, {"memory": "40Gi"})
    b = device("b", {"model": {"string": "A100"}}, {"memory": "40Gi"})
    assert a.look is b.look and a.attributes is b.attributes
    expression = f'device.attributes["{DRIVER}"].model == "A100"'
    assert evaluator.matches(expression, a) and evaluator.matches(expression, b)
    assert evaluator.evaluations == 1


@pytest.mark.parametrize(
    ("other", "expression"),
    [
        # another value, another type of the same value
        ({"model": {"string": "H100"}}, f'device.attributes["{DRIVER}"].model == "A100"'),
        ({"model": {"int": 1}}, f'device.attributes["{DRIVER}"].model == 1'),
        # one attribute more
        (
            {"model": {"string": "A100"}, "numa": {"int": 1}},
            f'has(device.attributes["{DRIVER}"].numa)',
        ),
    ],
)
def test_devices_that_differ_in_an_attribute_are_evaluated_each(
    other: dict[str, Any], expression: str
) -> None:
    evaluator = SelectorEvaluator(Features())
    a = device("a", {"model": {"string": "A100"}})
    b = device("b", other)
    assert a.look is not b.look
    assert evaluator.matches(expression, a) != evaluator.matches(expression, b)
    assert evaluator.evaluations == 2


def test_capacities_in_another_notation_or_amount_are_another_look() -> None:
    evaluator = SelectorEvaluator(Features())
    gi = device("a", {}, {"memory": "1Gi"})
    plain = device("b", {}, {"memory": "1073741824"})
    more = device("c", {}, {"memory": "2Gi"})
    assert len({id(gi.look), id(plain.look), id(more.look)}) == 3
    expression = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("1Gi")) == 0'
    assert [evaluator.matches(expression, d) for d in (gi, plain, more)] == [True, True, False]
    assert evaluator.evaluations == 3


def test_a_runtime_error_is_shared_by_the_look_and_raised_for_each_device() -> None:
    evaluator = SelectorEvaluator(Features())
    a = device("a", {"model": {"string": "A100"}})
    b = device("b", {"model": {"string": "A100"}})
    expression = f'device.attributes["{DRIVER}"].memory > 1'
    for d in (a, b):
        with pytest.raises(SelectorRuntimeError):
            evaluator.matches(expression, d)
    assert evaluator.evaluations == 1


def test_multiple_allocations_are_part_of_the_view_under_consumable_capacity() -> None:
    evaluator = SelectorEvaluator(Features(consumable_capacity=True))
    single = device("a", {})
    shared = device("b", {}, allowMultipleAllocations=True)
    assert single.look is shared.look  # the same device data besides the flag
    expression = "device.allowMultipleAllocations"
    assert not evaluator.matches(expression, single)
    assert evaluator.matches(expression, shared)


def test_a_kept_error_is_raised_anew_so_no_search_stays_alive_through_it() -> None:
    state = AllocatorState()
    items = [{"name": f"d{i}", "attributes": {"model": {"string": "A100"}}} for i in range(2)]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "1"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "r",
                        "exactly": {
                            "deviceClassName": "any",
                            "selectors": [
                                {"cel": {"expression": f'device.attributes["{DRIVER}"].memory > 1'}}
                            ],
                        },
                    }
                ]
            }
        },
    }
    state.upsert_class({"metadata": {"name": "any"}, "spec": {}})
    for version in range(30):  # the slice republished: new devices, the same look
        state.upsert_slice(
            {
                "metadata": {"name": "s", "resourceVersion": str(version + 1)},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": "n",
                    "pool": {"name": "p", "generation": version, "resourceSliceCount": 1},
                    "devices": items,
                },
            }
        )
        with pytest.raises(AllocationError, match="CEL runtime error"):
            state.allocate([claim], "n")
    gc.collect()
    assert sum(isinstance(o, Search) for o in gc.get_objects()) <= 1


def test_a_value_no_api_server_sends_is_compiled_unshared() -> None:
    odd = device("a", {"model": {"string": {"not": "a string"}}})
    assert odd.look == ()
    assert "model" in odd.attributes
