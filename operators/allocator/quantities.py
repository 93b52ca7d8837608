"""Kubernetes quantities as exact Python numbers.

Capacities, counters and capacity requests are compared and summed during
the search, so they are converted once, when an object is compiled, into
``int`` (the common case) or ``Fraction`` (milli-units and friends).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

Number = int | Fraction

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_PATTERN = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def _normal(value: Fraction) -> Number:
    return value.numerator if value.denominator == 1 else value


def parse_quantity(value: Any) -> Number:
    """Exact value of a quantity given as str, int, float or a Quantity object."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, Fraction):
        return _normal(value)
    if isinstance(value, float):
        return _normal(Fraction(str(value)))
    text = str(value).strip()
    match = _PATTERN.match(text)
    if match is None:
        raise QuantityError(f"quantities must match the regular expression of Kubernetes: {text!r}")
    number = Fraction(match["num"])
    if match["bin"]:
        number *= 1024 ** _BINARY[match["bin"]]
    elif match["exp"]:
        number *= Fraction(10) ** int(match["exp"][1:])
    else:
        number *= Fraction(10) ** _DECIMAL[match["dec"] or ""]
    if match["sign"] == "-":
        number = -number
    return _normal(number)


def format_quantity(value: Number, binary: bool = False) -> str:
    """Canonical short text for a number, preferring binary suffixes if asked."""
    if isinstance(value, Fraction) and value.denominator == 1:
        value = value.numerator
    if isinstance(value, int):
        if value == 0:
            return "0"
        if binary:
            for suffix, power in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
                unit = 1024**power
                if value % unit == 0:
                    return f"{value // unit}{suffix}"
        for suffix in ("E", "P", "T", "G", "M", "k"):
            unit = 10 ** _DECIMAL[suffix]
            if value % unit == 0:
                return f"{value // unit}{suffix}"
        return str(value)
    for suffix in ("m", "u", "n"):
        scaled = value * 10 ** (-_DECIMAL[suffix])
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    # Not representable with a suffix: round up to nano, as Kubernetes does.
    nanos = -((-value.numerator * 10**9) // value.denominator)
    return f"{nanos}n"


def looks_binary(text: Any) -> bool:
    """Whether a quantity was written with a binary suffix (kept in outputs)."""
    return isinstance(text, str) and text.rstrip()[-2:] in _BINARY
