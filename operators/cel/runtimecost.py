"""Upstream's runtime cost of the operations whose cost depends on their operands.

The actual cost of an evaluation is what aborts it at the limit, so it must be
counted as cel-go's cost tracker counts it, with the Kubernetes library's call
costs and the lists extension's trackers: a tenth per string character
traversed (``STRING_FACTOR``), a quarter per regex pattern character, the
length of a list searched by ``in``, and so on. Each function here returns the
*whole* cost of one call for the given operands (the receiver first), computed
from their actual sizes; the generated code adds it before the call runs.
Operations not listed cost a flat 1 (charged by the code generator without a
call). Because every formula here is the estimator's formula applied to actual
sizes, which never exceed the estimator's bounds, the actual cost never exceeds
the static estimate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from .regex import Regex
from .values import Optional

#: cel-go's StringTraversalCostFactor and RegexStringLengthCostFactor.
STRING_FACTOR: Final = 0.1
REGEX_FACTOR: Final = 0.25
#: cel-go's ListCreateBaseCost.
LIST_CREATE: Final = 10

_ceil = math.ceil


def size(value: Any) -> int:
    """cel-go's ``actualSize``: the size of a string, bytes, list or map, an optional's value, else 1."""
    t = type(value)
    if t is str or t is bytes or t is list or t is tuple or t is dict:
        return len(value)
    if t is Optional and value.has:
        return size(value.value)
    return 1


def _tenths(n: int) -> int:
    return math.ceil(n * STRING_FACTOR)


def compare(a: Any, b: Any) -> int:
    """``==`` and ``!=``: a tenth of the smaller size (1 for two scalars)."""
    return _tenths(min(size(a), size(b)))


def order(a: Any, b: Any) -> int:
    """``<``, ``<=``, ``>``, ``>=``: by size for two strings or two bytes, else 1."""
    ta = type(a)
    if (ta is str or ta is bytes) and type(b) is ta:
        return _tenths(min(len(a), len(b)))
    return 1


def concat(a: Any, b: Any) -> int:
    """``+``: strings and bytes by their total size; lists (lazy upstream) and numbers 1."""
    ta = type(a)
    if (ta is str or ta is bytes) and type(b) is ta:
        return _tenths(len(a) + len(b))
    return 1


def membership(_element: Any, container: Any) -> int:
    """``in``: a list is searched element by element; a map is one lookup."""
    t = type(container)
    return len(container) if t is list or t is tuple else 1


def traversal(value: Any) -> int:
    """The Kubernetes library's ``traversalCost`` (a tenth per character, rounded down)."""
    t = type(value)
    if t is str or t is bytes:
        return int(len(value) * STRING_FACTOR)
    if t is list or t is tuple:
        return sum(traversal(item) for item in value)
    if t is dict:
        return sum(traversal(k) + traversal(v) for k, v in value.items())
    return 1


def _first_tenths(value: Any, *_: Any) -> int:
    return _tenths(size(value))


def _first_twice(value: Any, *_: Any) -> int:
    return math.ceil(size(value) * 2 * STRING_FACTOR)


def _second_tenths(_value: Any, other: Any, *_: Any) -> int:
    return _tenths(size(other))


def _traversal(value: Any, *_: Any) -> int:
    return traversal(value)


def regex(text: Any, pattern: Any, *_: Any) -> int:
    """matches, find, findAll: (1 + text) tenths times a quarter of the pattern.

    In floating point, as upstream computes it (``ceil(30 * 0.1)`` is 4 there).
    """
    # The hot path of a selector with a regex: no helper calls for the usual types.
    n = len(text) if type(text) is str else size(text)
    m = len(pattern.pattern) if type(pattern) is Regex else size(pattern)
    return _ceil((1 + n) * STRING_FACTOR) * _ceil(m * REGEX_FACTOR)


def _contains(text: Any, sub: Any) -> int:
    return _tenths(size(text)) * _tenths(size(sub))


def _join(items: Any, separator: Any = "") -> int:
    """Upstream charges twice a tenth of the result's size, known before joining."""
    if not isinstance(items, (list, tuple)) or not all(type(i) is str for i in items):
        return 1
    length = sum(len(i) for i in items)
    if type(separator) is str:
        length += len(separator) * max(len(items) - 1, 0)
    return math.ceil(length * 2 * STRING_FACTOR)


def _allocating(factor: float, count: int) -> int:
    """The lists extension's allocating-call cost."""
    return int(count * factor) + 1 + LIST_CREATE


def _range(n: Any) -> int:
    return _allocating(1, max(int(n), 0)) if type(n) is int else 1


def _slice(items: Any, start: Any = 0, end: Any = None) -> int:
    if not isinstance(items, (list, tuple)) or type(start) is not int:
        return 1
    stop = len(items) if type(end) is not int else end
    return _allocating(1, max(min(stop, len(items)) - max(start, 0), 0))


def _reverse(items: Any) -> int:
    return _allocating(1, size(items)) if isinstance(items, (list, tuple)) else 1


def _flatten(items: Any, depth: Any = 1) -> int:
    factor = float(depth) if type(depth) is int else 1.0
    return _allocating(max(factor, 0.0), size(items)) if isinstance(items, (list, tuple)) else 1


def _self_compare(items: Any) -> int:
    if not isinstance(items, (list, tuple)):
        return 1
    n = len(items)
    factor = 2.0
    if n and type(items[0]) in (str, bytes):
        factor += STRING_FACTOR
    return _allocating(factor, n * n)


def _sets(factor: int) -> Callable[[Any, Any], int]:
    """The sets extension: the product of the two sizes (twice for equivalent), plus 1."""

    def cost(a: Any, b: Any) -> int:
        return 1 + size(a) * size(b) * factor

    return cost


def _bytes(value: Any) -> int:
    """bytes(string) reads the string; bytes(bytes) is the identity."""
    return _tenths(len(value)) if type(value) is str else 1


def _string(value: Any) -> int:
    """string(bytes) decodes the bytes; the other conversions cost 1."""
    return _tenths(len(value)) if type(value) is bytes else 1


def _ip(value: Any) -> int:
    # cidr.ip() costs 1; ip(string) parses the string.
    return _tenths(size(value)) if type(value) is str else 1


def _contains_ip(_cidr: Any, other: Any) -> int:
    return 1 + (_tenths(size(other)) if type(other) is str else 0)


def _contains_cidr(_cidr: Any, other: Any) -> int:
    return 3 + (_tenths(size(other)) if type(other) is str else 0)


#: Upstream's cost of one call, by function name, where it is not a flat 1.
CALLS: Final[dict[str, Callable[..., int]]] = {
    "startsWith": _second_tenths,
    "endsWith": _second_tenths,
    "contains": _contains,
    "matches": regex,
    "find": regex,
    "findAll": regex,
    "lowerAscii": _first_tenths,
    "upperAscii": _first_tenths,
    "trim": _first_tenths,
    "substring": _first_tenths,
    "replace": _first_twice,
    "split": _first_twice,
    "join": _join,
    "format": _first_tenths,
    "strings.quote": _first_tenths,
    "bytes": _bytes,
    "string": _string,
    "isSorted": _traversal,
    "sum": _traversal,
    "min": _traversal,
    "max": _traversal,
    "indexOf": _traversal,
    "lastIndexOf": _traversal,
    "includes": _traversal,
    "lists.range": _range,
    "sets.contains": _sets(1),
    "sets.intersects": _sets(1),
    "sets.equivalent": _sets(2),
    "slice": _slice,
    "reverse": _reverse,
    "flatten": _flatten,
    "distinct": _self_compare,
    "sort": _self_compare,
    "quantity": _first_tenths,
    "isQuantity": _first_tenths,
    "semver": _first_tenths,
    "isSemver": _first_tenths,
    "cidr": _first_tenths,
    "isIP": _first_tenths,
    "isCIDR": _first_tenths,
    "ip": _ip,
    "ip.isCanonical": _first_twice,
    "containsIP": _contains_ip,
    "containsCIDR": _contains_cidr,
}

__all__ = [
    "CALLS",
    "LIST_CREATE",
    "REGEX_FACTOR",
    "STRING_FACTOR",
    "compare",
    "concat",
    "membership",
    "order",
    "regex",
    "size",
    "traversal",
]
