"""Hypothesis strategies that break valid Kubernetes JSON in the ways people and tools do.

A mutation picks one place in the document tree and deletes it, replaces it with a value
of another JSON type, adds an unknown field, or duplicates a list item. Several mutations
in a row reach corners (an int where a map was, a list twice the limit) that hand-written
bad-input tests miss.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from hypothesis import strategies as st

JSON_SCALARS: Final = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=80),
    st.sampled_from(["", "0", "-1", "1Gi", "1e999", "a/b", "A B", "x" * 300, "🙂"]),
)
JSON_VALUES: Final = st.recursive(
    JSON_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=12), children, max_size=4),
    ),
    max_leaves=10,
)


def paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every location in a JSON tree (the root excluded)."""
    found: list[tuple[Any, ...]] = []
    if isinstance(document, dict):
        for key, value in document.items():
            found.append((*prefix, key))
            found.extend(paths(value, (*prefix, key)))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found.append((*prefix, index))
            found.extend(paths(value, (*prefix, index)))
    return found


def _parent(document: Any, path: tuple[Any, ...]) -> Any:
    node = document
    for part in path[:-1]:
        node = node[part]
    return node


@st.composite
def mutated(draw: st.DrawFn, seed: dict[str, Any], max_mutations: int = 4) -> dict[str, Any]:
    """A copy of ``seed`` with 1..max_mutations random edits."""
    document = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, max_mutations))):
        locations = paths(document)
        if not locations:
            break
        path = draw(st.sampled_from(locations))
        parent = _parent(document, path)
        key = path[-1]
        action = draw(st.sampled_from(["delete", "replace", "add", "duplicate"]))
        if action == "delete":
            del parent[key]
        elif action == "replace":
            parent[key] = draw(JSON_VALUES)
        elif action == "add" and isinstance(parent[key], dict):
            parent[key][draw(st.text(max_size=12))] = draw(JSON_VALUES)
        elif action == "duplicate" and isinstance(parent[key], list) and parent[key]:
            times = draw(st.sampled_from([1, 2, 200]))
            parent[key].extend(copy.deepcopy(parent[key][0]) for _ in range(times))
        else:
            parent[key] = draw(JSON_SCALARS)
    return document
