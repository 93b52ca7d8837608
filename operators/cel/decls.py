"""Function declarations for the checker: upstream's overloads for DRA selectors.

What a device selector may call is what the Kubernetes CEL environment declares
(cel-go's standard library with cross-type numeric comparisons and optional
types, the strings extension at version 2, sets, two-variable comprehensions,
lists at version 3, and the Kubernetes quantity, semver, IP/CIDR, regex and
lists libraries). Each overload has upstream's id, because the cost estimator
chooses its formula by overload id, as cel-go's does. Signatures are written
in a small text form so the table reads like the library documentation:
``name id: [target.](arg, ...) -> result``; one capital letter is a type
parameter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Final

from . import types as t


@dataclass(frozen=True, slots=True)
class Overload:
    id: str
    member: bool
    args: tuple[t.Type, ...]  # the receiver first for member overloads
    result: t.Type
    params: tuple[str, ...] = ()  # names of the type parameters used


_COMPARABLE: Final = ("int", "uint", "double", "bool", "duration", "timestamp", "string", "bytes")
_NUMERIC: Final = ("int", "uint", "double")
_GO_NAMES: Final = {"int": "int64", "uint": "uint64"}

_TYPE_NAMES: Final = {
    "dyn": t.DYN,
    "any": t.ANY,
    "null": t.NULL,
    "bool": t.BOOL,
    "int": t.INT,
    "uint": t.UINT,
    "double": t.DOUBLE,
    "string": t.STRING,
    "bytes": t.BYTES,
    "timestamp": t.TIMESTAMP,
    "duration": t.DURATION,
    "Quantity": t.QUANTITY,
    "Semver": t.SEMVER,
    "IP": t.IP,
    "CIDR": t.CIDR,
    "type": t.Type("type", "type"),
}
_TOKEN: Final = re.compile(r"\s*([A-Za-z_]+|[(),])")


def _parse_type(text: str) -> t.Type:
    tokens = [m.group(1) for m in _TOKEN.finditer(text)]
    position = 0

    def one() -> t.Type:
        nonlocal position
        name = tokens[position]
        position += 1
        if position < len(tokens) and tokens[position] == "(":
            position += 1
            inner = [one()]
            while tokens[position] == ",":
                position += 1
                inner.append(one())
            position += 1  # ")"
            if name == "list":
                return t.list_of(inner[0])
            if name == "map":
                return t.map_of(inner[0], inner[1])
            if name == "optional":
                return t.optional_of(inner[0])
            if name == "type":
                return t.type_of(inner[0])
            raise ValueError(f"unknown type constructor {name}")
        if len(name) == 1 and name.isupper():
            return t.param(name)
        return _TYPE_NAMES[name]

    return one()


_SIGNATURE: Final = re.compile(
    r"^(?P<name>\S+) (?P<id>\S+): (?:(?P<target>[^.]+(?:\([^)]*\))?)\.)?\((?P<args>.*)\) -> (?P<result>.+)$"
)


def _split_args(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += char == "("
        depth -= char == ")"
        current += char
    if current.strip():
        parts.append(current)
    return [p.strip() for p in parts]


def _params_in(types: Iterable[t.Type]) -> tuple[str, ...]:
    found: list[str] = []

    def walk(x: t.Type) -> None:
        if x.kind == "param" and x.name not in found:
            found.append(x.name)
        for p in x.params:
            walk(p)

    for x in types:
        walk(x)
    return tuple(found)


def _signatures() -> Iterable[str]:
    """Every overload as one line of text."""
    # The order is cel-go's: overload resolution binds a free type parameter to the
    # first overload that accepts it (``[].map(x, -x)`` is a list(double)).
    yield "_?_:_ conditional: (bool, A, A) -> A"
    yield "!_ logical_not: (bool) -> bool"
    yield "@not_strictly_false not_strictly_false: (bool) -> bool"
    yield "_==_ equals: (A, A) -> bool"
    yield "_!=_ not_equals: (A, A) -> bool"
    yield "_+_ add_bytes: (bytes, bytes) -> bytes"
    yield "_+_ add_double: (double, double) -> double"
    yield "_+_ add_duration_duration: (duration, duration) -> duration"
    yield "_+_ add_duration_timestamp: (duration, timestamp) -> timestamp"
    yield "_+_ add_timestamp_duration: (timestamp, duration) -> timestamp"
    yield "_+_ add_int64: (int, int) -> int"
    yield "_+_ add_list: (list(A), list(A)) -> list(A)"
    yield "_+_ add_string: (string, string) -> string"
    yield "_+_ add_uint64: (uint, uint) -> uint"
    for op, name in (("/", "divide"), ("%", "modulo"), ("*", "multiply")):
        for kind in ("double", "int", "uint"):
            if not (op == "%" and kind == "double"):
                yield f"_{op}_ {name}_{_GO_NAMES.get(kind, kind)}: ({kind}, {kind}) -> {kind}"
    yield "-_ negate_double: (double) -> double"
    yield "-_ negate_int64: (int) -> int"
    yield "_-_ subtract_double: (double, double) -> double"
    yield "_-_ subtract_duration_duration: (duration, duration) -> duration"
    yield "_-_ subtract_int64: (int, int) -> int"
    yield "_-_ subtract_timestamp_duration: (timestamp, duration) -> timestamp"
    yield "_-_ subtract_timestamp_timestamp: (timestamp, timestamp) -> duration"
    yield "_-_ subtract_uint64: (uint, uint) -> uint"
    ordering = (
        ("bool", "bool"),
        ("int", "int"),
        ("int", "double"),
        ("int", "uint"),
        ("uint", "uint"),
        ("uint", "double"),
        ("uint", "int"),
        ("double", "double"),
        ("double", "int"),
        ("double", "uint"),
        ("string", "string"),
        ("bytes", "bytes"),
        ("timestamp", "timestamp"),
        ("duration", "duration"),
    )
    for op, name in (
        ("<", "less"),
        ("<=", "less_equals"),
        (">", "greater"),
        (">=", "greater_equals"),
    ):
        for a, b in ordering:
            ids = _GO_NAMES.get(a, a) if a == b else f"{_GO_NAMES.get(a, a)}_{_GO_NAMES.get(b, b)}"
            yield f"_{op}_ {name}_{ids}: ({a}, {b}) -> bool"
    yield "_[_] index_list: (list(A), int) -> A"
    yield "_[_] index_map: (map(K, V), K) -> V"
    yield "_[_] optional_list_index_int: (optional(list(V)), int) -> optional(V)"
    yield "_[_] optional_map_index_value: (optional(map(K, V)), K) -> optional(V)"
    yield "_[?_] list_optindex_optional_int: (list(V), int) -> optional(V)"
    yield "_[?_] optional_list_optindex_optional_int: (optional(list(V)), int) -> optional(V)"
    yield "_[?_] map_optindex_optional_value: (map(K, V), K) -> optional(V)"
    yield "_[?_] optional_map_optindex_optional_value: (optional(map(K, V)), K) -> optional(V)"
    yield "@in in_list: (A, list(A)) -> bool"
    yield "@in in_map: (A, map(A, B)) -> bool"
    for kind, arg in (
        ("bytes", "bytes"),
        ("list", "list(A)"),
        ("map", "map(A, B)"),
        ("string", "string"),
    ):
        yield f"size size_{kind}: ({arg}) -> int"
        yield f"size {kind}_size: {arg}.() -> int"
    yield from _conversions()
    yield "contains contains_string: string.(string) -> bool"
    yield "startsWith starts_with_string: string.(string) -> bool"
    yield "endsWith ends_with_string: string.(string) -> bool"
    yield "matches matches: (string, string) -> bool"
    yield "matches matches_string: string.(string) -> bool"
    yield from _time_accessors()
    yield from _optionals()
    yield from _strings_extension()
    yield from _lists()
    yield from _kubernetes()


def _conversions() -> Iterable[str]:
    sources = {
        "bool": ("bool", "string"),
        "bytes": ("bytes", "string"),
        "double": ("double", "int", "string", "uint"),
        "duration": ("duration", "string"),
        "int": ("int", "double", "duration", "string", "timestamp", "uint"),
        "string": ("string", "bool", "bytes", "double", "duration", "int", "timestamp", "uint"),
        "timestamp": ("timestamp", "int", "string"),
        "uint": ("uint", "double", "int", "string"),
    }
    for target, froms in sources.items():
        for source in froms:
            ident = f"{_GO_NAMES.get(source, source)}_to_{_GO_NAMES.get(target, target)}"
            yield f"{target} {ident}: ({source}) -> {target}"
    yield "dyn to_dyn: (A) -> dyn"
    yield "type type: (A) -> type(A)"


def _time_accessors() -> Iterable[str]:
    for name in (
        "getFullYear",
        "getMonth",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getHours",
        "getMinutes",
        "getSeconds",
        "getMilliseconds",
    ):
        yield f"{name} timestamp_to_{name}: timestamp.() -> int"
        yield f"{name} timestamp_to_{name}_with_tz: timestamp.(string) -> int"
    for name in ("getHours", "getMinutes", "getSeconds", "getMilliseconds"):
        yield f"{name} duration_to_{name}: duration.() -> int"


def _optionals() -> Iterable[str]:
    yield "optional.of optional_of: (A) -> optional(A)"
    yield "optional.ofNonZeroValue optional_ofNonZeroValue: (A) -> optional(A)"
    yield "optional.none optional_none: () -> optional(A)"
    yield "value optional_value: optional(A).() -> A"
    yield "hasValue optional_hasValue: optional(A).() -> bool"
    yield "or optional_or_optional: optional(A).(optional(A)) -> optional(A)"
    yield "orValue optional_orValue_value: optional(A).(A) -> A"
    yield "first list_first: list(A).() -> optional(A)"
    yield "last list_last: list(A).() -> optional(A)"


def _strings_extension() -> Iterable[str]:
    yield "charAt string_char_at_int: string.(int) -> string"
    yield "indexOf string_index_of_string: string.(string) -> int"
    yield "indexOf string_index_of_string_int: string.(string, int) -> int"
    yield "lastIndexOf string_last_index_of_string: string.(string) -> int"
    yield "lastIndexOf string_last_index_of_string_int: string.(string, int) -> int"
    yield "lowerAscii string_lower_ascii: string.() -> string"
    yield "upperAscii string_upper_ascii: string.() -> string"
    yield "trim string_trim: string.() -> string"
    yield "replace string_replace_string_string: string.(string, string) -> string"
    yield "replace string_replace_string_string_int: string.(string, string, int) -> string"
    yield "split string_split_string: string.(string) -> list(string)"
    yield "split string_split_string_int: string.(string, int) -> list(string)"
    yield "substring string_substring_int: string.(int) -> string"
    yield "substring string_substring_int_int: string.(int, int) -> string"
    yield "format string_format: string.(list(dyn)) -> string"
    yield "strings.quote strings_quote: (string) -> string"
    yield "join list_join: list(string).() -> string"
    yield "join list_join_string: list(string).(string) -> string"
    yield "find string_find_string: string.(string) -> string"
    yield "findAll string_find_all_string: string.(string) -> list(string)"
    yield "findAll string_find_all_string_int: string.(string, int) -> list(string)"


def _lists() -> Iterable[str]:
    yield "sets.contains list_sets_contains_list: (list(T), list(T)) -> bool"
    yield "sets.equivalent list_sets_equivalent_list: (list(T), list(T)) -> bool"
    yield "sets.intersects list_sets_intersects_list: (list(T), list(T)) -> bool"
    yield "slice list_slice: list(T).(int, int) -> list(T)"
    yield "flatten list_flatten: list(list(T)).() -> list(T)"
    yield "flatten list_flatten_int: list(dyn).(int) -> list(dyn)"
    yield "lists.range lists_range: (int) -> list(int)"
    yield "reverse list_reverse: list(T).() -> list(T)"
    yield "distinct list_distinct: list(T).() -> list(T)"
    for kind in _COMPARABLE:
        yield f"sort list_{kind}_sort: list({kind}).() -> list({kind})"
        yield f"isSorted list_{kind}_is_sorted_bool: list({kind}).() -> bool"
        yield f"max list_{kind}_max_{kind}: list({kind}).() -> {kind}"
        yield f"min list_{kind}_min_{kind}: list({kind}).() -> {kind}"
    for kind in ("int", "uint", "double", "duration"):
        yield f"sum list_{kind}_sum_{kind}: list({kind}).() -> {kind}"
    yield "indexOf list_a_index_of_int: list(A).(A) -> int"
    yield "lastIndexOf list_a_last_index_of_int: list(A).(A) -> int"


def _kubernetes() -> Iterable[str]:
    yield "quantity string_to_quantity: (string) -> Quantity"
    yield "isQuantity is_quantity_string: (string) -> bool"
    yield "sign quantity_sign: (Quantity) -> int"
    for kind in ("quantity", "semver"):
        cap = kind.capitalize()
        yield f"isGreaterThan {kind}_is_greater_than: {cap}.({cap}) -> bool"
        yield f"isLessThan {kind}_is_less_than: {cap}.({cap}) -> bool"
        yield f"compareTo {kind}_compare_to: {cap}.({cap}) -> int"
    yield "asApproximateFloat quantity_get_float: Quantity.() -> double"
    yield "asInteger quantity_get_int: Quantity.() -> int"
    yield "isInteger quantity_is_integer: Quantity.() -> bool"
    yield "add quantity_add: Quantity.(Quantity) -> Quantity"
    yield "add quantity_add_int: Quantity.(int) -> Quantity"
    yield "sub quantity_sub: Quantity.(Quantity) -> Quantity"
    yield "sub quantity_sub_int: Quantity.(int) -> Quantity"
    yield "semver string_to_semver: (string) -> Semver"
    yield "semver string_bool_to_semver: (string, bool) -> Semver"
    yield "isSemver is_semver_string: (string) -> bool"
    yield "isSemver is_semver_string_bool: (string, bool) -> bool"
    for name in ("major", "minor", "patch"):
        yield f"{name} semver_{name}: Semver.() -> int"
    yield "ip string_to_ip: (string) -> IP"
    yield "isIP is_ip: (string) -> bool"
    yield "ip.isCanonical ip_is_canonical: (string) -> bool"
    yield "family ip_family: IP.() -> int"
    for name, ident in (
        ("isUnspecified", "unspecified"),
        ("isLoopback", "loopback"),
        ("isLinkLocalMulticast", "link_local_multicast"),
        ("isLinkLocalUnicast", "link_local_unicast"),
        ("isGlobalUnicast", "global_unicast"),
    ):
        yield f"{name} ip_is_{ident}: IP.() -> bool"
    yield "string ip_to_string: (IP) -> string"
    yield "cidr string_to_cidr: (string) -> CIDR"
    yield "isCIDR is_cidr: (string) -> bool"
    yield "containsIP cidr_contains_ip_string: CIDR.(string) -> bool"
    yield "containsIP cidr_contains_ip_ip: CIDR.(IP) -> bool"
    yield "containsCIDR cidr_contains_cidr_string: CIDR.(string) -> bool"
    yield "containsCIDR cidr_contains_cidr: CIDR.(CIDR) -> bool"
    yield "ip cidr_ip: CIDR.() -> IP"
    yield "prefixLength cidr_prefix_length: CIDR.() -> int"
    yield "masked cidr_masked: CIDR.() -> CIDR"
    yield "string cidr_to_string: (CIDR) -> string"


#: Declared only with the DRAListTypeAttributes gate (upstream's IncludesOption).
INCLUDES: Final = "includes list_includes_dyn_dyn: dyn.(dyn) -> bool"


def _parse(line: str) -> tuple[str, Overload]:
    match = _SIGNATURE.match(line)
    if match is None:
        raise ValueError(f"bad signature {line!r}")
    args = [_parse_type(a) for a in _split_args(match["args"])]
    member = match["target"] is not None
    if member:
        args.insert(0, _parse_type(match["target"]))
    result = _parse_type(match["result"])
    overload = Overload(match["id"], member, tuple(args), result, _params_in([*args, result]))
    return match["name"], overload


@cache
def functions(includes: bool) -> dict[str, tuple[Overload, ...]]:
    """Function name -> its overloads, for an environment with or without ``includes``."""
    table: dict[str, list[Overload]] = {}
    lines = list(_signatures())
    if includes:
        lines.append(INCLUDES)
    for line in lines:
        name, overload = _parse(line)
        table.setdefault(name, []).append(overload)
    return {name: tuple(overloads) for name, overloads in table.items()}


__all__ = ["Overload", "functions"]
