"""The write-cost benchmark's pure parts: each change in each form says the same thing."""

from __future__ import annotations

from typing import Any

import pytest

from bench import write_cost
from tests.unit.controllers.fakes import apply_json_patch, apply_merge_patch


@pytest.mark.parametrize(
    ("change", "sizes"), write_cost.CHANGES, ids=lambda c: getattr(c, "name", "")
)
def test_every_form_of_a_change_makes_the_same_object(
    change: write_cost.Change, sizes: Any
) -> None:
    for size in sizes:
        if change.resource is write_cost.PODS:
            obj = (
                write_cost.realistic_pod("p", "uid-o")
                if size == "realistic"
                else write_cost.small_pod("p")
            )
        else:
            obj = write_cost.claim("c")
        merged = apply_merge_patch(obj, change.merge_patch(obj))
        assert apply_json_patch(obj, change.json_patch(obj)) == merged, (change.name, size)
        assert change.updated(obj) == merged, (change.name, size)
        assert merged != obj, "the change changes nothing"


def test_the_table_compares_each_form_with_the_merge_patch() -> None:
    costs = [
        write_cost.Cost("pod allocation", "small", "merge patch", 10, [2.0, 2.2, 1.8], 600),
        write_cost.Cost("pod allocation", "small", "update", 10, [1.5, 1.4, 1.6], 1900),
    ]
    text = write_cost.table(costs)
    assert (
        "| pod allocation | small | update | 1900 | 1.500 | 1.500, 1.400, 1.600 | 0.75x |" in text
    ), text
