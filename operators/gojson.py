"""JSON written byte for byte as Go's ``encoding/json`` writes it: the request bodies the
operator sends to the API server.

Why bytes matter: the API server keeps an opaque value (a ResourceClaim's config
``parameters``, a RawExtension) as the bytes its creator sent, and on every later update
compares those bytes with the bytes of the update. Whoever updates the object writes the
value back the way its own encoder writes it: kube-controller-manager, kube-scheduler and
kubectl as Go does, dralloc as this module does. Where the two differ, the update is refused
("spec: Invalid value: null: field is immutable"): a claim dralloc made with ``é`` in its
parameters (Python's ``json`` writes ``\\u00e9``) could not be updated by a Go client
(``kubectl replace`` was refused), nor could dralloc update a claim a Go client made. So
dralloc writes what Go writes:

- compact, keys in the order given (the order they were read in);
- strings as UTF-8, with ``<``, ``>``, ``&``, U+2028 and U+2029 escaped as ``\\u003c``, ...,
  and control characters as ``\\n``, ``\\t``, ``\\r``, ``\\b``, ``\\f`` or ``\\u00XX``;
- floats in the shortest form that reads back the same, in fixed notation from 1e-6 up to
  1e21 and without a trailing ``.0`` (``1``, ``0.000001``, ``100000000000000000000``), in
  exponent form outside (``1e-7``, ``1e+21``).

orjson writes all of this but the escapes and the floats; with the checks for those, a
realistic pod's body takes 13.5 us against 75 with ``json``. The escapes are replaced in its
output, which is exact because these characters can only occur inside strings. Floats,
integers beyond 64 bits and strings holding a lone surrogate (which orjson refuses) are
pre-rendered as Go writes them and passed through as fragments (a lone surrogate stays the
escape it was read as: it has no UTF-8); a key none can stand for, or nesting deeper than
orjson's 254 levels, leaves the document to ``json``. The reference for every rule is Go itself:
``tests/unit/runtime/go_encoding.json`` was written by ``encoding/json``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

import orjson
import re2

_ESCAPES: Final = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)

# A number with a fraction or an exponent at the start, right after a key's '":', or after
# "," or "[": a float as orjson writes it (compact: nothing between). Not after a ":" alone:
# inside strings that is every image tag ("pause:3.10"), and every pod written back went the
# exact (slower) path. Nor after an escaped quote's '\":' (an odd number of backslashes
# before the quote): inside strings that is JSON held in a string, such as the
# allocated-by annotation ('{"at":1765432100.5,...}') on every pod dralloc allocates. What
# still matches inside a string only costs that path.
_FLOAT: Final = rb'(?:^|(?:^|[^\\])(?:\\\\)*":|[,\[])-?[0-9]+[.eE]'
_FLOAT_TOKEN: Final = re2.compile(_FLOAT)
# Anything orjson writes otherwise than Go, in one pass (RE2: 8 us on a 4.6 KiB pod, where
# five ``in`` tests took 9 and Python's ``re`` 175).
# (RE2 reads its pattern as UTF-8: the two line separators are written as themselves.)
_SUSPECT: Final = re2.compile(_FLOAT + "|[<>&\u2028\u2029]".encode())

_SURROGATE: Final = re.compile("[\ud800-\udfff]")
# Types orjson would write and ``json`` refuses (a caller's mistake must not reach the server).
_OPTIONS: Final = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS

_INT64_MIN: Final = -(2**63)
_UINT64_MAX: Final = 2**64 - 1


def dumps(value: Any) -> bytes:
    """``value`` (JSON-shaped: dicts with string keys, lists, strings, numbers, booleans,
    None) as Go's ``json.Marshal`` writes it."""
    try:
        text = orjson.dumps(value, option=_OPTIONS)
    except (orjson.JSONEncodeError, TypeError):
        text = _exactly(value)
    else:
        if _SUSPECT.search(text) is None:
            return text
        if _FLOAT_TOKEN.search(text) is not None:
            text = _exactly(value)
    for raw, escaped in _ESCAPES:
        if raw in text:
            text = text.replace(raw, escaped)
    return text


def _exactly(value: Any) -> bytes:
    """The slower path: what orjson would write otherwise pre-rendered. A document orjson
    cannot take even so (a key that is no UTF-8 or no string, which no fragment can stand
    for; nesting deeper than its 254 levels) is left to ``json``, with only its floats
    written otherwise than Go writes them."""
    try:
        return orjson.dumps(_as_go_writes_it(value), option=_OPTIONS)
    except (orjson.JSONEncodeError, TypeError, RecursionError):
        return _escaped_surrogates(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _escaped_surrogates(text: str) -> bytes:
    """``json``'s text as UTF-8, each lone surrogate (which has none) as its escape."""
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text).encode()


def go_float(number: float) -> str:
    """A float as Go's encoding/json writes a float64 (see the module's docstring). NaN and
    the infinities, which JSON has no word for (the API server never sends one), are written
    as orjson writes them: null."""
    if not math.isfinite(number):
        return "null"
    if number == 0:
        return "-0" if math.copysign(1.0, number) < 0 else "0"
    # repr is the shortest text that reads back the same, as Go's strconv 'f'/'e' with -1.
    shortest = Decimal(repr(number))
    magnitude = abs(number)
    if 1e-6 <= magnitude < 1e21:
        fixed = format(shortest, "f")
        return fixed.rstrip("0").rstrip(".") if "." in fixed else fixed
    sign, digits, exponent = shortest.as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(map(str, digits)).rstrip("0") or "0"
    power = exponent + len(digits) - 1
    head = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
    # Go writes at least two exponent digits, then drops the zero of e-0X (not of e+0X,
    # which cannot occur here: below 1e21 is fixed notation).
    written = f"{'-' if sign else ''}{head}e{'-' if power < 0 else '+'}{abs(power):02d}"
    return written.replace("e-0", "e-") if -10 < power < 0 else written


def _as_go_writes_it(value: Any) -> Any:
    """``value`` with what orjson would write otherwise pre-rendered as fragments."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:  # a lone surrogate (from an escape in a JSON text)
            return orjson.Fragment(_escaped_surrogates(json.dumps(value, ensure_ascii=False)))
        return value
    if isinstance(value, float):
        return orjson.Fragment(go_float(value))
    if isinstance(value, int):
        if _INT64_MIN <= value <= _UINT64_MAX:
            return value
        return orjson.Fragment(str(value))
    if isinstance(value, Mapping):
        return {key: _as_go_writes_it(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_go_writes_it(item) for item in value]
    return value
