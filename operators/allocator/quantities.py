"""Quantities as the search sees them: plain ``int`` nano-units.

Parsing is ``operators.api.Quantity``'s (one grammar, upstream's rounding to 1n and its
caps); this module only fixes the unit the search computes in. Capacities, counters and
capacity requests are converted once, when an object is compiled, to ``Quantity.nanos``.
That is a deliberate fast path, not a second quantity type: backtracking adds, subtracts
and compares these amounts millions of times, and on ints that costs about a tenth of
what ``Quantity`` objects cost (operator dispatch and a new object per sum). Nano-units
keep every valid quantity exact, so range steps and valid values need no ``Fraction``.
Results print through ``Quantity.from_nanos`` again.
"""

from __future__ import annotations

from typing import Any

from operators.api.quantity import Quantity

Nanos = int  # an amount in units of 10**-9, exactly as Quantity.nanos


def to_nanos(value: Any) -> Nanos:
    """Nano-units of a quantity given as str, int, float or Quantity (QuantityParseError)."""
    return Quantity.coerce(value).nanos
