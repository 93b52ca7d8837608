"""A list's page decoded into only the fields its reader reads, or left to be read whole."""

from __future__ import annotations

import json
from typing import Any, TypedDict

from operators.shapes import Shape


class Inner(TypedDict, total=False):
    kept: Any


class Item(TypedDict, total=False):
    name: Any
    inner: Inner | None
    many: list[Inner] | None


def page(*items: Any) -> str:
    return json.dumps({"kind": "List", "metadata": {"resourceVersion": "7"}, "items": list(items)})


def test_only_the_named_fields_are_decoded_at_each_level() -> None:
    item = {
        "name": "a",
        "dropped": {"big": list(range(100))},
        "inner": {"kept": {"whole": [1, {"x": None}]}, "dropped": "x"},
        "many": [{"kept": 1, "dropped": 2}, {"dropped": 3}],
    }
    decoded = Shape(Item).decode(page(item, {"name": "b"}))
    assert decoded == {
        "kind": "List",
        "metadata": {"resourceVersion": "7"},
        "items": [
            {
                "name": "a",
                "inner": {"kept": {"whole": [1, {"x": None}]}},
                "many": [{"kept": 1}, {}],
            },
            {"name": "b"},
        ],
    }


def test_values_are_read_as_json_reads_them() -> None:
    values = [10**20, -(2**63), 1e-7, 2.0, "é<&>\u2028", True, None]
    (decoded,) = Shape(Item).decode(page({"name": values}))["items"]  # type: ignore[index]
    assert decoded["name"] == json.loads(json.dumps(values))
    assert [type(v) for v in decoded["name"]] == [type(v) for v in values]


def test_a_page_that_does_not_fit_the_shape_is_left_to_be_read_whole() -> None:
    shape = Shape(Item)
    assert shape.decode(page({"inner": "not an object"})) is None
    assert shape.decode(page({"many": {"not": "a list"}})) is None
    assert shape.decode('{"items": [{"name": NaN}]}') is None  # json reads it; msgspec not
    assert shape.decode('{"items": [{"name": "\\ud800"}]}') is None  # a lone surrogate
    assert shape.decode("not json") is None


def test_a_page_holding_an_item_wanted_whole_is_left_to_be_read_whole() -> None:
    shape = Shape(Item, whole=lambda item: item.get("name") == "keep")
    assert shape.decode(page({"name": "a"}, {"name": "keep"})) is None
    assert shape.decode(page({"name": "a"}, {"name": "b"})) is not None


def test_nulls_where_the_shape_names_a_level_are_kept_as_null() -> None:
    (decoded,) = Shape(Item).decode(page({"inner": None, "many": None}))["items"]  # type: ignore[index]
    assert decoded == {"inner": None, "many": None}


def test_nesting_deeper_than_msgspec_goes_is_left_to_be_read_whole() -> None:
    deep = "[" * 5000 + "]" * 5000
    assert Shape(Item).decode('{"items": [{"name": ' + deep + "}]}") is None
