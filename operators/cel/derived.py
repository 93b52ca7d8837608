"""Derived attributes (DRADerivedAttributes): CEL that gives a device a value, not a verdict.

A request's derived attribute is a CEL expression over the same ``device`` variable as a
selector, evaluated per candidate device; claim constraints then compare its value as they
compare a published attribute. It lives apart from ``selector`` because what it may return
and how the result is read differ: a selector must give a bool, a derived attribute gives a
string, int, bool or semver (or a list of one of them), which constraints can compare for
equality or overlap. Everything else is the selectors': the environment (stored or new
expression), the length limit, the estimated cost of a new expression and the runtime cost
limit of every evaluation.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from operators.api.semver import Semver

from . import types as celtypes
from .device import DeviceView
from .errors import CELCompileError, CELEvalError
from .program import Program
from .selector import MAX_COST, compile_device_program, run_on_device
from .values import UInt, type_name

#: The plain Python types a derived value (or each element of a list value) may have.
DerivedScalar = bool | int | str | Semver
DerivedValue = DerivedScalar | tuple[DerivedScalar, ...]

# Result types the checker may report for an acceptable expression: a scalar constraints
# can compare, or dyn/any (an attribute value, known only at runtime, checked then).
_SCALAR_RESULTS = (celtypes.BOOL, celtypes.INT, celtypes.STRING, celtypes.SEMVER)


@dataclass(frozen=True, slots=True)
class CompiledDerived:
    """A compiled derived-attribute expression. Thread-safe and reusable."""

    expression: str
    #: Worst-case cost over all possible devices (what admission adds up per claim).
    estimated_cost: int
    program: Program

    def evaluate(self, device: DeviceView, cost_limit: int = MAX_COST) -> DerivedValue:
        """The device's value: a scalar, or a tuple of scalars of one type (empty for an
        empty list). Raises CELEvalError for an evaluation error or a value constraints
        cannot compare, CELCostError when the runtime budget runs out."""
        return _plain(run_on_device(self.program, device, cost_limit))


def _scalar(value: Any) -> bool:
    # A uint is an int subclass here, but it is no attribute type: refused like a double.
    return isinstance(value, (bool, str, Semver)) or (
        isinstance(value, int) and not isinstance(value, UInt)
    )


def _plain(result: Any) -> DerivedValue:
    if _scalar(result):
        return result  # type: ignore[no-any-return]
    if isinstance(result, (list, tuple)):
        items = tuple(result)
        if not items:
            return ()
        first = type(items[0])
        if not _scalar(items[0]):
            raise CELEvalError(f"unsupported list element type: {type_name(items[0])}")
        for i, item in enumerate(items):
            # bool is an int subclass: the exact type keeps [1, true] from passing as ints.
            if type(item) is not first:
                raise CELEvalError(
                    f"list element at index {i} is {type_name(item)}, not {type_name(items[0])}"
                )
        return items
    raise CELEvalError(f"unsupported CEL return type: {type_name(result)}")


def compile_derived(
    expression: str,
    *,
    list_attributes: bool = False,
    consumable_capacity: bool = True,
    stored: bool = False,
) -> CompiledDerived:
    """Compile a derived-attribute expression (cached; failures are not).

    ``stored``, ``list_attributes`` and ``consumable_capacity`` mean what they mean for
    ``compile_selector``; a stored expression may also return a list whatever the
    DRAListTypeAttributes gate (an object stored while it was on keeps working). The
    estimated cost is reported, not checked: admission (``admission.py``) checks it and adds
    it up per claim.
    """
    return _compile(expression, list_attributes, consumable_capacity, stored)


@functools.lru_cache(maxsize=1024)
def _compile(
    expression: str, list_attributes: bool, consumable_capacity: bool, stored: bool
) -> CompiledDerived:
    program = compile_device_program(expression, list_attributes, consumable_capacity, stored)
    assert program.checked is not None and program.estimated_cost is not None
    result = program.checked.result
    lists = list_attributes or stored
    if not _allowed(result, lists):
        expected = "a primitive scalar (string, integer, boolean, semver)"
        if lists:
            expected += " or a list of these scalars"
        shown = "any" if result.kind == "any" else str(result)
        raise CELCompileError(f"must evaluate to {expected}, not {shown}")
    return CompiledDerived(expression, program.estimated_cost, program)


def _allowed(result: celtypes.Type, lists: bool) -> bool:
    if result.is_dyn or result in _SCALAR_RESULTS:
        return True
    if lists and result.kind == "list" and len(result.params) == 1:
        element = result.params[0]
        return element.is_dyn or element in _SCALAR_RESULTS
    return False


def clear_cache() -> None:
    _compile.cache_clear()


__all__ = ["CompiledDerived", "DerivedScalar", "DerivedValue", "clear_cache", "compile_derived"]
