"""Kubernetes resource quantities ("80Gi", "100m", "1e3", "1.5") with exact arithmetic.

A quantity is stored as an integer number of nano-units. Kubernetes itself
never keeps more precision than 1n (finer values are rounded up, away from
zero), so integer nanos are exact for every valid quantity, hash and compare
as fast as ints, and need no ``Fraction`` arithmetic. The allocator uses this
type for capacities and counters too, so it lives here, below ``allocator``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

_NANO = 10**9

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
# Decimal suffixes as a power of ten.
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

_QUANTITY_RE = re.compile(
    r"""^(?P<sign>[+-]?)
        (?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?
        (?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)
          |[eE](?P<exp>[+-]?[0-9]+)
          |(?P<dec>[numkMGTPE]?))$""",
    re.VERBOSE,
)

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def _ceil_div_away(numerator: int, denominator: int) -> int:
    """Integer division rounding away from zero (Kubernetes rounds sub-nano precision up)."""
    q, r = divmod(abs(numerator), denominator)
    if r:
        q += 1
    return -q if numerator < 0 else q


@lru_cache(maxsize=4096)
def _parse(text: str) -> tuple[int, str]:
    m = _QUANTITY_RE.match(text)
    if m is None or not (m.group("int") or m.group("frac")):
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    digits = (m.group("int") or "") + (m.group("frac") or "")
    frac_len = len(m.group("frac") or "")
    mantissa = int(digits) if digits else 0
    if m.group("sign") == "-":
        mantissa = -mantissa
    if m.group("bin"):
        scaled = mantissa * _BINARY[m.group("bin")] * _NANO
        return _ceil_div_away(scaled, 10**frac_len), "binary"
    if m.group("exp") is not None:
        exponent = int(m.group("exp"))
        form = "exponent"
    else:
        exponent = _DECIMAL[m.group("dec") or ""]
        form = "decimal"
    power = exponent + 9 - frac_len
    if abs(power) > 400:
        raise ValueError(f"quantity exponent out of range: {text!r}")
    if power >= 0:
        return mantissa * 10**power, form
    return _ceil_div_away(mantissa, 10**-power), form


class Quantity:
    """An exact Kubernetes quantity. Immutable, hashable, totally ordered."""

    __slots__ = ("_form", "_text", "nanos")

    nanos: int
    _text: str | None
    _form: str

    def __init__(self, value: str | int | Quantity = 0) -> None:
        if isinstance(value, str):
            self.nanos, self._form = _parse(value.strip())
            self._text = value.strip()
        elif isinstance(value, Quantity):
            self.nanos, self._form, self._text = value.nanos, value._form, value._text
        elif isinstance(value, int) and not isinstance(value, bool):
            self.nanos, self._form, self._text = value * _NANO, "decimal", None
        else:
            raise TypeError(f"cannot make a Quantity from {type(value).__name__}")

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Parse a Kubernetes quantity string; ValueError if it is not one."""
        return cls(text)

    @classmethod
    def from_nanos(cls, nanos: int, form: str = "decimal") -> Quantity:
        q = cls.__new__(cls)
        q.nanos, q._form, q._text = nanos, form, None
        return q

    # --- numeric views -------------------------------------------------
    def value(self) -> int:
        """Whole units, rounded up (like Kubernetes ``Quantity.Value()``)."""
        return -((-self.nanos) // _NANO)

    def milli_value(self) -> int:
        """Milli-units, rounded up (like ``Quantity.MilliValue()``)."""
        return -((-self.nanos) // 10**6)

    def is_integer(self) -> bool:
        return self.nanos % _NANO == 0 and _INT64_MIN <= self.nanos // _NANO <= _INT64_MAX

    def as_float(self) -> float:
        return self.nanos / _NANO

    @property
    def sign(self) -> int:
        return (self.nanos > 0) - (self.nanos < 0)

    def is_zero(self) -> bool:
        return self.nanos == 0

    # --- arithmetic and ordering ----------------------------------------
    def __add__(self, other: Any) -> Quantity:
        if isinstance(other, Quantity):
            return Quantity.from_nanos(self.nanos + other.nanos, self._form)
        return NotImplemented

    def __sub__(self, other: Any) -> Quantity:
        if isinstance(other, Quantity):
            return Quantity.from_nanos(self.nanos - other.nanos, self._form)
        return NotImplemented

    def __neg__(self) -> Quantity:
        return Quantity.from_nanos(-self.nanos, self._form)

    def __mul__(self, factor: int) -> Quantity:
        if isinstance(factor, int) and not isinstance(factor, bool):
            return Quantity.from_nanos(self.nanos * factor, self._form)
        return NotImplemented

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.nanos == other.nanos

    def __ne__(self, other: object) -> bool:
        return not (isinstance(other, Quantity) and self.nanos == other.nanos)

    def __lt__(self, other: Quantity) -> bool:
        return self.nanos < other.nanos

    def __le__(self, other: Quantity) -> bool:
        return self.nanos <= other.nanos

    def __gt__(self, other: Quantity) -> bool:
        return self.nanos > other.nanos

    def __ge__(self, other: Quantity) -> bool:
        return self.nanos >= other.nanos

    def __hash__(self) -> int:
        return hash(self.nanos)

    def __bool__(self) -> bool:
        return self.nanos != 0

    def cmp(self, other: Quantity) -> int:
        return (self.nanos > other.nanos) - (self.nanos < other.nanos)

    # --- text ----------------------------------------------------------
    def canonical(self) -> str:
        """A canonical string: the largest suffix that keeps the value exact."""
        n = self.nanos
        if n == 0:
            return "0"
        if self._form == "binary" and n % _NANO == 0:
            units = n // _NANO
            for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
                base = _BINARY[suffix]
                if units % base == 0:
                    return f"{units // base}{suffix}"
            return str(units)
        for suffix, exponent in sorted(_DECIMAL.items(), key=lambda kv: -kv[1]):
            step = 10 ** (exponent + 9)
            if n % step == 0:
                return f"{n // step}{suffix}"
        raise AssertionError("unreachable: nanos are always a multiple of 1n")

    def __str__(self) -> str:
        return self._text if self._text is not None else self.canonical()

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"
