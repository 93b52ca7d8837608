"""CEL operator semantics over plain Python values, used by generated code.

Each helper implements one CEL operator the way cel-go does: heterogeneous
equality (numbers compare by value across int/uint/double, other type
mismatches are simply unequal), ordering only within a type or across
numbers, int64/uint64 overflow errors, truncating division, Go's remainder
sign, and map keys that keep ``true`` apart from ``1``. Fast paths for the
common same-type cases come first because selectors call these per device.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, NoReturn

from operators.api.quantity import Quantity
from operators.api.semver import Semver

from .errors import CELEvalError
from .values import (
    FALSE_KEY,
    INT64_MAX,
    INT64_MIN,
    NONE,
    TRUE_KEY,
    UINT64_MAX,
    BoolKey,
    ComputedQuantity,
    Duration,
    Optional,
    Timestamp,
    UInt,
    go_type_name,
    type_name,
)

_NUMERIC = (int, UInt, float)
_ORDERED_SAME = frozenset({int, UInt, float, str, bytes, bool, Timestamp, Duration})
_TWO_63 = 2.0**63


def fail(message: str) -> NoReturn:
    raise CELEvalError(message)


def no_overload(function: str, *args: Any) -> NoReturn:
    types = ", ".join(type_name(a) for a in args)
    raise CELEvalError(f"found no matching overload for '{function}' applied to '({types})'")


def no_such_key(key: Any) -> NoReturn:
    raise CELEvalError(f"no such key: {unwrap_key(key)}")


# --- map keys -------------------------------------------------------------------


def map_key(key: Any) -> Any:
    """The dict key a CEL map key is stored under (None if it cannot be a key)."""
    t = type(key)
    if t is str or t is int or t is UInt:
        return key
    if t is bool:
        return TRUE_KEY if key else FALSE_KEY
    if t is float:
        # Numeric keys are found across int/uint/double by value.
        if key.is_integer():
            return int(key)
        return None
    return None


def unwrap_key(key: Any) -> Any:
    return key.value if type(key) is BoolKey else key


def build_map(entries: Iterable[tuple[Any, Any]]) -> dict[Any, Any]:
    result: dict[Any, Any] = {}
    for key, value in entries:
        t = type(key)
        if t is bool:
            stored: Any = TRUE_KEY if key else FALSE_KEY
        elif t is str or t is int or t is UInt:
            stored = key
        else:
            fail(f"unsupported key type: {type_name(key)}")
        if stored in result:
            fail(f"Failed with repeated key: {key!r}")
        result[stored] = value
    return result


# --- equality and ordering -----------------------------------------------------


def _num_cmp(a: Any, b: Any) -> int | None:
    """Compare two numbers of any CEL numeric type; None when a NaN is involved."""
    ta, tb = type(a), type(b)
    if ta is float or tb is float:
        if ta is float and tb is float:
            if a != a or b != b:
                return None
            return (a > b) - (a < b)
        d, other, flip = (a, b, 1) if ta is float else (b, a, -1)
        if d != d:
            return None
        if type(other) is UInt:
            # uint against double compares exactly.
            result = (d > other) - (d < other)
        else:
            # int against double: cel-go converts the int unless the double is
            # outside the int64 range.
            if d < -_TWO_63:
                result = -1
            elif d > _TWO_63:
                result = 1
            else:
                f = float(other)
                result = (d > f) - (d < f)
        return result * flip
    return (a > b) - (a < b)


def equals(a: Any, b: Any) -> bool:
    """``a == b``: the left operand's notion of equality, as cel-go asks it."""
    ta = type(a)
    tb = type(b)
    if ta is tb:
        if ta is list or ta is tuple:
            return _list_equals(a, b)
        if ta is dict:
            return _map_equals(a, b)
        if ta is ComputedQuantity:
            _refuse(a, b)
        return bool(a == b)
    if ta in _NUMERIC and tb in _NUMERIC:
        return _num_cmp(a, b) == 0
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return _list_equals(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return _map_equals(a, b)
    if ta in _STRICT_EQUALITY and b is not None:
        if ta is ComputedQuantity and tb is Quantity:
            return bool(a == b)
        _refuse(a, b)
    return False


#: Kubernetes' semver and quantity types refuse to be compared with anything but their
#: own type (a null aside): "no such overload" where other types are just unequal.
_STRICT_EQUALITY = frozenset({Semver, Quantity, ComputedQuantity})


def _refuse(a: Any, b: Any) -> NoReturn:
    raise CELEvalError("no such overload")


def equal_or_false(a: Any, b: Any) -> bool:
    """Equality as cel-go's list, map and library code use it: true only when ``a``
    answers true, so a refused comparison counts as unequal."""
    try:
        return equals(a, b)
    except CELEvalError:
        return False


def not_equals(a: Any, b: Any) -> bool:
    # cel-go negates "is it true": a refused comparison is "not equal".
    return not equal_or_false(a, b)


def _list_equals(a: Any, b: Any) -> bool:
    # cel-go stops at the first element pair that is false; a refused comparison is not
    # false, so it does not make the lists unequal.
    if len(a) != len(b):
        return False
    return all(_not_false(x, y) for x, y in zip(a, b, strict=True))


def _not_false(a: Any, b: Any) -> bool:
    try:
        return equals(a, b)
    except CELEvalError:
        return True


def _map_equals(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    if len(a) != len(b):
        return False
    for key, value in a.items():
        if key not in b:
            return False
        if not _not_false(value, b[key]):
            return False
    return True


def compare(a: Any, b: Any, op: str) -> int:
    ta, tb = type(a), type(b)
    if ta is tb and ta in _ORDERED_SAME:
        if ta is float and (a != a or b != b):
            _unordered()
        return (a > b) - (a < b)
    if ta in _NUMERIC and tb in _NUMERIC:
        r = _num_cmp(a, b)
        if r is None:
            _unordered()
        return r
    no_overload(op, a, b)


def _unordered() -> NoReturn:
    # cel-go refuses to order a NaN (equality with one is just false).
    raise CELEvalError("NaN values cannot be ordered")


def less(a: Any, b: Any) -> bool:
    t = type(a)
    if t is type(b) and t in _ORDERED_SAME and t is not float:
        return bool(a < b)
    return compare(a, b, "_<_") == -1


def less_equal(a: Any, b: Any) -> bool:
    t = type(a)
    if t is type(b) and t in _ORDERED_SAME and t is not float:
        return bool(a <= b)
    return compare(a, b, "_<=_") in (-1, 0)


def greater(a: Any, b: Any) -> bool:
    t = type(a)
    if t is type(b) and t in _ORDERED_SAME and t is not float:
        return bool(a > b)
    return compare(a, b, "_>_") == 1


def greater_equal(a: Any, b: Any) -> bool:
    t = type(a)
    if t is type(b) and t in _ORDERED_SAME and t is not float:
        return bool(a >= b)
    return compare(a, b, "_>=_") in (0, 1)


# --- arithmetic -----------------------------------------------------------------


def _int_result(value: int) -> int:
    if INT64_MIN <= value <= INT64_MAX:
        return value
    fail("return error for overflow")


def _uint_result(value: int) -> UInt:
    if 0 <= value <= UINT64_MAX:
        return UInt(value)
    fail("return error for overflow")


def add(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return _int_result(a + b)
        if ta is float or ta is str or ta is bytes:
            return a + b
        if ta is UInt:
            return _uint_result(a + b)
        if ta is list or ta is tuple:
            return [*a, *b]
        if ta is Duration:
            return Duration(a.ns + b.ns)
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return [*a, *b]
    elif (ta is Timestamp and tb is Duration) or (ta is Duration and tb is Timestamp):
        return Timestamp(a.ns + b.ns)
    no_overload("_+_", a, b)


def sub(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return _int_result(a - b)
        if ta is float:
            return a - b
        if ta is UInt:
            return _uint_result(a - b)
        if ta is Duration:
            return Duration(a.ns - b.ns)
        if ta is Timestamp:
            return Duration(a.ns - b.ns)
    elif ta is Timestamp and tb is Duration:
        return Timestamp(a.ns - b.ns)
    no_overload("_-_", a, b)


def mul(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int:
            return _int_result(a * b)
        if ta is float:
            return a * b
        if ta is UInt:
            return _uint_result(a * b)
    no_overload("_*_", a, b)


def div(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta is int or ta is UInt:
            if b == 0:
                fail("division by zero")
            q = abs(a) // abs(b)
            if (a < 0) != (b < 0):
                q = -q
            return _int_result(q) if ta is int else UInt(q)
        if ta is float:
            if b == 0.0:
                if a != a or a == 0.0:
                    return math.nan
                return math.copysign(math.inf, a) * math.copysign(1.0, b)
            return a / b
    no_overload("_/_", a, b)


def mod(a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is tb and (ta is int or ta is UInt):
        if b == 0:
            fail("modulus by zero")
        if ta is int and a == INT64_MIN and b == -1:
            fail("return error for overflow")
        r = abs(a) % abs(b)
        return -r if a < 0 else (r if ta is int else UInt(r))
    no_overload("_%_", a, b)


def neg(a: Any) -> Any:
    ta = type(a)
    if ta is int:
        return _int_result(-a)
    if ta is float:
        return -a
    no_overload("-_", a)


def logical_not(a: Any) -> bool:
    if a is True:
        return False
    if a is False:
        return True
    no_overload("!_", a)


def and_finish(left: Any, right: Any) -> bool:
    """Combine ``&&`` operands once the left one is known not to be false.

    Operands may be CELEvalError instances standing for a failed evaluation:
    false wins over an error, an error wins over true.
    """
    if right is False:
        return False
    if isinstance(left, CELEvalError):
        raise left
    if isinstance(right, CELEvalError):
        raise right
    if left is True and right is True:
        return True
    no_overload("_&&_", left, right)


def or_finish(left: Any, right: Any) -> bool:
    if right is True:
        return True
    if isinstance(left, CELEvalError):
        raise left
    if isinstance(right, CELEvalError):
        raise right
    if left is False and right is False:
        return False
    no_overload("_||_", left, right)


def condition(value: Any) -> bool:
    if value is True or value is False:
        return value
    if isinstance(value, CELEvalError):
        raise value
    no_overload("_?_:_", value)


# --- containers -----------------------------------------------------------------


def contains(element: Any, container: Any) -> bool:
    """``element in container``."""
    if isinstance(container, (list, tuple)):
        if type(element) is str:
            return element in container
        return any(equal_or_false(element, item) for item in container)
    if isinstance(container, dict):
        key = map_key(element)
        if key is None:
            return False
        return key in container
    no_overload("@in", element, container)


def index(obj: Any, key: Any) -> Any:
    if isinstance(obj, dict):
        k = key if type(key) is str else map_key(key)
        try:
            return obj[k]
        except KeyError:
            no_such_key(key)
        except TypeError:
            no_such_key(key)
    if isinstance(obj, (list, tuple)):
        tk = type(key)
        if tk is float:
            if not key.is_integer():
                fail(f"invalid_argument: unsupported index value {key}")
            key = int(key)
        elif tk is not int and tk is not UInt:
            fail(f"invalid_argument: unsupported index type '{type_name(key)}' in list")
        if 0 <= key < len(obj):
            return obj[key]
        fail(f"invalid_argument: index '{key}' out of range in list size '{len(obj)}'")
    if type(obj) is Optional:
        return optional_index(obj, key)
    no_overload("_[_]", obj, key)


def select(obj: Any, field: str) -> Any:
    if isinstance(obj, dict):
        try:
            return obj[field]
        except KeyError:
            no_such_key(field)
    if type(obj) is Optional:
        return optional_select(obj, field)
    getter = getattr(obj, "cel_field", None)
    if getter is not None:
        return getter(field)
    fail(f"type '{type_name(obj)}' does not support field selection")


def has_field(obj: Any, field: str) -> bool:
    if isinstance(obj, dict):
        return field in obj
    if type(obj) is Optional:
        return obj.has and has_field(obj.value, field)
    checker = getattr(obj, "cel_has_field", None)
    if checker is not None:
        return bool(checker(field))
    fail(f"invalid type for field selection: {type_name(obj)}")


def optional_select(obj: Any, field: str) -> Optional:
    if type(obj) is Optional:
        if not obj.has:
            return NONE
        obj = obj.value
    if isinstance(obj, dict):
        try:
            return Optional(True, obj[field])
        except KeyError:
            return NONE
    if has_field(obj, field):
        return Optional(True, select(obj, field))
    return NONE


def optional_index(obj: Any, key: Any) -> Optional:
    if type(obj) is Optional:
        if not obj.has:
            return NONE
        obj = obj.value
    if isinstance(obj, dict):
        k = map_key(key)
        if k is None:
            return NONE
        try:
            return Optional(True, obj[k])
        except KeyError:
            return NONE
    if isinstance(obj, (list, tuple)):
        if type(key) is float and key.is_integer():
            key = int(key)
        if type(key) not in (int, UInt):
            no_overload("_[?_]", obj, key)
        if 0 <= key < len(obj):
            return Optional(True, obj[key])
        return NONE
    no_overload("_[?_]", obj, key)


def iter_range(obj: Any) -> Any:
    """The values a one-variable comprehension iterates: list items or map keys."""
    if isinstance(obj, (list, tuple)):
        return obj
    if isinstance(obj, dict):
        return [unwrap_key(k) for k in obj]
    fail(f"got '{go_type_name(obj)}', expected iterable type")


def iter_pairs(obj: Any) -> Any:
    """(index, value) for lists, (key, value) for maps: two-variable comprehensions."""
    if isinstance(obj, (list, tuple)):
        return enumerate(obj)
    if isinstance(obj, dict):
        return [(unwrap_key(k), v) for k, v in obj.items()]
    fail(f"got '{go_type_name(obj)}', expected iterable type")


def list_with_optionals(items: Iterable[tuple[Any, bool]]) -> list[Any]:
    result = []
    for value, optional in items:
        if optional:
            if type(value) is not Optional:
                no_overload("optional list element", value)
            if value.has:
                result.append(value.value)
        else:
            result.append(value)
    return result


def map_with_optionals(entries: Iterable[tuple[Any, Any, bool]]) -> dict[Any, Any]:
    pairs = []
    for key, value, optional in entries:
        if optional:
            if type(value) is not Optional:
                no_overload("optional map entry", value)
            if value.has:
                pairs.append((key, value.value))
        else:
            pairs.append((key, value))
    return build_map(pairs)


# --- conversion at the boundary --------------------------------------------------


def to_cel(value: Any) -> Any:
    """Convert plain Python input (bindings) into the runtime representation."""
    if isinstance(value, dict):
        return build_map((k, to_cel(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [to_cel(v) for v in value]
    return value


def to_python(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """Convert a result into plain Python (map keys unwrapped, lists as lists).

    Parts shared inside the result stay shared (memo by identity): ``[a, a]``
    nested thirty times is cheap to build and must not be expanded into 2**30
    copies here.
    """
    if not isinstance(value, (dict, list, tuple)):
        return value
    if memo is None:
        memo = {}
    known = memo.get(id(value))
    if known is not None:
        return known
    converted: Any
    if isinstance(value, dict):
        converted = {unwrap_key(k): to_python(v, memo) for k, v in value.items()}
    else:
        converted = [to_python(v, memo) for v in value]
    memo[id(value)] = converted
    return converted
