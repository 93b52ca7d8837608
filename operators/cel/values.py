"""Runtime representation of CEL values as plain Python objects.

CEL int, double, bool, string, bytes, null, list and map map onto Python's
``int``, ``float``, ``bool``, ``str``, ``bytes``, ``None``, ``list``/``tuple`` and
``dict``. Only what Python cannot tell apart needs a class of its own:
``UInt`` (CEL uint), ``BoolKey`` (a bool map key, which Python would merge
with the int keys 1 and 0), ``Optional``, ``CelType`` (type values),
``Timestamp`` and ``Duration``.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

from operators.api.quantity import Quantity
from operators.api.semver import Semver

from .errors import CELEvalError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1


class UInt(int):
    """A CEL ``uint``: an int that remembers it is unsigned."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}u"


class ComputedQuantity(Quantity):
    """A quantity the quantity library computed (``add``, ``sub``).

    Upstream hands these out by reference, and its quantity equality only accepts a
    quantity held by value as the right operand: ``q.add(1) == quantity("2")`` compares,
    ``quantity("2") == q.add(1)`` and ``q.add(1) == q.sub(1)`` are "no such overload".
    Everything else treats it as the quantity it is.
    """

    __slots__ = ()


QUANTITY_TYPES = (Quantity, ComputedQuantity)


class BoolKey:
    """A bool used as a map key (keeps ``true`` and ``1`` apart in a dict)."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is BoolKey and other.value is self.value

    def __hash__(self) -> int:
        return hash(("cel-bool-key", self.value))

    def __repr__(self) -> str:
        return "true" if self.value else "false"


TRUE_KEY = BoolKey(True)
FALSE_KEY = BoolKey(False)


class CelType:
    """A CEL type value, as returned by ``type(x)`` or written as ``int``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is CelType and other.name == self.name

    def __hash__(self) -> int:
        return hash(("cel-type", self.name))

    def __repr__(self) -> str:
        return self.name


TYPE_NAMES = (
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "optional_type",
)
TYPES = {name: CelType(name) for name in TYPE_NAMES}
TIMESTAMP_TYPE_NAME = "google.protobuf.Timestamp"
DURATION_TYPE_NAME = "google.protobuf.Duration"


class Optional:
    """A CEL ``optional``: either empty (``NONE``) or holding one value."""

    __slots__ = ("has", "value")

    def __init__(self, has: bool, value: Any = None) -> None:
        self.has = has
        self.value = value

    def __eq__(self, other: object) -> bool:
        if type(other) is not Optional:
            return False
        if not self.has or not other.has:
            return self.has == other.has
        from .semantics import equals  # late import: runtime depends on this module

        return equals(self.value, other.value)

    def __hash__(self) -> int:
        return hash(("cel-optional", self.has))

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.has else "optional.none()"


NONE = Optional(False)

# --- time ------------------------------------------------------------------

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_TS_MIN = -62135596800 * 10**9  # 0001-01-01T00:00:00Z
_TS_MAX = 253402300799 * 10**9 + 999_999_999  # 9999-12-31T23:59:59.999999999Z
_RFC3339_RE = re.compile(
    r"^(\d{4,})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)


class Timestamp:
    """A point in time with nanosecond precision (nanoseconds since the Unix epoch)."""

    __slots__ = ("ns",)

    def __init__(self, ns: int) -> None:
        if not _TS_MIN <= ns <= _TS_MAX:
            raise CELEvalError("timestamp out of range")
        self.ns = ns

    @classmethod
    def parse(cls, text: str) -> Timestamp:
        m = _RFC3339_RE.match(text)
        if m is None:
            raise CELEvalError(f"failed to parse timestamp {text!r}")
        year = int(m.group(1))
        if not 1 <= year <= 9999:
            raise CELEvalError("timestamp out of range")
        try:
            moment = _dt.datetime(
                year,
                int(m.group(2)),
                int(m.group(3)),
                int(m.group(4)),
                int(m.group(5)),
                int(m.group(6)),
                tzinfo=_dt.UTC,
            )
        except ValueError as exc:
            raise CELEvalError(f"failed to parse timestamp {text!r}: {exc}") from None
        seconds = (moment - _EPOCH) // _dt.timedelta(seconds=1)
        if m.group(9):
            offset = (int(m.group(10)) * 60 + int(m.group(11))) * 60
            seconds -= offset if m.group(9) == "+" else -offset
        nanos = int((m.group(7) or "").ljust(9, "0"))
        return cls(seconds * 10**9 + nanos)

    def seconds(self) -> int:
        return self.ns // 10**9

    def datetime(self, tz: _dt.tzinfo = _dt.UTC) -> _dt.datetime:
        return (_EPOCH + _dt.timedelta(seconds=self.seconds())).astimezone(tz)

    def __eq__(self, other: object) -> bool:
        return type(other) is Timestamp and other.ns == self.ns

    def __hash__(self) -> int:
        return hash(("ts", self.ns))

    def __lt__(self, other: Timestamp) -> bool:
        return self.ns < other.ns

    def __le__(self, other: Timestamp) -> bool:
        return self.ns <= other.ns

    def __gt__(self, other: Timestamp) -> bool:
        return self.ns > other.ns

    def __ge__(self, other: Timestamp) -> bool:
        return self.ns >= other.ns

    def __str__(self) -> str:
        base = self.datetime().strftime("%Y-%m-%dT%H:%M:%S")
        base = base.rjust(19, "0")
        frac = self.ns % 10**9
        if frac:
            base += "." + f"{frac:09d}".rstrip("0")
        return base + "Z"

    __repr__ = __str__


_DURATION_PART_RE = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_NS = {
    "ns": 1,
    "us": 10**3,
    "µs": 10**3,
    "μs": 10**3,
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}


class Duration:
    """A signed span of time in nanoseconds, limited to the int64 range like cel-go."""

    __slots__ = ("ns",)

    def __init__(self, ns: int) -> None:
        if not INT64_MIN <= ns <= INT64_MAX:
            raise CELEvalError("duration out of range")
        self.ns = ns

    @classmethod
    def parse(cls, text: str) -> Duration:
        body = text
        sign = 1
        if body[:1] in "+-" and body:
            sign = -1 if body[0] == "-" else 1
            body = body[1:]
        if body == "0":
            return cls(0)
        if not body:
            raise CELEvalError(f"invalid duration {text!r}")
        total = 0
        pos = 0
        while pos < len(body):
            m = _DURATION_PART_RE.match(body, pos)
            if m is None or m.group(1) in ("", "."):
                raise CELEvalError(f"invalid duration {text!r}")
            number, unit = m.group(1), m.group(2)
            whole, _, frac = number.partition(".")
            scale = _UNIT_NS[unit]
            total += int(whole or "0") * scale
            if frac:
                total += int(frac) * scale // 10 ** len(frac)
            pos = m.end()
        try:
            return cls(sign * total)
        except CELEvalError:
            raise CELEvalError(f"duration out of range: {text!r}") from None

    def __eq__(self, other: object) -> bool:
        return type(other) is Duration and other.ns == self.ns

    def __hash__(self) -> int:
        return hash(("dur", self.ns))

    def __lt__(self, other: Duration) -> bool:
        return self.ns < other.ns

    def __le__(self, other: Duration) -> bool:
        return self.ns <= other.ns

    def __gt__(self, other: Duration) -> bool:
        return self.ns > other.ns

    def __ge__(self, other: Duration) -> bool:
        return self.ns >= other.ns

    def __str__(self) -> str:
        sign = "-" if self.ns < 0 else ""
        whole, frac = divmod(abs(self.ns), 10**9)
        text = f"{sign}{whole}"
        if frac:
            text += "." + f"{frac:09d}".rstrip("0")
        return text + "s"

    __repr__ = __str__


# --- type names ----------------------------------------------------------------

_TYPE_NAME_BY_CLASS: dict[type, str] = {
    bool: "bool",
    int: "int",
    UInt: "uint",
    float: "double",
    str: "string",
    bytes: "bytes",
    type(None): "null_type",
    list: "list",
    tuple: "list",
    dict: "map",
    Optional: "optional_type",
    CelType: "type",
    Timestamp: TIMESTAMP_TYPE_NAME,
    Duration: DURATION_TYPE_NAME,
    Quantity: "kubernetes.Quantity",
    ComputedQuantity: "kubernetes.Quantity",
    Semver: "kubernetes.Semver",
}

# The Go type names cel-go prints in some messages ("got 'types.Int', ...").
_GO_TYPE_NAME_BY_CLASS: dict[type, str] = {
    bool: "types.Bool",
    int: "types.Int",
    UInt: "types.Uint",
    float: "types.Double",
    str: "types.String",
    bytes: "types.Bytes",
    type(None): "types.Null",
    Optional: "*types.Optional",
    CelType: "*types.Type",
    Timestamp: "types.Timestamp",
    Duration: "types.Duration",
    Quantity: "cel.Quantity",
    ComputedQuantity: "*cel.Quantity",
    Semver: "cel.Semver",
}


def type_name(value: Any) -> str:
    """The CEL type name of a runtime value (``int``, ``map``, ...)."""
    name = _TYPE_NAME_BY_CLASS.get(type(value))
    if name is not None:
        return name
    if isinstance(value, dict):
        return "map"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def go_type_name(value: Any) -> str:
    """The Go type cel-go would report for a value in iteration errors."""
    return _GO_TYPE_NAME_BY_CLASS.get(type(value), type(value).__name__)


def type_of(value: Any) -> CelType:
    name = type_name(value)
    return TYPES.get(name) or CelType(name)
