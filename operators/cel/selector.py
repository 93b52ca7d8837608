"""Device selectors: compile once (cached), evaluate per device.

``compile_selector`` checks what upstream checks when a selector is
compiled: syntax, undeclared names and functions, that the result can be a
bool, and (unless disabled) that the worst-case estimated cost is within
the 1,000,000 limit. Like upstream it has two environments: a new
expression (admission) sees only what the feature gates enable, a stored
one (the allocator, the toolkit) sees every field and function, so that a
selector stored while a gate was on keeps working after it is turned off. ``CompiledSelector.evaluate`` runs the generated Python
against a ``DeviceView`` with a runtime cost budget and turns results and
errors into upstream's messages.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from . import types as celtypes
from .codegen import Environment
from .device import DeviceView
from .errors import (
    NO_SUCH_KEY_HINT,
    CELCompileError,
    CELError,
    CELEvalError,
)
from .program import (
    DEFAULT_COST_LIMIT,
    RUNTIME_FAILURES,
    Program,
    as_eval_error,
    compile_program,
)
from .values import type_name

#: Upstream's CELSelectorExpressionMaxLength.
MAX_EXPRESSION_LENGTH = 10 * 1024
#: Upstream's CELSelectorExpressionMaxCost (estimated and runtime limit).
MAX_COST = 1_000_000
_CACHE_SIZE = 1024


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A compiled device selector. Thread-safe and reusable."""

    expression: str
    #: Worst-case cost over all possible devices (upstream's ``MaxCost``).
    estimated_cost: int
    program: Program

    def evaluate(self, device: DeviceView, cost_limit: int = MAX_COST) -> bool:
        """True if ``device`` matches; CELEvalError / CELCostError on failure."""
        result = run_on_device(self.program, device, cost_limit)
        if result is True or result is False:
            return result
        raise CELEvalError(f"CEL result of type {type_name(result)} could not be converted to bool")

    def evaluate_with_cost(
        self, device: DeviceView, cost_limit: int = MAX_COST
    ) -> tuple[bool | CELError, int]:
        """``(result or the error it raised, actual cost)``: upstream's EvalDetails.ActualCost."""
        assert self.program.costed is not None
        try:
            result, cost = self.program.costed(device, cost_limit)
        except CELError as exc:
            return exc, int(getattr(exc, "actual_cost", 0))
        if result is True or result is False:
            return result, cost
        message = f"CEL result of type {type_name(result)} could not be converted to bool"
        return CELEvalError(message), cost


_cache: OrderedDict[tuple[str, bool, bool, bool, bool], CompiledSelector] = OrderedDict()
_cache_lock = threading.Lock()


def compile_selector(
    expression: str,
    *,
    list_attributes: bool = False,
    consumable_capacity: bool = True,
    stored: bool = False,
    check_cost: bool | None = None,
) -> CompiledSelector:
    """Compile a device selector; cached by expression and options.

    ``list_attributes`` is the DRAListTypeAttributes gate (list values; and for
    a new expression ``includes``). ``consumable_capacity`` is the
    DRAConsumableCapacity gate (for a new expression,
    ``device.allowMultipleAllocations``). ``stored`` compiles an expression of
    an object already stored: every field and function is declared whatever
    the gates. ``check_cost`` rejects expressions whose estimated cost exceeds
    the limit; by default new expressions are checked and stored ones are not
    (upstream checks when a selector is created or changed; stored selectors
    are only bound by the runtime limit). Raises CELCompileError; failures are
    not cached.
    """
    if check_cost is None:
        check_cost = not stored
    key = (expression, list_attributes, consumable_capacity, stored, check_cost)
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None:
            _cache.move_to_end(key)
            return cached
    selector = _compile(expression, list_attributes, consumable_capacity, stored, check_cost)
    with _cache_lock:
        _cache[key] = selector
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return selector


def cache_size() -> int:
    return len(_cache)


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def _compile(
    expression: str,
    list_attributes: bool,
    consumable_capacity: bool,
    stored: bool,
    check_cost: bool,
) -> CompiledSelector:
    program = compile_device_program(expression, list_attributes, consumable_capacity, stored)
    assert program.checked is not None and program.estimated_cost is not None
    result = program.checked.result
    # Upstream accepts a bool or exactly the attribute type (google.protobuf.Any
    # before DRAListTypeAttributes, dyn with it).
    attribute = celtypes.DYN if list_attributes or stored else celtypes.ANY
    if result not in (celtypes.BOOL, attribute):
        shown = "any" if result.kind == "any" else str(result)
        raise CELCompileError(f"must evaluate to bool or the unknown type, not {shown}")
    cost = program.estimated_cost
    if check_cost and cost > MAX_COST:
        raise CELCompileError(
            f"too complex, exceeds cost limit (estimated cost {cost}, limit {MAX_COST})"
        )
    return CompiledSelector(expression, cost, program)


_LOCATED = re.compile(r"ERROR: <input>:(\d+):(\d+): ")


def run_on_device(program: Program, device: DeviceView, cost_limit: int) -> Any:
    """A compiled expression's value on ``device``, with the errors upstream's evaluation
    gives: a device's unusable attribute, a missing key (with the hint), a Python failure
    as "no such overload"; CELCostError when the budget runs out."""
    if device.invalid_attribute is not None:
        raise CELEvalError(device.invalid_attribute)
    try:
        return program.function(device, cost_limit)
    except CELEvalError as exc:
        message = str(exc)
        if "no such key:" in message:
            raise CELEvalError(f"{message}. {NO_SUCH_KEY_HINT}") from None
        raise
    except RUNTIME_FAILURES as exc:
        raise as_eval_error(exc) from None


def compile_device_program(
    expression: str, list_attributes: bool, consumable_capacity: bool, stored: bool
) -> Program:
    """An expression over ``device`` (a selector's, a derived attribute's) compiled and
    type-checked, with upstream's compile messages; raises CELCompileError."""
    size = len(expression.encode())  # upstream counts bytes
    if size > MAX_EXPRESSION_LENGTH:
        raise CELCompileError(f"expression too long: {size} bytes, at most {MAX_EXPRESSION_LENGTH}")
    env = Environment(
        variables=frozenset({"device"}),
        checked=True,
        device_var="device",
        # Stored expressions see the newest declarations whatever the gates. A device's
        # list values are visible either way: upstream's DeviceMatches passes them on
        # whatever the gate (a slice may keep them from a time it was on).
        list_attributes=list_attributes or stored,
        consumable_capacity=consumable_capacity or stored,
        kubernetes=True,
    )
    try:
        return compile_program(expression, env)
    except CELCompileError as exc:
        message = _with_snippet(str(exc), expression)
        if not message.startswith(("compilation failed", "program instantiation failed")):
            message = "compilation failed: " + message
        raise CELCompileError(message) from None


def _with_snippet(message: str, expression: str) -> str:
    """The message with the source line and a caret under the column, as cel-go prints
    every located error (the parser adds them to syntax errors itself)."""
    found = _LOCATED.search(message)
    if found is None or "\n | " in message:
        return message
    line, column = int(found.group(1)), int(found.group(2))
    lines = expression.splitlines() or [""]
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return f"{message}\n | {text}\n | {'.' * (column - 1)}^"


__all__ = ["DEFAULT_COST_LIMIT", "CompiledSelector", "compile_selector"]
