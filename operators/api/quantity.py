"""Kubernetes resource quantities ("80Gi", "100m", "1e3") with exact arithmetic.

One type serves the API models (pydantic field), CEL's quantity library and the
allocator. Capacities, counters and capacity requests are compared and summed, so they
must be exact: a quantity is kept as an integer number of nano-units (the finest precision
Kubernetes keeps; finer input is rounded away from zero, as upstream does) plus the
notation it was written in, which only matters for printing. Equality, ordering and
hashing look at the value alone, so "1Gi" == "1024Mi" and "1k" == "1000".

`str()` is Kubernetes' canonical form (`Quantity.String()`: "1.5Gi" prints "1536Mi",
"1000" prints "1k"), which is also what the API serialises. CEL has no conversion of a
quantity to a string upstream (its `ConvertToType` only knows the quantity and type
types), so the text as written is not kept.

Parsing is memoised per string: slices repeat the same few capacity strings thousands of
times, and a dictionary hit is far cheaper than the grammar.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Any, Final

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

__all__ = ["NANO", "QUANTITY_PATTERN", "Quantity", "QuantityFormat", "QuantityParseError"]


class QuantityParseError(ValueError):
    """The text is not a Kubernetes quantity."""


class QuantityFormat(StrEnum):
    """How a quantity is printed; the same three families as Kubernetes."""

    BINARY_SI = "BinarySI"  # Ki, Mi, Gi, ... (powers of 1024)
    DECIMAL_SI = "DecimalSI"  # n, u, m, "", k, M, G, ... (powers of 1000)
    DECIMAL_EXPONENT = "DecimalExponent"  # 1e3, 5E-3


NANO: Final = 10**9

# Grammar (Kubernetes resource.Quantity): sign, digits with an optional fraction, then one
# suffix: a binary SI suffix, a decimal SI suffix, or an exponent "e<int>"/"E<int>".
_QUANTITY_RE: Final = re.compile(
    r"([+-]?)([0-9]*)(?:\.([0-9]*))?"
    r"(?:(Ki|Mi|Gi|Ti|Pi|Ei)|([eE][+-]?[0-9]+)|(n|u|m|k|M|G|T|P|E)?)\Z"  # \Z: not before a newline
)

_BINARY_EXP: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_EXP: Final = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX: Final = {exp: suffix for suffix, exp in _DECIMAL_EXP.items()} | {0: ""}
_BINARY_SUFFIX: Final = {exp: suffix for suffix, exp in _BINARY_EXP.items()} | {0: ""}

# Upstream caps binary-SI quantities at the 64-bit integer range of whole units (decimal
# ones are kept as written). Exponents beyond this are refused outright so that a hostile
# "1e999999999" cannot make us build a gigantic integer; upstream accepts them, but no
# device publishes such a capacity.
_MAX_EXPONENT: Final = 400
_MAX_BINARY_NANO: Final = (2**63 - 1) * NANO
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1

_CACHE_LIMIT: Final = 4096
_cache: dict[str, Quantity] = {}


def _ceil_div_away(numerator: int, denominator: int) -> int:
    """numerator / denominator rounded away from zero (upstream rounds up to 1n)."""
    q, r = divmod(abs(numerator), denominator)
    if r:
        q += 1
    return -q if numerator < 0 else q


#: `Quantity._amount` before it is needed: derived from the canonical text.
_DERIVED: Final = object()


def _parsed_amount(
    text: str,
    whole: str,
    fraction: str | None,
    binary: str | None,
    exponent: str | None,
    decimal: str | None,
) -> tuple[int, int] | None:
    """Kubernetes' ParseQuantity fast path: (value, scale) if it keeps an int64, else None."""
    if text == "0":
        return (0, 0)
    negative = text.startswith("-")
    num = whole.lstrip("0") or "0"
    denom = fraction or ""
    if binary is not None:
        exp2 = _BINARY_EXP[binary]
        if denom:
            return None
        precision = 15 - len(num) - int(exp2 * 3 / 10) - 1
        scale, multiplier = 0, 2**exp2
    else:
        exp10 = int(exponent[1:]) if exponent else (_DECIMAL_EXP[decimal] if decimal else 0)
        precision = 18 - len(num) - len(denom)
        scale, multiplier = exp10 - len(denom), 1
    if precision < 0 or scale < -9:
        return None
    value = int(num + denom) * multiplier
    if value > _INT64_MAX:
        return None
    return (-value if negative else value, scale)


class Quantity:
    """An exact Kubernetes quantity: `nanos` is the value in units of 10**-9.

    `Quantity("1.5Gi")` parses, `Quantity(3)` is three whole units, `Quantity.from_nanos`
    builds from the internal representation. Immutable by convention, hashable, ordered.
    """

    __slots__ = ("_amount", "_text", "format", "nanos")

    nanos: int
    format: QuantityFormat
    _text: str | None
    #: How Kubernetes holds the value (see `int64_amount`); _DERIVED: as its canonical text.
    _amount: tuple[int, int] | object | None

    def __init__(self, value: str | int | Quantity = 0) -> None:
        if isinstance(value, str):
            parsed = _cache.get(value)
            if parsed is None:
                parsed = Quantity.parse(value)
            self.nanos, self.format, self._text = parsed.nanos, parsed.format, parsed._text
            self._amount = parsed._amount
        elif isinstance(value, Quantity):
            self.nanos, self.format, self._text = value.nanos, value.format, value._text
            self._amount = value._amount
        elif isinstance(value, int) and not isinstance(value, bool):
            self.nanos, self.format, self._text = value * NANO, QuantityFormat.DECIMAL_SI, None
            self._amount = (value, 0) if _INT64_MIN <= value <= _INT64_MAX else None
        else:
            raise TypeError(f"cannot make a Quantity from {type(value).__name__}")

    @classmethod
    def from_nanos(
        cls,
        nanos: int,
        fmt: QuantityFormat = QuantityFormat.DECIMAL_SI,
        amount: tuple[int, int] | object | None = _DERIVED,
    ) -> Quantity:
        """A quantity of `nanos` units of 10**-9, printed in the notation `fmt`.

        `amount` is how Kubernetes would hold it (see `int64_amount`, None: a decimal); by
        default, as it would after a round trip through the API (its canonical text parsed).
        """
        quantity = cls.__new__(cls)
        quantity.nanos, quantity.format, quantity._text = nanos, fmt, None
        quantity._amount = amount
        return quantity

    @property
    def int64_amount(self) -> tuple[int, int] | None:
        """(value, scale) when Kubernetes holds this quantity as value * 10**scale in an
        int64, None when it holds it as an arbitrary-precision decimal.

        Kubernetes' parser takes a fast int64 path only for short decimal numbers and
        whole binary multiples of few digits ("1.5Gi" and "999Ti" are decimals, "1536Mi"
        is not), and its sums stay int64 while they fit. CEL's `isInteger()` and
        `asInteger()` answer from this representation, not from the value: "1000m" is
        1000 * 10**-3, which it does not convert.
        """
        amount = self._amount
        if amount is _DERIVED:
            amount = Quantity._parse_uncached(str(self))._amount
            self._amount = amount
        return amount  # type: ignore[return-value]

    # -- construction -------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Parse a quantity string; raise QuantityParseError with the reason."""
        cached = _cache.get(text)
        if cached is not None:
            return cached
        quantity = cls._parse_uncached(text)
        if len(_cache) < _CACHE_LIMIT:
            _cache[text] = quantity
        return quantity

    @classmethod
    def _parse_uncached(cls, text: str) -> Quantity:
        match = _QUANTITY_RE.match(text) if text else None
        if match is None:
            raise QuantityParseError(
                f"quantity {text!r} must match the regular expression "
                r"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            )
        sign, whole, fraction, binary, exponent, decimal = match.groups()
        fraction = fraction or ""
        if not whole and not fraction:
            raise QuantityParseError(f"quantity {text!r} has no digits")
        try:
            mantissa = int(whole + fraction)
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            raise QuantityParseError(f"quantity {text!r} has too many digits") from None
        scale = -len(fraction)  # value = mantissa * 10**scale * multiplier
        if binary is not None:
            fmt = QuantityFormat.BINARY_SI
            numerator, denominator = mantissa * (2 ** _BINARY_EXP[binary]), 1
            power10 = scale
        else:
            if exponent is not None:
                fmt = QuantityFormat.DECIMAL_EXPONENT
                exp10 = int(exponent[1:])
            else:
                fmt = QuantityFormat.DECIMAL_SI
                exp10 = _DECIMAL_EXP[decimal] if decimal else 0
            if abs(exp10) > _MAX_EXPONENT:
                raise QuantityParseError(f"quantity {text!r}: exponent out of range")
            numerator, denominator = mantissa, 1
            power10 = scale + exp10
        power10 += 9  # to nano-units
        if power10 >= 0:
            numerator *= 10**power10
        else:
            denominator *= 10**-power10
        nano = _ceil_div_away(numerator, denominator)
        if fmt is QuantityFormat.BINARY_SI:
            nano = min(nano, _MAX_BINARY_NANO)
            if 0 < nano < NANO:
                fmt = QuantityFormat.DECIMAL_SI  # as upstream: a fraction of one is decimal
        if sign == "-":
            nano = -nano
        return cls.from_nanos(
            nano, fmt, _parsed_amount(text, whole, fraction, binary, exponent, decimal)
        )

    @classmethod
    def coerce(cls, value: Any) -> Quantity:
        """Accept what appears in Kubernetes JSON: a string, or a bare JSON number."""
        if isinstance(value, Quantity):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        if isinstance(value, bool):
            raise QuantityParseError(f"quantity must be a string or a number, not {value!r}")
        if isinstance(value, int):
            return cls.from_nanos(value * NANO)
        if isinstance(value, float):
            return cls.parse(repr(value))
        raise QuantityParseError(
            f"quantity must be a string or a number, not {type(value).__name__}"
        )

    # -- reading ------------------------------------------------------------------------

    def value(self) -> int:
        """Whole units, rounded up (as Kubernetes' Quantity.Value())."""
        return -((-self.nanos) // NANO)

    def milli_value(self) -> int:
        """Milli-units, rounded up (as Kubernetes' Quantity.MilliValue())."""
        return -((-self.nanos) // 10**6)

    def is_integer(self) -> bool:
        """A whole number that fits int64 (CEL's quantity isInteger())."""
        return self.nanos % NANO == 0 and _INT64_MIN <= self.nanos // NANO <= _INT64_MAX

    @property
    def sign(self) -> int:
        return (self.nanos > 0) - (self.nanos < 0)

    def is_zero(self) -> bool:
        return self.nanos == 0

    def cmp(self, other: Quantity) -> int:
        """-1, 0 or 1, as Kubernetes' Quantity.Cmp."""
        return (self.nanos > other.nanos) - (self.nanos < other.nanos)

    def as_float(self) -> float:
        """The nearest float; ±inf beyond the float range (CEL's asApproximateFloat)."""
        try:
            return self.nanos / NANO
        except OverflowError:
            return math.inf if self.nanos > 0 else -math.inf

    # -- arithmetic ---------------------------------------------------------------------

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity.from_nanos(self.nanos + other.nanos, self.format)

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity.from_nanos(self.nanos - other.nanos, self.format)

    def __mul__(self, factor: int) -> Quantity:
        if not isinstance(factor, int) or isinstance(factor, bool):
            return NotImplemented
        return Quantity.from_nanos(self.nanos * factor, self.format)

    __rmul__ = __mul__

    def __neg__(self) -> Quantity:
        return Quantity.from_nanos(-self.nanos, self.format)

    def __bool__(self) -> bool:
        return self.nanos != 0

    # -- comparison ---------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.nanos == other.nanos
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.nanos)

    def __lt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos < other.nanos

    def __le__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos <= other.nanos

    def __gt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos > other.nanos

    def __ge__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos >= other.nanos

    # -- printing -----------------------------------------------------------------------

    def __str__(self) -> str:
        text = self._text
        if text is None:
            text = self._canonical()
            self._text = text
        return text

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def _canonical(self) -> str:
        """The string Kubernetes prints for this value (Quantity.String())."""
        nano = self.nanos
        if nano == 0:
            return "0"
        fmt = self.format
        if fmt is QuantityFormat.BINARY_SI and (abs(nano) < 1024 * NANO or nano % NANO != 0):
            fmt = QuantityFormat.DECIMAL_SI  # small or fractional values print in decimal
        if fmt is QuantityFormat.BINARY_SI:
            mantissa, exp2 = nano // NANO, 0
            while exp2 < 60 and mantissa % 1024 == 0:
                mantissa //= 1024
                exp2 += 10
            return f"{mantissa}{_BINARY_SUFFIX[exp2]}"
        # Exponents come in multiples of three; SI suffixes end at E (10**18).
        exp_limit = 10**9 if fmt is QuantityFormat.DECIMAL_EXPONENT else 18
        mantissa, exp10 = nano, -9
        while exp10 < exp_limit and mantissa % 1000 == 0:
            mantissa //= 1000
            exp10 += 3
        if fmt is QuantityFormat.DECIMAL_EXPONENT:
            return f"{mantissa}e{exp10}" if exp10 else str(mantissa)
        return f"{mantissa}{_DECIMAL_SUFFIX[exp10]}"

    # -- pydantic integration -----------------------------------------------------------

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            _validate_quantity,
            serialization=core_schema.plain_serializer_function_ser_schema(str, when_used="always"),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # Same shape as Kubernetes' own Quantity schema (int-or-string with a pattern).
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "pattern": QUANTITY_PATTERN,
        }


QUANTITY_PATTERN: Final = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"


def _validate_quantity(value: Any) -> Quantity:
    if type(value) is str:
        cached = _cache.get(value)
        if cached is not None:
            return cached
    try:
        return Quantity.coerce(value)
    except QuantityParseError as exc:
        raise ValueError(str(exc)) from None
