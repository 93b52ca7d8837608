"""Compile CEL text into a callable program, and the generic ``evaluate`` entry point.

Compilation is parse, then translation to Python source, then ``compile()``;
the result is cached by (expression, environment) in a small LRU so repeated
selectors are compiled once. Failed compiles are not cached: the error is
raised again on every call, as upstream does.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import (
    ast,
    checker,
    estimate,
    netlib,  # noqa: F401  (importing it registers the IP/CIDR functions)
)
from . import types as celtypes
from .codegen import Environment, generate
from .errors import CELCompileError, CELEvalError
from .parser import parse
from .semantics import to_cel, to_python

#: Upstream's per-evaluation runtime cost limit for device selectors.
DEFAULT_COST_LIMIT = 1_000_000


@dataclass(frozen=True)
class Program:
    """A compiled expression: call ``run(vars)`` with the variables (or the device)."""

    expression: str
    tree: ast.Node
    source: str
    function: Callable[[Any, int], Any]
    flat_cost: int
    #: The checker's types, for an environment with declarations (device selectors).
    checked: checker.Checked | None = None
    #: Upstream's worst-case cost estimate (checked programs only).
    estimated_cost: int | None = None
    #: ``function`` that returns ``(result, actual cost)`` and sets ``actual_cost`` on errors.
    costed: Callable[[Any, int], tuple[Any, int]] | None = None

    def run(self, variables: Any, cost_limit: int = DEFAULT_COST_LIMIT) -> Any:
        try:
            return self.function(variables, cost_limit)
        except RUNTIME_FAILURES as exc:
            raise as_eval_error(exc) from None


#: Python errors a compiled program can raise besides CELError: too deep a value, or a
#: library function meeting a value it does not expect. Callers report them as CEL
#: errors rather than crash.
RUNTIME_FAILURES = (RecursionError, ArithmeticError, ValueError, TypeError, KeyError, IndexError)


def as_eval_error(exc: BaseException) -> CELEvalError:
    """The CELEvalError that stands for one of RUNTIME_FAILURES."""
    if isinstance(exc, RecursionError):
        return CELEvalError("expression too deeply nested")
    return CELEvalError(f"no such overload: {exc}")


def declarations(env: Environment) -> checker.Declarations | None:
    """What the checker declares for ``env``: the ``device`` variable of a selector."""
    if env.device_var is None or not env.checked:
        return None
    fields = checker.device_fields(env.list_attributes, env.consumable_capacity)
    return checker.Declarations(
        variables={env.device_var: celtypes.DEVICE},
        structs={celtypes.DEVICE.name: fields},
        includes=env.list_attributes,
    )


def compile_program(expression: str, env: Environment) -> Program:
    try:
        tree = parse(expression)
        declared = declarations(env)
        checked = checker.check(tree, declared) if declared is not None else None
        estimated = estimate.estimate(tree, checked) if checked is not None else None
        own = estimated.own if estimated is not None else None
        code = generate(tree, env, expression, checked, own)
        namespace = dict(code.namespace)
        exec(compile(code.source, "<cel>", "exec"), namespace)
    except RecursionError:
        raise CELCompileError("compilation failed: expression nests too deeply") from None
    except (SyntaxError, MemoryError) as exc:
        # Python allows 20 nested loops/try blocks per function (parts deeper than that
        # go into local functions: codegen._DEEPEST) and 100 levels of indentation: about
        # forty nested comprehensions is the limit.
        raise CELCompileError(f"compilation failed: expression nests too deeply ({exc})") from None
    return Program(
        expression=expression,
        tree=tree,
        source=code.source,
        function=namespace["_cel_program"],
        flat_cost=code.flat_cost,
        checked=checked,
        estimated_cost=estimated.cost if estimated is not None else None,
        costed=namespace["_cel_program_cost"],
    )


class ProgramCache:
    """A thread-safe LRU of compiled programs keyed by (expression, environment)."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, Environment], Program] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, expression: str, env: Environment) -> Program:
        key = (expression, env)
        with self._lock:
            program = self._items.get(key)
            if program is not None:
                self._items.move_to_end(key)
                return program
        program = compile_program(expression, env)  # raises; failures are not cached
        with self._lock:
            self._items[key] = program
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return program

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_generic_cache = ProgramCache(size=512)


def evaluate(
    expression: str,
    bindings: Mapping[str, Any] | None = None,
    *,
    cost_limit: int = DEFAULT_COST_LIMIT,
) -> Any:
    """Evaluate generic CEL with plain Python values in and out.

    Undeclared names are runtime errors here (like cel-go without a type
    check), so ``x || true`` is true when ``x`` is not bound. Raises a
    ``CELError`` subclass on any failure.
    """
    bindings = bindings or {}
    env = Environment(variables=frozenset(bindings), checked=False)
    program = _generic_cache.get(expression, env)
    variables = {name: to_cel(value) for name, value in bindings.items()}
    return to_python(program.run(variables, cost_limit))
