"""The CEL function library: standard functions plus the extensions Kubernetes enables.

Two tables map a CEL function name to a Python callable: ``MEMBER`` for
receiver-style calls (``x.f(a)`` calls ``MEMBER["f"](x, a)``) and ``GLOBAL``
for global calls (``f(a)``, including namespaced ones like ``strings.quote``).
A name may have overloads for several receiver types; the callable switches
on the type and raises "no matching overload" otherwise. The translator binds
names at compile time, so an unknown name is a compile error, not a lookup
per evaluation.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import unicodedata
import zoneinfo
from collections.abc import Callable
from decimal import Decimal
from functools import cmp_to_key
from typing import Any

from operators.api.quantity import Quantity
from operators.api.semver import Semver

from .errors import CELEvalError
from .regex import Regex, RegexSyntaxError, compile_regex
from .semantics import (
    add,
    equal_or_false,
    fail,
    less,
    no_overload,
    unwrap_key,
)
from .values import (
    INT64_MAX,
    INT64_MIN,
    NONE,
    QUANTITY_TYPES,
    UINT64_MAX,
    ComputedQuantity,
    Duration,
    Optional,
    Timestamp,
    UInt,
    type_name,
    type_of,
)

#: Upstream truncates ``includes`` to the number of values one device may carry.
INCLUDES_MAX_VALUES = 48

MEMBER: dict[str, Callable[..., Any]] = {}
GLOBAL: dict[str, Callable[..., Any]] = {}


def member(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        MEMBER[name] = fn
        return fn

    return register


def global_(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        GLOBAL[name] = fn
        return fn

    return register


def _is_int(v: Any) -> bool:
    t = type(v)
    return t is int or t is UInt


def _is_list(v: Any) -> bool:
    return isinstance(v, (list, tuple))


# --- size, strings ---------------------------------------------------------------


def _size(value: Any) -> int:
    t = type(value)
    if t is str or t is bytes or t is list or t is tuple or isinstance(value, (dict, list, tuple)):
        return len(value)
    no_overload("size", value)


MEMBER["size"] = _size
GLOBAL["size"] = _size


def _str_pair(fn: str, a: Any, b: Any) -> None:
    if type(a) is not str or type(b) is not str:
        no_overload(fn, a, b)


@member("contains")
def _contains(s: Any, sub: Any) -> bool:
    _str_pair("contains", s, sub)
    return sub in s


@member("startsWith")
def _starts_with(s: Any, prefix: Any) -> bool:
    _str_pair("startsWith", s, prefix)
    return bool(s.startswith(prefix))


@member("endsWith")
def _ends_with(s: Any, suffix: Any) -> bool:
    _str_pair("endsWith", s, suffix)
    return bool(s.endswith(suffix))


def regex_of(fn: str, s: Any, pattern: Any) -> Regex:
    """The compiled pattern (codegen passes constant patterns precompiled)."""
    if type(pattern) is Regex:
        if type(s) is str:
            return pattern
        no_overload(fn, s, pattern.pattern)
    if type(s) is not str or type(pattern) is not str:
        no_overload(fn, s, pattern)
    try:
        return compile_regex(pattern)
    except RegexSyntaxError as exc:
        raise CELEvalError(str(exc)) from None


def _matches(s: Any, pattern: Any) -> bool:
    return regex_of("matches", s, pattern).search(s)


MEMBER["matches"] = _matches
GLOBAL["matches"] = _matches


@member("find")
def _find(s: Any, pattern: Any) -> str:
    return regex_of("find", s, pattern).find(s)


@member("findAll")
def _find_all(s: Any, pattern: Any, limit: Any = -1) -> list[str]:
    regex = regex_of("findAll", s, pattern)
    if not _is_int(limit):
        no_overload("findAll", s, pattern, limit)
    if limit == 0:
        return []
    return regex.find_all(s, int(limit))


#: Functions whose second operand is a pattern; codegen compiles constant ones once.
REGEX_FUNCTIONS = frozenset({"matches", "find", "findAll"})


@member("charAt")
def _char_at(s: Any, i: Any) -> str:
    if type(s) is not str or type(i) is not int:
        no_overload("charAt", s, i)
    if i < 0 or i > len(s):
        fail(f"index out of range: {i}")
    return s[i : i + 1]


def _index_of_str(s: str, sub: str, start: int) -> int:
    if start < 0 or start > len(s):
        fail(f"index out of range: {start}")
    return s.find(sub, start)


@member("indexOf")
def _index_of(receiver: Any, item: Any, start: Any = None) -> int:
    if type(receiver) is str:
        if type(item) is not str or (start is not None and type(start) is not int):
            no_overload("indexOf", receiver, item)
        return _index_of_str(receiver, item, 0 if start is None else start)
    if _is_list(receiver) and start is None:
        for i, value in enumerate(receiver):
            if equal_or_false(value, item):
                return i
        return -1
    no_overload("indexOf", receiver, item)


@member("lastIndexOf")
def _last_index_of(receiver: Any, item: Any, start: Any = None) -> int:
    if type(receiver) is str:
        if type(item) is not str or (start is not None and type(start) is not int):
            no_overload("lastIndexOf", receiver, item)
        if start is None:
            return receiver.rfind(item)
        if start < 0 or start > len(receiver):
            fail(f"index out of range: {start}")
        return receiver.rfind(item, 0, start + len(item))
    if _is_list(receiver) and start is None:
        for i in range(len(receiver) - 1, -1, -1):
            if equal_or_false(receiver[i], item):
                return i
        return -1
    no_overload("lastIndexOf", receiver, item)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


@member("lowerAscii")
def _lower_ascii(s: Any) -> str:
    if type(s) is not str:
        no_overload("lowerAscii", s)
    return s.translate(_ASCII_LOWER)


@member("upperAscii")
def _upper_ascii(s: Any) -> str:
    if type(s) is not str:
        no_overload("upperAscii", s)
    return s.translate(_ASCII_UPPER)


@member("replace")
def _replace(s: Any, old: Any, new: Any, count: Any = -1) -> str:
    if type(s) is not str or type(old) is not str or type(new) is not str or type(count) is not int:
        no_overload("replace", s, old, new, count)
    return s.replace(old, new, count)


@member("split")
def _split(s: Any, sep: Any, limit: Any = -1) -> list[str]:
    if type(s) is not str or type(sep) is not str or type(limit) is not int:
        no_overload("split", s, sep, limit)
    if limit == 0:
        return []
    if sep == "":
        chars = list(s)
        if 0 < limit < len(chars):
            return [*chars[: limit - 1], "".join(chars[limit - 1 :])]
        return chars
    if limit < 0:
        return s.split(sep)
    return s.split(sep, limit - 1)


@member("substring")
def _substring(s: Any, start: Any, end: Any = None) -> str:
    if type(s) is not str or type(start) is not int or (end is not None and type(end) is not int):
        no_overload("substring", s, start, end)
    if end is None:
        end = len(s)
    if start < 0 or start > len(s):
        fail(f"index out of range: {start}")
    if end < 0 or end > len(s):
        fail(f"index out of range: {end}")
    if end < start:
        fail(f"invalid substring range. start: {start}, end: {end}")
    return s[start:end]


# Go's unicode.IsSpace.
_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


@member("trim")
def _trim(s: Any) -> str:
    if type(s) is not str:
        no_overload("trim", s)
    return s.strip(_SPACE)


@member("join")
def _join(items: Any, sep: Any = "") -> str:
    if not _is_list(items) or type(sep) is not str:
        no_overload("join", items, sep)
    for item in items:
        if type(item) is not str:
            no_overload("join", items, sep)
    return str(sep.join(items))


@member("reverse")
def _reverse(value: Any) -> Any:
    if type(value) is str:
        return value[::-1]
    return _list_reverse(value)


def _list_reverse(value: Any) -> Any:
    if _is_list(value):
        return list(reversed(value))
    no_overload("reverse", value)


_QUOTE_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


@global_("strings.quote")
def _quote(s: Any) -> str:
    if type(s) is not str:
        no_overload("strings.quote", s)
    out = ['"']
    for ch in s:
        if ch in _QUOTE_ESCAPES:
            out.append(_QUOTE_ESCAPES[ch])
        elif unicodedata.category(ch).startswith("C") and ch not in "\u200b":
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


# --- string.format ----------------------------------------------------------------

_CLAUSE_RE = re.compile(r"%(?:\.(\d+))?([a-zA-Z%])")


def _format_double_text(value: float) -> str:
    if value != value:
        return "NaN"
    if value == math.inf:
        return "Infinity"
    if value == -math.inf:
        return "-Infinity"
    return double_to_string(value)


def _format_string_clause(value: Any) -> str:
    t = type(value)
    if t is str:
        return str(value)
    if t is bool:
        return "true" if value else "false"
    if t is int or t is UInt:
        return str(int(value))
    if t is float:
        return _format_double_text(value)
    if t is bytes:
        return value.decode("utf-8", errors="replace")
    if value is None:
        return "null"
    if t in (Timestamp, Duration):
        return str(value)
    if _is_list(value):
        return "[" + ", ".join(_format_string_clause(v) for v in value) + "]"
    if isinstance(value, dict):
        parts = sorted(
            (_format_string_clause(unwrap_key(k)), _format_string_clause(v))
            for k, v in value.items()
        )
        return "{" + ", ".join(f"{k}: {v}" for k, v in parts) + "}"
    if t.__name__ == "CelType":
        return str(value)
    fail(
        "error during formatting: string clause can only be used on strings, bools, bytes, "
        f"ints, doubles, maps, lists, types, durations, and timestamps, was given {type_name(value)}"
    )


def _format_special_float(value: float) -> str | None:
    if value != value:
        return "NaN"
    if value == math.inf:
        return "Infinity"
    if value == -math.inf:
        return "-Infinity"
    return None


def _format_clause(verb: str, precision: str | None, value: Any) -> str:
    t = type(value)
    if verb == "s":
        return _format_string_clause(value)
    if verb == "d":
        if t is int or t is UInt:
            return str(int(value))
        if t is float and _format_special_float(value) is not None:
            return str(_format_special_float(value))
        fail(
            f"error during formatting: decimal clause can only be used on integers, was given {type_name(value)}"
        )
    if verb in "fe":
        digits = 6 if precision is None else int(precision)
        if t is int or t is UInt:
            value = float(value)
        elif t is not float:
            kind = "fixed-point" if verb == "f" else "scientific"
            fail(
                f"error during formatting: {kind} clause can only be used on doubles, was given {type_name(value)}"
            )
        special = _format_special_float(value)
        if special is not None:
            return special
        return f"{value:.{digits}{verb}}"
    if verb == "b":
        if t is int or t is UInt:
            return format(int(value), "b")
        if t is bool:
            return "1" if value else "0"
        fail(
            f"error during formatting: only integers and bools can be formatted as binary, was given {type_name(value)}"
        )
    if verb == "o":
        if t is int or t is UInt:
            return format(int(value), "o")
        fail(
            f"error during formatting: octal clause can only be used on integers, was given {type_name(value)}"
        )
    if verb in "xX":
        if t is int or t is UInt:
            text = format(int(value), "x")
        elif t is str:
            text = value.encode("utf-8").hex()
        elif t is bytes:
            text = value.hex()
        else:
            fail(
                "error during formatting: only integers, byte buffers, and strings can be formatted as hex, "
                f"was given {type_name(value)}"
            )
        return text.upper() if verb == "X" else text
    fail(f'could not parse formatting clause: unrecognized formatting clause "{verb}"')


@member("format")
def _format(template: Any, args: Any) -> str:
    if type(template) is not str or not _is_list(args):
        no_overload("format", template, args)
    out: list[str] = []
    pos = 0
    arg_index = 0
    for m in _CLAUSE_RE.finditer(template):
        out.append(template[pos : m.start()])
        pos = m.end()
        precision, verb = m.group(1), m.group(2)
        if verb == "%":
            out.append("%")
            continue
        if verb not in "sdfeboxX":
            fail(f'could not parse formatting clause: unrecognized formatting clause "{verb}"')
        if arg_index >= len(args):
            fail(f"index {arg_index} out of range")
        out.append(_format_clause(verb, precision, args[arg_index]))
        arg_index += 1
    out.append(template[pos:])
    return "".join(out)


# --- conversions -------------------------------------------------------------------


def double_to_string(value: float) -> str:
    """Format a double like Go's ``strconv.FormatFloat(f, 'g', -1, 64)`` with %v limits."""
    special = _format_special_float(value)
    if special is not None:
        return "+Inf" if special == "Infinity" else ("-Inf" if special == "-Infinity" else special)
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    digits, exponent = _shortest_digits(value)
    decimal_exp = exponent + len(digits) - 1
    sign = "-" if value < 0 else ""
    if -4 <= decimal_exp < 21:
        text = format(Decimal(repr(abs(value))), "f")
        return sign + text
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{'+' if decimal_exp >= 0 else '-'}{abs(decimal_exp):02d}"


def _shortest_digits(value: float) -> tuple[str, int]:
    _sign, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    stripped = len(digit_tuple) - len(digits)
    assert isinstance(exponent, int)
    return digits, exponent + stripped


@global_("int")
def _to_int(value: Any) -> int:
    t = type(value)
    if t is int:
        return value
    if t is UInt:
        if value > INT64_MAX:
            fail("range error converting uint to int")
        return int(value)
    if t is float:
        if not (-(2.0**63) < value < 2.0**63):
            fail("range error converting double to int")
        return int(value)
    if t is str:
        try:
            result = int(value, 10)
        except ValueError:
            fail(f"Type conversion error: cannot convert {value!r} to int")
        if not INT64_MIN <= result <= INT64_MAX:
            fail("range error converting string to int")
        return result
    if t is Timestamp:
        return value.seconds()
    no_overload("int", value)


@global_("uint")
def _to_uint(value: Any) -> UInt:
    t = type(value)
    if t is UInt:
        return value
    if t is int:
        if value < 0:
            fail("range error converting int to uint")
        return UInt(value)
    if t is float:
        if not (-1.0 < value < 2.0**64):
            fail("range error converting double to uint")
        return UInt(int(value))
    if t is str:
        try:
            result = int(value, 10)
        except ValueError:
            fail(f"Type conversion error: cannot convert {value!r} to uint")
        if not 0 <= result <= UINT64_MAX:
            fail("range error converting string to uint")
        return UInt(result)
    no_overload("uint", value)


@global_("double")
def _to_double(value: Any) -> float:
    t = type(value)
    if t is float:
        return value
    if t is int or t is UInt:
        return float(value)
    if t is str:
        try:
            return float(value)
        except ValueError:
            fail(f"Type conversion error: cannot convert {value!r} to double")
    no_overload("double", value)


@global_("string")
def _to_string(value: Any) -> str:
    t = type(value)
    if t is str:
        return value
    if t is int or t is UInt:
        return str(int(value))
    if t is float:
        return double_to_string(value)
    if t is bool:
        return "true" if value else "false"
    if t is bytes:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            fail("invalid UTF-8 in bytes to string conversion")
    if t is Timestamp or t is Duration:
        return str(value)
    # Upstream converts neither a quantity nor a semver to a string.
    no_overload("string", value)


@global_("bytes")
def _to_bytes(value: Any) -> bytes:
    if type(value) is bytes:
        return value
    if type(value) is str:
        return value.encode("utf-8")
    no_overload("bytes", value)


_TRUE_STRINGS = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE_STRINGS = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@global_("bool")
def _to_bool(value: Any) -> bool:
    if type(value) is bool:
        return value
    if type(value) is str:
        if value in _TRUE_STRINGS:
            return True
        if value in _FALSE_STRINGS:
            return False
        fail(f"Type conversion error: cannot convert {value!r} to bool")
    no_overload("bool", value)


GLOBAL["type"] = type_of
GLOBAL["dyn"] = lambda value: value


# --- time ----------------------------------------------------------------------------


@global_("timestamp")
def _to_timestamp(value: Any) -> Timestamp:
    if type(value) is Timestamp:
        return value
    if type(value) is str:
        return Timestamp.parse(value)
    if type(value) is int:
        return Timestamp(value * 10**9)
    no_overload("timestamp", value)


@global_("duration")
def _to_duration(value: Any) -> Duration:
    if type(value) is Duration:
        return value
    if type(value) is str:
        return Duration.parse(value)
    no_overload("duration", value)


_OFFSET_RE = re.compile(r"^([+-]?)(\d{1,2}):(\d{2})$")


def _zone(tz: Any) -> _dt.tzinfo:
    if type(tz) is not str:
        no_overload("timezone", tz)
    m = _OFFSET_RE.match(tz)
    if m:
        delta = _dt.timedelta(hours=int(m.group(2)), minutes=int(m.group(3)))
        return _dt.timezone(-delta if m.group(1) == "-" else delta)
    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        fail(f"unknown time zone {tz!r}")


def _time_getter(
    name: str, from_datetime: Callable[[_dt.datetime, Timestamp], int], duration_ns: int | None
) -> None:
    def getter(value: Any, tz: Any = None) -> int:
        if type(value) is Timestamp:
            moment = value.datetime(_zone(tz) if tz is not None else _dt.UTC)
            return from_datetime(moment, value)
        if type(value) is Duration and tz is None and duration_ns is not None:
            return int(value.ns / duration_ns) if value.ns < 0 else value.ns // duration_ns
        no_overload(name, value)

    MEMBER[name] = getter


_time_getter("getFullYear", lambda d, t: d.year, None)
_time_getter("getMonth", lambda d, t: d.month - 1, None)
_time_getter("getDate", lambda d, t: d.day, None)
_time_getter("getDayOfMonth", lambda d, t: d.day - 1, None)
_time_getter("getDayOfWeek", lambda d, t: (d.weekday() + 1) % 7, None)
_time_getter("getDayOfYear", lambda d, t: d.timetuple().tm_yday - 1, None)
_time_getter("getHours", lambda d, t: d.hour, 3600 * 10**9)
_time_getter("getMinutes", lambda d, t: d.minute, 60 * 10**9)
_time_getter("getSeconds", lambda d, t: d.second, 10**9)
_time_getter("getMilliseconds", lambda d, t: (t.ns % 10**9) // 10**6, 10**6)


# --- optionals -------------------------------------------------------------------------


@global_("optional.of")
def _optional_of(value: Any) -> Optional:
    return Optional(True, value)


@global_("optional.none")
def _optional_none() -> Optional:
    return NONE


def _is_zero(value: Any) -> bool:
    if value is None or value is False:
        return True
    t = type(value)
    if t in (int, UInt, float, str, bytes):
        return not value
    if _is_list(value) or isinstance(value, dict):
        return len(value) == 0
    if t is Optional:
        return not value.has
    if t is Duration:
        return value.ns == 0
    if t is Timestamp:
        return value.ns == 0
    return False


@global_("optional.ofNonZeroValue")
def _optional_of_non_zero(value: Any) -> Optional:
    return NONE if _is_zero(value) else Optional(True, value)


def _require_optional(fn: str, value: Any) -> Optional:
    if type(value) is not Optional:
        no_overload(fn, value)
    return value


@member("hasValue")
def _has_value(opt: Any) -> bool:
    return _require_optional("hasValue", opt).has


@member("value")
def _value(opt: Any) -> Any:
    if not _require_optional("value", opt).has:
        fail("optional.none() dereference")
    return opt.value


@member("orValue")
def _or_value(opt: Any, default: Any) -> Any:
    o = _require_optional("orValue", opt)
    return o.value if o.has else default


@member("or")
def _or(opt: Any, other: Any) -> Any:
    o = _require_optional("or", opt)
    if o.has:
        return o
    return _require_optional("or", other)


# --- lists and sets ------------------------------------------------------------------------


def _require_list(fn: str, value: Any) -> Any:
    if not _is_list(value):
        no_overload(fn, value)
    return value


@member("isSorted")
def _is_sorted(items: Any) -> bool:
    items = _require_list("isSorted", items)
    return all(not less(items[i + 1], items[i]) for i in range(len(items) - 1))


@member("sum")
def _sum(items: Any) -> Any:
    items = _require_list("sum", items)
    if not items:
        return 0
    for item in items:
        # Numbers and durations only: adding strings or lists here would build
        # quadratic intermediate results outside the cost model.
        if type(item) not in (int, UInt, float, Duration):
            no_overload("sum", items)
    total = items[0]
    for item in items[1:]:
        total = add(total, item)
    return total


def _extreme(name: str, items: Any, before: Callable[[Any, Any], bool]) -> Any:
    """The first item that no later item comes `before` (CEL's lists min and max)."""
    items = _require_list(name, items)
    if not items:
        fail(f"{name} called on empty list")
    best = items[0]
    for item in items[1:]:
        if before(item, best):
            best = item
    return best


@member("min")
def _min(items: Any) -> Any:
    return _extreme("min", items, less)


@member("max")
def _max(items: Any) -> Any:
    return _extreme("max", items, lambda a, b: less(b, a))


@member("slice")
def _slice(items: Any, start: Any, end: Any) -> list[Any]:
    items = _require_list("slice", items)
    if type(start) is not int or type(end) is not int:
        no_overload("slice", items, start, end)
    if start < 0 or end < 0:
        fail(f"cannot slice(${start}, ${end}), negative indexes not supported")
    if start > end:
        fail(f"cannot slice({start}, {end}), start index must be less than or equal to end index")
    if end > len(items):
        fail(f"cannot slice({start}, {end}), list is length {len(items)}")
    return list(items[start:end])


@member("flatten")
def _flatten(items: Any, depth: Any = 1) -> list[Any]:
    items = _require_list("flatten", items)
    if type(depth) is not int:
        no_overload("flatten", items, depth)
    if depth < 0:
        fail("level must be non-negative")
    result: list[Any] = []
    for item in items:
        if _is_list(item) and depth > 0:
            result.extend(_flatten(item, depth - 1))
        else:
            result.append(item)
    return result


# Upstream is wrong here and dralloc keeps the spec's answer: cel-go v0.29.2 fails with an
# internal error ("interface conversion: *types.Err is not traits.Lister") when distinct()
# gets an error as its receiver, so `<missing attribute>.distinct().exists(x, true) && false`
# aborts upstream where `&&` must absorb the error and give false (bench/celdiff counts these
# as upstream internal errors, not as mismatches).
@member("distinct")
def _distinct(items: Any) -> list[Any]:
    items = _require_list("distinct", items)
    result: list[Any] = []
    for item in items:
        if not any(equal_or_false(item, seen) for seen in result):
            result.append(item)
    return result


@member("sort")
def _sort(items: Any) -> list[Any]:
    items = _require_list("sort", items)

    def cmp(a: Any, b: Any) -> int:
        return -1 if less(a, b) else (1 if less(b, a) else 0)

    return sorted(items, key=cmp_to_key(cmp))


@member("first")
def _first(items: Any) -> Optional:
    items = _require_list("first", items)
    return Optional(True, items[0]) if items else NONE


@member("last")
def _last(items: Any) -> Optional:
    items = _require_list("last", items)
    return Optional(True, items[-1]) if items else NONE


@global_("lists.range")
def _lists_range(n: Any) -> list[int]:
    if type(n) is not int:
        no_overload("lists.range", n)
    return list(range(n))


@global_("sets.contains")
def _sets_contains(a: Any, b: Any) -> bool:
    _require_list("sets.contains", a)
    _require_list("sets.contains", b)
    return all(any(equal_or_false(x, y) for y in a) for x in b)


@global_("sets.equivalent")
def _sets_equivalent(a: Any, b: Any) -> bool:
    return _sets_contains(a, b) and _sets_contains(b, a)


@global_("sets.intersects")
def _sets_intersects(a: Any, b: Any) -> bool:
    _require_list("sets.intersects", a)
    _require_list("sets.intersects", b)
    return any(any(equal_or_false(x, y) for y in b) for x in a)


# --- quantity and semver (Kubernetes libraries) -----------------------------------------------


#: Text without digits that Kubernetes' parser still reads, as zero ("." or "k"; CEL's
#: quantity() takes it, the API models do not).
_DIGITLESS_QUANTITY = re.compile(
    r"[+-]?\.?(?:(Ki|Mi|Gi|Ti|Pi|Ei)|[eE]([+-]?[0-9]+)|([numkMGTPE]))?"
)
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def _parse_quantity(text: str) -> Quantity | None:
    try:
        return Quantity(text)
    except ValueError:
        pass
    match = _DIGITLESS_QUANTITY.fullmatch(text) if text else None
    if match is None:
        return None
    binary, exponent, decimal = match.groups()
    if binary is not None:
        return Quantity.from_nanos(0, amount=(0, 0))
    scale = int(exponent) if exponent is not None else _DECIMAL_EXPONENTS.get(decimal or "", 0)
    return Quantity.from_nanos(0, amount=(0, scale) if scale >= -9 else None)


@global_("quantity")
def _quantity(text: Any) -> Quantity:
    if type(text) is not str:
        no_overload("quantity", text)
    quantity = _parse_quantity(text)
    if quantity is None:
        fail(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    return quantity


@global_("isQuantity")
def _is_quantity(text: Any) -> bool:
    if type(text) is not str:
        no_overload("isQuantity", text)
    return _parse_quantity(text) is not None


def _semver_args(fn: str, text: Any, normalize: Any) -> None:
    if type(text) is not str or type(normalize) is not bool:
        no_overload(fn, text, normalize)


@global_("semver")
def _semver(text: Any, normalize: Any = False) -> Semver:
    _semver_args("semver", text, normalize)
    try:
        return Semver.parse(text, normalize)
    except ValueError as exc:
        fail(f"could not parse semver: {exc}")


@global_("isSemver")
def _is_semver(text: Any, normalize: Any = False) -> bool:
    _semver_args("isSemver", text, normalize)
    try:
        Semver.parse(text, normalize)
    except ValueError:
        return False
    return True


def _semver_part(name: str) -> None:
    def getter(v: Any) -> int:
        if type(v) is not Semver:
            no_overload(name, v)
        return int(getattr(v, name))

    MEMBER[name] = getter


for _part in ("major", "minor", "patch"):
    _semver_part(_part)


@member("compareTo")
def _compare_to(a: Any, b: Any) -> int:
    ta, tb = type(a), type(b)
    if ta is tb is Quantity or (ta in QUANTITY_TYPES and tb in QUANTITY_TYPES):
        return a.cmp(b)
    if ta is Semver and tb is Semver:
        return a.compare(b)
    no_overload("compareTo", a, b)


@member("isGreaterThan")
def _is_greater_than(a: Any, b: Any) -> bool:
    return _compare_to(a, b) > 0


@member("isLessThan")
def _is_less_than(a: Any, b: Any) -> bool:
    return _compare_to(a, b) < 0


def _quantity_operand(fn: str, q: Any, other: Any) -> Quantity:
    if type(q) is not Quantity and type(q) is not ComputedQuantity:
        no_overload(fn, q, other)
    if type(other) is Quantity or type(other) is ComputedQuantity:
        return other
    if type(other) is int:
        return Quantity(other)
    no_overload(fn, q, other)


def _amount_sum(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    """How Kubernetes holds a + b: int64 while both are and the sum fits, else a decimal."""
    if a is None or b is None:
        return None
    (av, ascale), (bv, bscale) = a, b
    if bv == 0:
        return a
    if av == 0:
        return b
    # The finer scale wins; the coarser value is multiplied up (and must fit on its own).
    if ascale > bscale:
        av, ascale = av * 10 ** (ascale - bscale), bscale
    elif bscale > ascale:
        bv = bv * 10 ** (bscale - ascale)
    if not INT64_MIN <= av <= INT64_MAX or not INT64_MIN <= bv <= INT64_MAX:
        return None
    total = av + bv
    return (total, ascale) if INT64_MIN <= total <= INT64_MAX else None


@member("add")
def _q_add(q: Any, other: Any) -> Quantity:
    y = _quantity_operand("add", q, other)
    amount = _amount_sum(q.int64_amount, y.int64_amount)
    return ComputedQuantity.from_nanos(q.nanos + y.nanos, q.format, amount)


@member("sub")
def _q_sub(q: Any, other: Any) -> Quantity:
    y = _quantity_operand("sub", q, other)
    negated = y.int64_amount
    nanos = q.nanos - y.nanos
    if negated is not None:
        # Kubernetes negates the int64 value in place, and -MinInt64 wraps to MinInt64: the
        # int64 path then adds the subtrahend instead (q - MinInt64 == q + MinInt64, when it
        # fits). Upstream's answer, so dralloc's; a decimal operand takes the exact path.
        wrapped = negated[0] == INT64_MIN
        negated = (negated[0] if wrapped else -negated[0], negated[1])
        amount = _amount_sum(q.int64_amount, negated)
        if wrapped and amount is not None:
            nanos = q.nanos + y.nanos
    else:
        amount = None
    return ComputedQuantity.from_nanos(nanos, q.format, amount)


def _as_int64(fn: str, q: Any) -> int | None:
    """Kubernetes' Quantity.AsInt64: only an int64 amount of scale >= 0 that fits converts."""
    if type(q) is not Quantity and type(q) is not ComputedQuantity:
        no_overload(fn, q)
    amount = q.int64_amount
    if amount is None or amount[1] < 0:
        return None
    value = amount[0] * 10 ** amount[1]
    return value if INT64_MIN <= value <= INT64_MAX else None


@member("asInteger")
def _q_as_integer(q: Any) -> int:
    value = _as_int64("asInteger", q)
    if value is None:
        fail("cannot convert value to integer")
    return value


@member("isInteger")
def _q_is_integer(q: Any) -> bool:
    return _as_int64("isInteger", q) is not None


@member("asApproximateFloat")
def _q_as_float(q: Any) -> float:
    if type(q) is not Quantity and type(q) is not ComputedQuantity:
        no_overload("asApproximateFloat", q)
    return float(q.as_float())


# A global function upstream (`sign(quantity("-1"))`), not a method.
@global_("sign")
def _q_sign(q: Any) -> int:
    if type(q) is not Quantity and type(q) is not ComputedQuantity:
        no_overload("sign", q)
    return int(q.sign)


def includes(target: Any, value: Any) -> bool:
    """DRA ``x.includes(v)``: membership in a list attribute, or equality with a scalar."""
    if _is_list(target):
        return any(equal_or_false(item, value) for item in target[:INCLUDES_MAX_VALUES])
    return equal_or_false(target, value)


#: Member functions whose overloads differ in Kubernetes' environment at upstream's version:
#: its strings extension (version 2) has no reverse(), only the lists extension does.
KUBERNETES_MEMBER = {"reverse": _list_reverse}

#: Functions that only exist behind a feature gate, by name.
GATED_MEMBER = {"includes": includes}
