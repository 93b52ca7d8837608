"""The work bound: what dralloc's implementation of an operation does, by operand size.

Upstream's cost (``runtimecost``) is what the limit is decided on, but it does
not follow our work everywhere: upstream's list concatenation is lazy and costs
1 where ours copies, ``format`` is charged by its template only, comparing
nested lists by their length only. So that a few bytes of CEL (a ``cel.bind``
chain doubling a list forty times) cannot exhaust memory or time, the
generated code keeps a second counter of this work, with the same limit:
a tenth per string character traversed or built, a quarter per pattern
character for regexes, and 1 per list element or piece *created*. Every
function returns the work for the given operands and is called by generated
code *before* the operation runs, so an expression over the bound is stopped
before it allocates anything, with the same error as the cost limit. The
reported actual cost is upstream's alone.

Operand types are not checked here: for operands of the wrong type a function
returns 0 and the operation itself reports the missing overload. Nested lists
and maps are measured with a memo by identity, so a value built from shared
parts (``[a, a]`` nested thirty times) is measured in linear time while its
cost reflects its full, exponential, traversal.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, Final

from .regex import Regex
from .values import UInt

#: cel-go's StringTraversalCostFactor: cost per character traversed.
STRING_FACTOR: Final = 0.1
#: cel-go's RegexStringLengthCostFactor: cost per pattern character (used as // 4).
REGEX_FACTOR: Final = 0.25
#: Cost per list element or string piece a function creates.
ELEMENT_COST: Final = 1
#: Upper bound of a formatted scalar's length (a float with %f reaches 330 digits).
_SCALAR_TEXT: Final = 330

_CONTAINERS: Final = (list, tuple, dict)
_PRECISION_RE: Final = re.compile(r"%\.(\d+)")


def _chars(n: int) -> int:
    """The cost of traversing ``n`` characters: a tenth each, rounded up (integer maths)."""
    return (n + 9) // 10


def size(value: Any) -> int:
    """cel-go's ``actualSize``: length of strings, bytes, lists and maps, else 1."""
    t = type(value)
    if t is str or t is bytes or t is list or t is tuple or t is dict:
        return len(value)
    return 1


def traversal(value: Any) -> float:
    """The work of visiting every part of ``value``: a tenth per character, 1 per element."""
    t = type(value)
    if t is str or t is bytes:
        return len(value) * STRING_FACTOR
    if t is list or t is tuple or t is dict:
        return _container_traversal(value, {})
    return 0.0


def _container_traversal(value: Any, memo: dict[int, float]) -> float:
    known = memo.get(id(value))
    if known is not None:
        return known
    parts = value.items() if type(value) is dict else ((item,) for item in value)
    total = float(len(value))
    for part in parts:
        for item in part:
            t = type(item)
            if t is str or t is bytes:
                total += len(item) * STRING_FACTOR
            elif t is list or t is tuple or t is dict:
                total += _container_traversal(item, memo)
    memo[id(value)] = total
    return total


# --- operators ------------------------------------------------------------------


def concat(a: Any, b: Any) -> int:
    """``a + b``: strings and bytes by characters, lists by elements copied."""
    ta = type(a)
    if ta is str or ta is bytes:
        if type(b) is ta:
            return _chars(len(a) + len(b))
        return 0
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return (len(a) + len(b)) * ELEMENT_COST
    return 0


def compare(a: Any, b: Any) -> int:
    """Equality or ordering: at most the smaller operand is traversed."""
    ta, tb = type(a), type(b)
    if (ta is str and tb is str) or (ta is bytes and tb is bytes):
        return _chars(min(len(a), len(b)))
    if isinstance(a, _CONTAINERS) and isinstance(b, _CONTAINERS):
        return math.ceil(min(traversal(a), traversal(b)))
    return 0


def membership(element: Any, container: Any) -> int:
    """``element in container``: a list is searched item by item; a map is hashed.

    Comparing ``element`` with one item costs at most traversing ``element``.
    """
    t = type(container)
    if t is not list and t is not tuple:
        return 0
    te = type(element)
    if te is str or te is bytes:
        return len(container) * ((len(element) + 9) // 10 or 1)
    if te is list or te is tuple or te is dict:
        return len(container) * max(math.ceil(traversal(element)), 1)
    return len(container)


# --- library functions ------------------------------------------------------------


def _string_traversal(s: Any, *_: Any) -> int:
    """Functions that read (and possibly copy) their first string once."""
    t = type(s)
    return _chars(len(s)) if t is str or t is bytes else 0


def _prefix_check(s: Any, other: Any) -> int:
    if type(s) is str and type(other) is str:
        return _chars(min(len(s), len(other)))
    return 0


def _contains(s: Any, sub: Any) -> int:
    if type(s) is str and type(sub) is str:
        return _chars(len(s)) * max(_chars(len(sub)), 1)
    return 0


def _pattern_length(pattern: Any) -> int:
    if type(pattern) is Regex:
        return len(pattern.pattern)
    return len(pattern) if type(pattern) is str else 0


def _regex(s: Any, pattern: Any, *_: Any) -> int:
    """cel-go's regex cost: (1 + text) characters times a quarter of the pattern length."""
    if type(s) is not str:
        return 0
    return (len(s) + 10) // 10 * ((_pattern_length(pattern) + 3) // 4)


def _find_all(s: Any, pattern: Any, limit: Any = -1) -> int:
    if type(s) is not str:
        return 0
    pieces = len(s) + 1
    if type(limit) in (int, UInt) and 0 <= limit < pieces:
        pieces = int(limit)
    return _regex(s, pattern) + pieces * ELEMENT_COST


def _replace(s: Any, old: Any, new: Any, count: Any = -1) -> int:
    if type(s) is not str or type(old) is not str or type(new) is not str or type(count) is not int:
        return 0
    found = len(s) + 1 if old == "" else s.count(old)
    if 0 <= count < found:
        found = count
    result = len(s) + found * (len(new) - len(old))
    return _chars(2 * len(s) + max(result, 0))


def _split(s: Any, sep: Any, limit: Any = -1) -> int:
    if type(s) is not str or type(sep) is not str or type(limit) is not int:
        return 0
    pieces = len(s) if sep == "" else s.count(sep) + 1
    if 0 < limit < pieces:
        pieces = limit
    return _chars(2 * len(s)) + pieces * ELEMENT_COST


def _join(items: Any, sep: Any = "") -> int:
    if not isinstance(items, (list, tuple)) or type(sep) is not str:
        return 0
    total = 0
    for item in items:
        if type(item) is not str:
            return 0
        total += len(item)
    total += len(sep) * max(len(items) - 1, 0)
    return _chars(2 * total)


def _format(template: Any, args: Any) -> int:
    if type(template) is not str or not isinstance(args, (list, tuple)):
        return 0
    hex_factor = 8 if ("x" in template or "X" in template) else 1
    memo: dict[int, int] = {}
    bound = len(template) + sum(_text_size(a, hex_factor, memo) for a in args)
    if "%." in template:
        # Digits beyond nine mean a precision no budget can pay for anyway.
        bound += sum(
            int(m.group(1)) if len(m.group(1)) < 10 else 10**10
            for m in _PRECISION_RE.finditer(template)
        )
    return _chars(bound)


def _text_size(value: Any, hex_factor: int, memo: dict[int, int]) -> int:
    """An upper bound of the length of ``value`` formatted by ``format``."""
    t = type(value)
    if t is str:
        return len(value) * hex_factor
    if t is bytes:
        return 2 * len(value)
    if t is list or t is tuple or t is dict:
        known = memo.get(id(value))
        if known is not None:
            return known
        items = (x for kv in value.items() for x in kv) if t is dict else iter(value)
        total = 2 + sum(_text_size(item, hex_factor, memo) + 2 for item in items)
        memo[id(value)] = total
        return total
    return _SCALAR_TEXT


def _list_traversal(items: Any, *_: Any) -> int:
    """isSorted, sum, min, max, indexOf (lists or strings)."""
    return math.ceil(traversal(items))


def _distinct(items: Any) -> int:
    if not isinstance(items, (list, tuple)):
        return 0
    return math.ceil(len(items) * traversal(items) * STRING_FACTOR)


def _sort(items: Any) -> int:
    if not isinstance(items, (list, tuple)):
        return 0
    return math.ceil(max(len(items), 2).bit_length() * traversal(items))


def _copy(items: Any, *_: Any) -> int:
    """reverse and slice: at most the input is copied."""
    if isinstance(items, (list, tuple)):
        return len(items) * ELEMENT_COST
    return _string_traversal(items)


def _flatten(items: Any, depth: Any = 1) -> int:
    if not isinstance(items, (list, tuple)) or type(depth) is not int or depth < 0:
        return 0
    return _flat_count(items, depth, {}) * ELEMENT_COST


def _flat_count(items: Any, depth: int, memo: dict[tuple[int, int], int]) -> int:
    key = (id(items), depth)
    known = memo.get(key)
    if known is not None:
        return known
    total = 0
    for item in items:
        if depth > 0 and isinstance(item, (list, tuple)):
            total += _flat_count(item, depth - 1, memo)
        else:
            total += 1
    memo[key] = total
    return total


def _range(n: Any) -> int:
    return max(int(n), 0) * ELEMENT_COST if type(n) is int else 0


def _sets_pairwise(a: Any, b: Any) -> int:
    if not isinstance(a, (list, tuple)) or not isinstance(b, (list, tuple)):
        return 0
    pairs = len(a) * len(b) * STRING_FACTOR
    return math.ceil(pairs + traversal(a) + traversal(b))


def _sets_equivalent(a: Any, b: Any) -> int:
    return 2 * _sets_pairwise(a, b)


def _last_argument_string(*args: Any) -> int:
    """ip.isCanonical(s), cidr(s), isIP(s): parse the string argument."""
    return _string_traversal(args[-1]) if args else 0


#: Work of a library call, by CEL function name, from its operands
#: (the receiver first for member calls).
CALLS: Final[dict[str, Callable[..., int]]] = {
    "contains": _contains,
    "startsWith": _prefix_check,
    "endsWith": _prefix_check,
    "matches": _regex,
    "find": _regex,
    "findAll": _find_all,
    "lowerAscii": _string_traversal,
    "upperAscii": _string_traversal,
    "trim": _string_traversal,
    "substring": _string_traversal,
    "reverse": _copy,
    "replace": _replace,
    "split": _split,
    "join": _join,
    "format": _format,
    "strings.quote": lambda s: 2 * _string_traversal(s),
    "indexOf": _list_traversal,
    "lastIndexOf": _list_traversal,
    "isSorted": _list_traversal,
    "sum": _list_traversal,
    "min": _list_traversal,
    "max": _list_traversal,
    "distinct": _distinct,
    "sort": _sort,
    "slice": _copy,
    "flatten": _flatten,
    "lists.range": _range,
    "sets.contains": _sets_pairwise,
    "sets.intersects": _sets_pairwise,
    "sets.equivalent": _sets_equivalent,
    "string": _string_traversal,
    "bytes": _string_traversal,
    "int": _string_traversal,
    "uint": _string_traversal,
    "double": _string_traversal,
    "bool": _string_traversal,
    "timestamp": _string_traversal,
    "duration": _string_traversal,
    "quantity": _string_traversal,
    "isQuantity": _string_traversal,
    "semver": _string_traversal,
    "isSemver": _string_traversal,
    "ip": _last_argument_string,
    "cidr": _last_argument_string,
    "isIP": _last_argument_string,
    "isCIDR": _last_argument_string,
    "ip.isCanonical": _last_argument_string,
}

__all__ = [
    "CALLS",
    "ELEMENT_COST",
    "REGEX_FACTOR",
    "STRING_FACTOR",
    "compare",
    "concat",
    "membership",
    "size",
    "traversal",
]
