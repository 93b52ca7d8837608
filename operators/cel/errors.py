"""Error types raised by the CEL package.

Every failure the package reports is a ``CELError`` so callers can catch one
class; the subclasses say at which stage it happened, because the allocator
treats them differently (a compile error rejects the selector, a runtime error
aborts the allocation attempt).
"""

from __future__ import annotations

#: Upstream's message when the runtime cost budget is exhausted.
COST_LIMIT_MESSAGE = "operation cancelled: actual cost limit exceeded"

#: Hint that upstream's allocator appends to "no such key" runtime errors.
NO_SUCH_KEY_HINT = (
    "consider using CEL optional chaining (.? followed by orValue()) "
    "or guarding the check with has() for optional fields"
)


class CELError(Exception):
    """Base class of every error raised by ``operators.cel``."""


class CELCompileError(CELError):
    """The expression does not parse, does not type-check or is too expensive."""


class CELEvalError(CELError):
    """Evaluation failed (missing key, overflow, no matching overload, ...)."""


class CELCostError(CELError):
    """The runtime cost budget of one evaluation was exhausted.

    Not a ``CELEvalError`` on purpose: ``&&`` and ``||`` absorb evaluation
    errors, but an exhausted budget must abort the whole evaluation.
    """

    def __init__(self, message: str = COST_LIMIT_MESSAGE) -> None:
        super().__init__(message)
