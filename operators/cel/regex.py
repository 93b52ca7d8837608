"""Regular expressions for ``matches``, ``find`` and ``findAll``: RE2, so linear time.

CEL specifies RE2 syntax and cel-go runs Go's ``regexp`` (an RE2 engine), whose
run time is linear in the input. Python's ``re`` backtracks: ``(a+)+$`` against
forty ``a`` and a ``!`` runs for minutes, which in the operator would stall every
allocation. So patterns are compiled by Google's RE2 (the ``google-re2``
package) and Perl-only syntax (backreferences, look-around) is a syntax error,
as in Go.

The package's public ``re2`` wrapper maps every match back to character offsets,
which costs about ten times the search itself; this module calls the binding's
``RE2.Match`` directly on UTF-8 bytes and decodes only the matched text. The
iteration in ``find_all`` follows Go's ``FindAllString``: an empty match right
after the previous match is skipped, and the search moves on by one character.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

import re2
from re2 import _re2

_UNANCHORED: Final = _re2.RE2.Anchor.UNANCHORED
#: Memory one compiled pattern may use (RE2 falls back to slower, still linear,
#: matching when its DFA cache is full). Kept below RE2's 8 MiB default because
#: up to ``CACHE_SIZE`` patterns are kept.
MAX_MEMORY: Final = 2 << 20
CACHE_SIZE: Final = 256

#: RE2's error texts, reworded as Go's ``regexp/syntax`` reports them.
_GO_REASONS: Final = {
    "invalid escape sequence": "invalid escape sequence",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "unexpected )": "unexpected )",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid repetition size": "invalid repeat count",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "missing argument for repetition operator": "missing argument to repetition operator",
    "invalid character class range": "invalid character class range",
    "invalid character class": "invalid character class",
    "invalid UTF-8": "invalid UTF-8",
    "invalid named capture group": "invalid named capture",
    "pattern too large - compile failed": "expression too large",
    "pattern too large - reverse compile failed": "expression too large",
}


class RegexSyntaxError(ValueError):
    """The pattern is not valid RE2 syntax; the message reads like Go's."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every bad pattern to stderr
    options.max_mem = MAX_MEMORY
    return options


_OPTIONS: Final = _options()


def _go_message(pattern: str, error: str) -> str:
    reason, _, argument = error.partition(": ")
    go_reason = _GO_REASONS.get(reason, reason)
    fragment = argument or pattern
    return f"error parsing regexp: {go_reason}: `{fragment}`"


def _reject_byte_escape(pattern: str) -> None:
    """RE2's ``\\C`` matches one byte; Go has no such escape, and it would split characters."""
    escaped = False
    for ch in pattern:
        if escaped:
            if ch == "C":
                raise RegexSyntaxError("error parsing regexp: invalid escape sequence: `\\C`")
            escaped = False
        elif ch == "\\":
            escaped = True


@dataclass(frozen=True, slots=True, eq=False)
class Regex:
    """One compiled pattern. Thread-safe: RE2 objects may be shared."""

    pattern: str
    engine: Any

    def search(self, text: str) -> bool:
        data = text.encode("utf-8")
        return bool(self.engine.Match(_UNANCHORED, data, 0, len(data))[0][0] >= 0)

    def find(self, text: str) -> str:
        """The leftmost match, or "" when there is none."""
        data = text.encode("utf-8")
        start, end = self.engine.Match(_UNANCHORED, data, 0, len(data))[0]
        return data[start:end].decode("utf-8") if start >= 0 else ""

    def find_all(self, text: str, limit: int = -1) -> list[str]:
        """Successive non-overlapping matches, at most ``limit`` (all when negative)."""
        data = text.encode("utf-8")
        return [data[start:end].decode("utf-8") for start, end in self._spans(data, limit)]

    def _spans(self, data: bytes, limit: int) -> Iterator[tuple[int, int]]:
        end = len(data)
        wanted = end + 1 if limit < 0 else limit
        found, pos, previous_end = 0, 0, -1
        while found < wanted and pos <= end:
            start, stop = self.engine.Match(_UNANCHORED, data, pos, end)[0]
            if start < 0:
                return
            accept = True
            if stop == pos:
                # An empty match: skip it if it touches the previous match, and
                # move on by one character so the search makes progress.
                accept = start != previous_end
                pos = pos + _utf8_width(data[pos]) if pos < end else end + 1
            else:
                pos = stop
            previous_end = stop
            if accept:
                found += 1
                yield start, stop


def _utf8_width(lead: int) -> int:
    if lead < 0x80:
        return 1
    if lead < 0xE0:
        return 2
    if lead < 0xF0:
        return 3
    return 4


@lru_cache(maxsize=CACHE_SIZE)
def compile_regex(pattern: str) -> Regex:
    """Compile (cached); raises RegexSyntaxError for anything RE2 or Go would refuse."""
    _reject_byte_escape(pattern)
    try:
        engine = _re2.RE2(pattern.encode("utf-8"), _OPTIONS)
    except UnicodeEncodeError:
        raise RegexSyntaxError("error parsing regexp: invalid UTF-8") from None
    if not engine.ok():
        error = engine.error()
        text = error.decode("utf-8", "replace") if isinstance(error, bytes) else str(error)
        raise RegexSyntaxError(_go_message(pattern, text))
    return Regex(pattern, engine)


__all__ = ["Regex", "RegexSyntaxError", "compile_regex"]
