"""Translate an ``ast`` tree into the source of one Python function.

The generated function evaluates the expression with statements, not nested
lambdas: ``&&``, ``||`` and ``?:`` become ``try``/``if`` blocks (errors are
kept as values so that ``false && error`` is false, as CEL requires), macros
become ``for`` loops over locals, ``cel.bind`` becomes an assignment. The
runtime cost is counted as upstream's cost tracker counts it: the fixed cost
of every operation outside loops is added once at the start (``_cost``), each
loop iteration adds the fixed cost of its body, and operations whose cost
depends on their operands (``runtimecost``) add it just before they run; the
evaluation stops as soon as the count passes the limit. A second counter
(``_work``, ``costs``) bounds the work dralloc's implementation does beyond
what upstream charges (its list concatenation copies, upstream's is lazy), so
a cost bomb is stopped without making the reported cost differ from upstream's. Operators and library functions are calls into
``semantics`` and ``functions``, bound by name when the source is compiled.
"""

from __future__ import annotations

import inspect
import keyword
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from . import analysis, ast, costs, functions, runtimecost, semantics
from .checker import Checked
from .errors import CELCompileError, CELCostError, CELError, CELEvalError
from .parser import RESERVED_WORDS
from .regex import RegexSyntaxError, compile_regex
from .values import TYPES, Optional, UInt, type_name

#: Fields of the ``device`` variable and the DeviceView attribute holding each.
DEVICE_FIELDS = {
    "driver": "driver",
    "attributes": "attributes",
    "capacity": "capacity",
    "allowMultipleAllocations": "allow_multiple_allocations",
}

#: Pure functions evaluated at compile time when their arguments are literals (an error is
#: left for run time, as upstream does not fold them).
_FOLDABLE = frozenset({"quantity", "semver", "isSemver", "isQuantity"})
#: cel-go's type conversions: with a constant argument upstream runs them when it plans the
#: program, anywhere in the expression, so a failing one refuses the whole expression
#: ("program instantiation failed: ...") even where it would never be evaluated.
_CONVERSIONS = frozenset(
    {"bool", "bytes", "double", "duration", "dyn", "int", "string", "timestamp", "type", "uint"}
)


@dataclass(frozen=True)
class Environment:
    """What names an expression may use and how strictly they are checked."""

    variables: frozenset[str] = frozenset()
    #: Undeclared identifiers and functions are compile errors (else runtime errors).
    checked: bool = True
    #: Name of the variable that is a DeviceView (device selectors), if any.
    device_var: str | None = None
    list_attributes: bool = False
    consumable_capacity: bool = True
    #: Kubernetes' libraries at upstream's version (device selectors), not the latest CEL.
    kubernetes: bool = False


@dataclass(frozen=True)
class GeneratedCode:
    source: str
    namespace: dict[str, Any]
    flat_cost: int
    variables: tuple[tuple[str, str], ...]  # (CEL name, Python local)


def _arity(fn: Callable[..., Any]) -> tuple[int, int]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return (0, 99)
    required = sum(1 for p in params if p.default is inspect.Parameter.empty)
    return (required, len(params))


#: Per-iteration fixed cost of each macro's loop condition and step as cel-go expands it
#: (``@not_strictly_false(__result__)`` costs 2, ``__result__ + [t]`` 12, ...), beyond its
#: predicate and transform.
_LOOP_COST = {
    "all": 3,
    "exists": 4,
    "exists_one": 0,
    "map": 12,
    "filter": 13,
    "transformList": 12,
    "transformMap": 3,
}
#: Cost of the loop condition of all and exists (``@not_strictly_false(__result__)``, with
#: ``!`` for exists), evaluated once more when they stop before the last element.
_CONDITION_COST = {"all": 2, "exists": 3}
#: What ``next`` gives for an exhausted iterator.
_END = object()
#: Fixed cost of a macro's result expression (``__result__``, ``__result__ == 1``).
_RESULT_COST = {"exists_one": 2}

#: Operations whose implementation here does more work than upstream charges for,
#: bounded by the work counter (by CEL function name, or ``op_`` + operator helper).
_WORK = {
    "op_add": costs.concat,
    "op_eq": costs.compare,
    "op_ne": costs.compare,
    "op_in": costs.membership,
    **{
        name: costs.CALLS[name]
        for name in (
            "replace",
            "split",
            "findAll",
            "join",
            "format",
            "flatten",
            "distinct",
            "sort",
            "sets.contains",
            "sets.intersects",
            "sets.equivalent",
            "lists.range",
            "slice",
            "reverse",
        )
    },
}


class _Codegen:
    def __init__(
        self,
        env: Environment,
        source: str,
        own_costs: dict[int, int] | None = None,
        checked: Checked | None = None,
    ) -> None:
        self.env = env
        #: The checked types (checked programs only): which overload cel-go dispatches to.
        self.checked = checked
        self.source = source
        #: Fixed costs being added up: the whole program, a loop body, a branch.
        self.frames: list[int] = [0]
        #: The static estimate of each node's own cost (checked programs only).
        self.own_costs = own_costs or {}
        #: Fold what upstream's optimized programs fold (device selectors: Kubernetes
        #: plans them with cel.OptOptimize); generic CEL keeps cel-go's default.
        self.optimize = env.device_var is not None and env.checked
        self.lines: list[str] = []
        self.level = 1
        #: The indentation level of the body of the function being written: the program's,
        #: or the local function a part deeper than _DEEPEST went into.
        self.function_level = 1
        self.counter = 0
        self.namespace: dict[str, Any] = {}
        self.scopes: list[dict[str, str]] = [{}]
        self.used_vars: dict[str, str] = {}
        #: Locals of cel.bind that may hold the evaluation error of their binding.
        self.fallible: set[str] = set()

    # --- plumbing ---------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.level + line)

    @contextmanager
    def block(self) -> Iterator[None]:
        self.level += 1
        start = len(self.lines)
        try:
            yield
        finally:
            if len(self.lines) == start:
                self.emit("pass")
            self.level -= 1

    def tmp(self, prefix: str = "t") -> str:
        self.counter += 1
        return f"_{prefix}{self.counter}"

    def bind(self, value: Any, prefix: str = "k") -> str:
        for name, existing in self.namespace.items():
            if existing is value and name.startswith("_" + prefix):
                return name
        name = self.tmp(prefix)
        self.namespace[name] = value
        return name

    def helper(self, name: str, fn: Callable[..., Any]) -> str:
        key = "_h_" + name
        self.namespace[key] = fn
        return key

    def error(self, node: ast.Node, message: str) -> CELCompileError:
        line, column = node.pos
        return CELCompileError(f"compilation failed: ERROR: <input>:{line}:{column}: {message}")

    def lookup_local(self, name: str) -> str | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def discarded(self, node: ast.Node) -> None:
        """Translate ``node`` for its compile errors only: upstream checks and plans parts of
        an expression it never evaluates, so their errors refuse the expression too."""
        lines, level = self.lines, self.level
        self.lines = []
        try:
            with self.frame():  # nor does it count
                self.expr(node)
        finally:
            self.lines, self.level = lines, level

    def runtime_error(self, message: str) -> str:
        """An expression that raises an evaluation error when reached."""
        return f"{self.helper('fail', semantics.fail)}({message!r})"

    def charge(self, cost: int) -> None:
        """Add a fixed cost to what the current frame (program, loop body, branch) costs."""
        self.frames[-1] += cost

    @contextmanager
    def frame(self) -> Iterator[list[int]]:
        """Collect the fixed cost of a nested part; the caller decides how it counts."""
        self.frames.append(0)
        total = [0]
        try:
            yield total
        finally:
            total[0] = self.frames.pop()

    def charged(
        self,
        name: str,
        cost: Callable[..., int],
        operands: list[str],
        call: str,
        work: Callable[..., int] | None = None,
    ) -> str:
        """``call`` (a format string over the operands) after charging its operand-dependent cost.

        The operands are evaluated once, in order, into temporaries; the cost is
        added and checked before the operation runs, so an operation over the
        budget never allocates its result. Operations that do more work here
        than upstream charges are also bounded by the work counter.
        """
        temps = [self.tmp() for _ in operands]
        assigned = ", ".join(f"({t} := {o})" for t, o in zip(temps, operands, strict=True))
        charge = self.helper("cost_" + name, cost)
        guard = ""
        if work is not None:
            measure = self.helper("work_" + name, work)
            guard = f" and (_work := {measure}({', '.join(temps)}) + _work) <= _limit"
        return (
            # The charge is computed before _cost is read: operands may charge too.
            f"({call.format(*temps)} if (_cost := {charge}({assigned}) + _cost) <= _limit"
            f"{guard} else _cost_exceeded())"
        )

    # --- expressions ------------------------------------------------------
    #: Python allows 20 statically nested loops and try blocks in one function, and each
    #: level of a logical chain, a condition or a macro takes one or two. A part of an
    #: expression reached this many levels deep in the function being written goes into a
    #: local function of its own, defined and called where the part is evaluated, so that
    #: an expression cel-go takes (a validating admission policy's, inlined) is not refused
    #: as nesting too deeply. Shallower expressions are written as before.
    _DEEPEST = 10

    def expr(self, node: ast.Node) -> str:
        if self.level - self.function_level >= self._DEEPEST and not isinstance(
            node, (ast.Lit, ast.Ident)
        ):
            return self._hoisted(node)
        method = getattr(self, "x_" + type(node).__name__)
        result: str = method(node)
        return result

    def _hoisted(self, node: ast.Node) -> str:
        """``node`` evaluated in a local function (see _DEEPEST): it reads the enclosing
        locals, and charges the program's cost and work counters, as the code it replaces."""
        name = self.tmp("f")
        self.emit(f"def {name}():")
        outer = self.function_level
        with self.block():
            self.function_level = self.level
            self.emit("nonlocal _cost, _work")
            try:
                result: str = getattr(self, "x_" + type(node).__name__)(node)
            finally:
                self.function_level = outer
            self.emit(f"return {result}")
        return f"{name}()"

    def x_Lit(self, node: ast.Lit) -> str:
        value = node.value
        t = type(value)
        if t in (int, str, bool, bytes) or value is None:
            return repr(value)
        if t is float and math.isfinite(value) and not (value == 0 and math.copysign(1, value) < 0):
            return repr(value)
        return self.bind(value)

    def x_Ident(self, node: ast.Ident) -> str:
        self.charge(1)
        name = node.name
        local = None if node.root else self.lookup_local(name)
        if local is not None:
            if local in self.fallible:
                # The binding failed when it was evaluated: the error surfaces where it is used.
                self.emit(f"if isinstance({local}, {self.helper('EvalError', CELEvalError)}):")
                with self.block():
                    self.emit(f"raise {local}")
            return local
        if name in self.env.variables:
            return self.variable(name)
        if name in TYPES and name != "dyn":
            return self.bind(TYPES[name])
        if name in RESERVED_WORDS:
            raise self.error(node, f"reserved identifier: {name}")
        if self.env.checked:
            raise self.error(node, f"undeclared reference to '{name}' (in container '')")
        return self.runtime_error(f"unknown variable: {name}")

    def variable(self, name: str) -> str:
        if name not in self.used_vars:
            safe = "".join(c if c.isalnum() else "_" for c in name)
            self.used_vars[name] = f"v_{safe}_{len(self.used_vars)}"
        return self.used_vars[name]

    def _qualified_variable(self, node: ast.Select) -> str | None:
        """Resolve ``a.b.c`` to a variable declared with a dotted name, longest first."""
        dotted = analysis.namespace_of(node)
        if dotted is None or "." not in dotted:
            return None
        root = dotted.split(".", 1)[0]
        if self.lookup_local(root) is not None:
            return None
        if dotted in self.env.variables:
            self.charge(1)
            return self.variable(dotted)
        return None

    def x_Select(self, node: ast.Select) -> str:
        if not node.optional:
            qualified = self._qualified_variable(node)
            if qualified is not None:
                return qualified
            operand = node.operand
            if (
                isinstance(operand, ast.Ident)
                and operand.name == self.env.device_var
                and self.lookup_local(operand.name) is None
            ):
                return self.device_field(node)
        target = self.expr(node.operand)
        if node.optional:
            call = (
                f"{self.helper('optselect', semantics.optional_select)}({target}, {node.field!r})"
            )
            return self._optional_qualifier(call)
        self.charge(1)
        return f"{self.helper('select', semantics.select)}({target}, {node.field!r})"

    def _optional_qualifier(self, call: str) -> str:
        """``.?f`` or ``[?k]``: cel-go counts the qualifier only when it finds something."""
        t = self.tmp()
        return f"({t} if (_cost := ({t} := {call}).has + _cost) <= _limit else _cost_exceeded())"

    def device_field(self, node: ast.Select) -> str:
        attr = DEVICE_FIELDS.get(node.field)
        if attr is None or (
            attr == "allow_multiple_allocations" and not self.env.consumable_capacity
        ):
            raise self.error(node, f"undefined field '{node.field}'")
        self.charge(1)
        return f"{self.expr(node.operand)}.{attr}"

    def x_Index(self, node: ast.Index) -> str:
        target = self.expr(node.operand)
        key = self.expr(node.index)
        # A key that is a variable, or a selection or index on one, becomes a qualifier of
        # the indexed attribute in cel-go's plan: the variable itself is not counted.
        self.charge(-_folded_variable(node.index))
        if node.optional:
            call = f"{self.helper('optindex', semantics.optional_index)}({target}, {key})"
            return self._optional_qualifier(call)
        self.charge(1)
        return f"{self.helper('index', semantics.index)}({target}, {key})"

    def x_Unary(self, node: ast.Unary) -> str:
        if node.op == "-" and isinstance(node.operand, ast.Lit):
            try:
                return self.x_Lit(ast.Lit(semantics.neg(node.operand.value), pos=node.pos))
            except CELEvalError:
                pass
        operand = self.expr(node.operand)
        self.charge(1)
        if node.op == "!":
            return f"{self.helper('not', semantics.logical_not)}({operand})"
        return f"{self.helper('neg', semantics.neg)}({operand})"

    _BINARY: dict[str, tuple[str, Callable[..., Any]]] = {
        "==": ("eq", semantics.equals),
        "!=": ("ne", semantics.not_equals),
        "<": ("lt", semantics.less),
        "<=": ("le", semantics.less_equal),
        ">": ("gt", semantics.greater),
        ">=": ("ge", semantics.greater_equal),
        "in": ("in", semantics.contains),
        "+": ("add", semantics.add),
        "-": ("sub", semantics.sub),
        "*": ("mul", semantics.mul),
        "/": ("div", semantics.div),
        "%": ("mod", semantics.mod),
    }
    _FAST_COMPARE = frozenset({"==", "!=", "<", "<=", ">", ">="})

    def x_Binary(self, node: ast.Binary) -> str:
        if node.op == "in" and isinstance(node.right, ast.ListLit) and not node.right.elements:
            # Upstream plans `x in []` as the constant false: x is never evaluated.
            self.discarded(node.left)
            return "False"
        if node.op == "in" and self.optimize and _constant_primitives(node.right):
            return self._set_membership(node)
        left = self.expr(node.left)
        right = self.expr(node.right)
        name, fn = self._BINARY[node.op]
        call = self.helper(name, fn)
        sized = self._sized_binary(node)
        if sized is not None:
            work = _WORK.get("op_" + name)
            return self.charged("op_" + name, sized, [left, right], call + "({}, {})", work)
        # Same-type fast path when one side is a string or int literal: skip the
        # helper call when the other side has that type too.
        if node.op in self._FAST_COMPARE:
            for lit_node, lit, other, swapped in (
                (node.right, right, left, False),
                (node.left, left, right, True),
            ):
                if isinstance(lit_node, ast.Lit) and type(lit_node.value) in (str, int):
                    t = self.tmp()
                    kind = type(lit_node.value).__name__
                    op = node.op
                    direct = f"({lit} {op} {t})" if swapped else f"({t} {op} {lit})"
                    slow = f"{call}({lit}, {t})" if swapped else f"{call}({t}, {lit})"
                    return f"({direct} if type({t} := {other}) is {kind} else {slow})"
        return f"{call}({left}, {right})"

    def _set_membership(self, node: ast.Binary) -> str:
        """``x in [constants]``: upstream makes it a set lookup, free of cost."""
        left = self.expr(node.left)
        right = self.expr(node.right)
        return f"{self.helper('in', semantics.contains)}({left}, {right})"

    def _sized_binary(self, node: ast.Binary) -> Callable[[Any, Any], int] | None:
        """The operand-dependent cost of a binary operator; None when it is fixed (charged now)."""
        literal = _literal_operand(node.left, node.right)
        if node.op == "+":
            if literal is not None and not isinstance(literal.value, (str, bytes)):
                self.charge(1)
                return None
            return runtimecost.concat
        if node.op == "in":
            right = self.checked.type_of(node.right) if self.checked is not None else None
            if right is not None and right.kind != "list":
                # Not resolved to in_list (a map, or dyn dispatched at run time): cel-go's
                # tracker charges such a call 1, whatever the container's size.
                self.charge(1)
                return None
            return runtimecost.membership
        if node.op in self._FAST_COMPARE:
            if literal is not None:
                # Bounded by the literal: upstream's estimate of this node (or, unchecked,
                # a tenth of the literal's size) is charged now, and is never less than
                # what upstream counts at run time.
                self.charge(self.own_costs.get(id(node), _literal_bound(literal.value)))
                return None
            return runtimecost.compare if node.op in ("==", "!=") else runtimecost.order
        self.charge(1)
        return None

    def _guarded(self, node: ast.Node, target: str) -> None:
        """Evaluate ``node`` into ``target``; an evaluation error is stored, not raised."""
        self.emit("try:")
        with self.block():
            value = self.expr(node)
            self.emit(f"{target} = {value}")
        self.emit(f"except {self.helper('EvalError', CELEvalError)} as _exc:")
        with self.block():
            self.emit(f"{target} = _exc")

    def x_And(self, node: ast.And) -> str:
        return self._logical(node, ast.And, short="False", step=("and_step", _and_step))

    def x_Or(self, node: ast.Or) -> str:
        return self._logical(node, ast.Or, short="True", step=("or_step", _or_step))

    def _logical(
        self,
        node: ast.And | ast.Or,
        kind: type[ast.And] | type[ast.Or],
        short: str,
        step: tuple[str, Callable[..., Any]],
    ) -> str:
        # A chain a && b && c is flattened into one pass inside a one-shot loop,
        # so that long chains do not nest blocks (Python allows 20 levels).
        operands: list[ast.Node] = []
        pending: list[ast.Node] = [node]
        while pending:
            current = pending.pop()
            if isinstance(current, kind):
                pending.append(current.right)
                pending.append(current.left)
            else:
                operands.append(current)
        value, result = self.tmp(), self.tmp("r")
        combine = self.helper(*step)
        self.emit(f"{result} = None")
        self.emit("for _ in _ONCE:")
        with self.block():
            for position, operand in enumerate(operands):
                # An operand after the first is counted only when it is evaluated, as
                # cel-go counts it (its estimate counts them all).
                start = len(self.lines)
                with self.frame() as evaluated:
                    self._guarded(operand, value)
                if position == 0:
                    self.charge(evaluated[0])
                else:
                    self.charge_at(start, evaluated[0])
                self.emit(f"if {value} is {short}:")
                with self.block():
                    self.emit(f"{result} = {short}")
                    self.emit("break")
                if position == 0:
                    self.emit(f"{result} = {value}")
                else:
                    self.emit(f"{result} = {combine}({result}, {value})")
        finish = self.helper("logical_finish", _logical_finish)
        return f"{finish}({result}, {short})"

    def x_Cond(self, node: ast.Cond) -> str:
        # Chains c1 ? a : c2 ? b : d are flattened the same way.
        result = self.tmp("r")
        check = self.helper("condition", semantics.condition)
        self.emit("for _ in _ONCE:")
        with self.block():
            current: ast.Node = node
            # The conditions are charged with the rest; a branch's fixed cost when it is
            # taken, as upstream counts (its estimate takes the dearer branch).
            while isinstance(current, ast.Cond):
                cond = self.expr(current.cond)
                self.emit(f"if {check}({cond}):")
                with self.block():
                    start = len(self.lines)
                    with self.frame() as branch:
                        self.emit(f"{result} = {self.expr(current.then)}")
                        self.emit("break")
                    self.charge_at(start, branch[0] - _folded_variable(current.then))
                current = current.otherwise
            start = len(self.lines)
            with self.frame() as branch:
                self.emit(f"{result} = {self.expr(current)}")
            self.charge_at(start, branch[0] - _folded_variable(current))
        return result

    def charge_at(self, position: int, cost: int, level: int | None = None) -> None:
        """Insert, before the lines from ``position``, the charge of ``cost`` and the check."""
        if cost <= 0:
            return
        indent = "    " * (self.level if level is None else level)
        self.lines[position:position] = [
            f"{indent}_cost += {cost}",
            f"{indent}if _cost > _limit:",
            f"{indent}    _cost_exceeded()",
        ]

    def x_Has(self, node: ast.Has) -> str:
        select = node.select
        operand = select.operand
        if (
            isinstance(operand, ast.Ident)
            and operand.name == self.env.device_var
            and self.lookup_local(operand.name) is None
        ):
            attr = DEVICE_FIELDS.get(select.field)
            if attr is None:
                raise self.error(node, f"undefined field '{select.field}'")
            self.charge(1)  # the device variable
            return "True"
        target = self.expr(operand)
        return f"{self.helper('has', semantics.has_field)}({target}, {select.field!r})"

    def x_ListLit(self, node: ast.ListLit) -> str:
        # A list of constants is built when upstream plans the program: no cost to run.
        self.charge(0 if self.optimize and _constant(node) else 10)
        if not any(optional for _, optional in node.elements):
            return "[" + ", ".join(self.expr(e) for e, _ in node.elements) + "]"
        items = ", ".join(f"({self.expr(e)}, {optional})" for e, optional in node.elements)
        return f"{self.helper('list_opt', semantics.list_with_optionals)}(({items},))"

    def x_MapLit(self, node: ast.MapLit) -> str:
        self.charge(0 if self.optimize and _constant(node) else 30)
        if any(optional for _, _, optional in node.entries):
            items = ", ".join(
                f"({self.expr(k)}, {self.expr(v)}, {optional})" for k, v, optional in node.entries
            )
            return f"{self.helper('map_opt', semantics.map_with_optionals)}(({items},))"
        keys = [k.value for k, _, _ in node.entries if isinstance(k, ast.Lit)]
        if (
            len(keys) == len(node.entries)
            and all(type(k) is str for k in keys)
            and len(set(keys)) == len(keys)
        ):
            return (
                "{"
                + ", ".join(
                    f"{k!r}: {self.expr(v)}"
                    for k, (_, v, _) in zip(keys, node.entries, strict=True)
                )
                + "}"
            )
        items = ", ".join(f"({self.expr(k)}, {self.expr(v)})" for k, v, _ in node.entries)
        return f"{self.helper('build_map', semantics.build_map)}(({items}{',' if items else ''}))"

    def x_StructLit(self, node: ast.StructLit) -> str:
        raise self.error(node, f"unsupported: message construction ({node.type_name})")

    def x_Bind(self, node: ast.Bind) -> str:
        # cel-go evaluates a binding lazily: one the body never reads is never evaluated, and
        # the error of one it reads only surfaces where it is read (so `false && x` is false).
        if not _mentions(node.body, node.var):
            self.discarded(node.init)
            return self.expr(node.body)
        local = self.tmp("b")
        if self._cannot_fail(node.init):
            self.emit(f"{local} = {self.expr(node.init)}")
        else:
            self._guarded(node.init, local)
            self.fallible.add(local)
        self.scopes.append({node.var: local})
        try:
            return self.expr(node.body)
        finally:
            self.scopes.pop()

    def _cannot_fail(self, node: ast.Node) -> bool:
        """Bindings that cannot fail need no error kept: literals, plain names, and the
        usual DRA ``device.attributes["domain"]`` (an unknown domain is an empty map)."""
        if isinstance(node, ast.Lit):
            return True
        if isinstance(node, ast.Ident):
            local = None if node.root else self.lookup_local(node.name)
            return local not in self.fallible if local is not None else True
        if isinstance(node, ast.Index) and not node.optional:
            return (
                isinstance(node.operand, ast.Select)
                and node.operand.field in ("attributes", "capacity")
                and self._is_device(node.operand.operand)
                and isinstance(node.index, ast.Lit)
                and type(node.index.value) is str
            )
        return (
            isinstance(node, ast.Select)
            and not node.optional
            and node.field in DEVICE_FIELDS
            and self._is_device(node.operand)
        )

    def _is_device(self, node: ast.Node) -> bool:
        return (
            isinstance(node, ast.Ident)
            and node.name == self.env.device_var
            and self.lookup_local(node.name) is None
        )

    def x_OptMap(self, node: ast.OptMap) -> str:
        target, result, local = self.tmp(), self.tmp("r"), self.tmp("b")
        self.emit(f"{target} = {self.expr(node.target)}")
        self.charge(3)  # hasValue(), value() and optional.of() of cel-go's expansion
        opt_cls = self.helper("Optional", type(functions.NONE))
        self.emit(f"if type({target}) is not {opt_cls}:")
        with self.block():
            self.emit(self.runtime_error("optMap/optFlatMap requires an optional receiver"))
        self.emit(f"if {target}.has:")
        with self.block():
            self.emit(f"{local} = {target}.value")
            self.scopes.append({node.var: local})
            try:
                body = self.expr(node.body)
            finally:
                self.scopes.pop()
            if node.flat:
                self.emit(f"{result} = {body}")
                self.emit(f"if type({result}) is not {opt_cls}:")
                with self.block():
                    self.emit(self.runtime_error("optFlatMap function must return an optional"))
            else:
                self.emit(f"{result} = {opt_cls}(True, {body})")
        self.emit("else:")
        with self.block():
            self.emit(f"{result} = {self.bind(functions.NONE, 'none')}")
        return result

    # --- comprehensions ---------------------------------------------------------
    def x_Comprehension(self, node: ast.Comprehension) -> str:
        rng = self.tmp("rng")
        self.emit(f"{rng} = {self.expr(node.range)}")
        two = len(node.vars) == 2
        iterate = semantics.iter_pairs if two else semantics.iter_range
        # The result expression, counted once the range is there: when the range fails,
        # cel-go's fold returns its error at once.
        self.charge_at(len(self.lines), _RESULT_COST.get(node.kind, 1))
        names = [self.tmp("v") for _ in node.vars]
        loop_vars = ", ".join(names)
        result, err, value = self.tmp("r"), self.tmp("err"), self.tmp()
        kind = node.kind
        init = {
            "all": "True",
            "exists": "False",
            "exists_one": "0",
            "map": "[]",
            "filter": "[]",
            "transformList": "[]",
            "transformMap": "{}",
        }[kind]
        self.emit(f"{result} = {init}")
        if kind in ("all", "exists"):
            self.emit(f"{err} = None")
        elements = f"{self.helper('iter' + str(len(names)), iterate)}({rng})"
        iterator = self.tmp("it")
        if kind in ("all", "exists"):
            elements = f"({iterator} := iter({elements}))"
        self.emit(f"for {loop_vars} in {elements}:")
        with self.block(), self.frame() as body:
            step_at = len(self.lines)
            self.scopes.append(dict(zip(node.vars, names, strict=True)))
            try:
                self._comprehension_body(node, result, err, value, names, iterator)
            finally:
                self.scopes.pop()
        # Each iteration is charged, before it runs, the fixed cost of cel-go's loop
        # condition and step around the predicate and transform. A filtering step
        # (``p ? __result__ + [t] : __result__``) is charged in its branch instead: cel-go
        # evaluates, and so counts, only the branch taken.
        step = 0 if _filtering(node) else _LOOP_COST[node.kind]
        self.charge_at(step_at, body[0] + step, self.level + 1)
        if kind in ("all", "exists"):
            final = "True" if kind == "all" else "False"
            self.emit(f"if {result} is {final} and {err} is not None:")
            with self.block():
                self.emit(f"raise {err}")
        if kind == "exists_one":
            return f"({result} == 1)"
        return result

    def _comprehension_body(
        self,
        node: ast.Comprehension,
        result: str,
        err: str,
        value: str,
        names: list[str],
        iterator: str,
    ) -> None:
        kind = node.kind
        if kind in ("all", "exists"):
            self._guarded(node.args[0], value)
            stop, keep = ("False", "True") if kind == "all" else ("True", "False")
            self.emit(f"if {value} is {stop}:")
            with self.block():
                self.emit(f"{result} = {stop}")
                # cel-go stops at the loop condition of the next element, if any.
                end = self.bind(_END, "end")
                self.emit(f"if next({iterator}, {end}) is not {end}:")
                with self.block():
                    self.charge_at(len(self.lines), _CONDITION_COST[kind])
                    self.emit("pass")
                self.emit("break")
            self.emit(f"if {value} is not {keep}:")
            with self.block():
                bad = self.helper("not_bool", _not_bool)
                self.emit(f"{err} = {bad}({value}, {kind!r})")
            return
        if kind == "exists_one":
            check = self.helper("condition", semantics.condition)
            self.emit(f"if {check}({self.expr(node.args[0])}):")
            with self.block():
                # The step's branch taken (``__result__ + 1``); the other costs nothing.
                self.charge_at(len(self.lines), 2)
                self.emit(f"{result} += 1")
            return
        if kind == "filter":
            check = self.helper("condition", semantics.condition)
            self.emit(f"if {check}({self.expr(node.args[0])}):")
            with self.block():
                self.charge_at(len(self.lines), _LOOP_COST[kind])
                self.emit(f"{result}.append({names[0]})")
            return
        transform = node.args[-1]
        if len(node.args) == 2:
            check = self.helper("condition", semantics.condition)
            self.emit(f"if not {check}({self.expr(node.args[0])}):")
            with self.block():
                self.emit("continue")
        with self.frame() as taken:
            at = len(self.lines)
            if kind == "transformMap":
                key = self.helper("map_key", semantics.map_key)
                self.emit(f"{result}[{key}({names[0]})] = {self.expr(transform)}")
            else:
                self.emit(f"{result}.append({self.expr(transform)})")
        if _filtering(node):
            # Only when the predicate held: the transform and the step.
            self.charge_at(at, taken[0] + _LOOP_COST[kind])
        else:
            self.charge(taken[0])

    # --- calls ---------------------------------------------------------------
    def x_Call(self, node: ast.Call) -> str:
        namespace = analysis.namespace_of(node.target) if node.target is not None else None
        if namespace is not None and self.lookup_local(namespace.split(".")[0]) is None:
            qualified = f"{namespace}.{node.name}"
            if qualified in functions.GLOBAL and namespace not in self.env.variables:
                return self.call(node, qualified, functions.GLOBAL[qualified], None)
        if node.target is None:
            fn = functions.GLOBAL.get(node.name)
            if fn is None:
                return self.undeclared(node, node.name)
            return self.call(node, node.name, fn, None)
        fn = functions.MEMBER.get(node.name)
        if node.name in ("orValue", "or") and len(node.args) == 1 and fn is not None:
            return self._optional_or(node, fn)
        if self.env.kubernetes:
            fn = functions.KUBERNETES_MEMBER.get(node.name, fn)
        if fn is None and self.env.list_attributes:
            fn = functions.GATED_MEMBER.get(node.name)
        if fn is None:
            return self.undeclared(node, node.name)
        return self.call(node, node.name, fn, node.target)

    def _optional_or(self, node: ast.Call, fn: Callable[..., Any]) -> str:
        """``o.orValue(v)``, ``o.or(p)``: cel-go plans them as no calls (they cost nothing)
        that evaluate their argument only when ``o`` is an empty optional. For something
        else than an optional the function gives its overload error."""
        assert node.target is not None
        function = self.helper("m_" + node.name, fn)
        optional = self.helper("Optional", Optional)
        target, t = self.expr(node.target), self.tmp()
        # The argument as an expression, if it needs no statements (most do not).
        lines, level = self.lines, self.level
        self.lines = []
        with self.frame() as taken:
            argument = self.expr(node.args[0])
        inline = not self.lines
        self.lines, self.level = lines, level
        if inline:
            empty = f"{function}({t}, {argument})"
            if taken[0]:
                empty = (
                    f"({empty} if (_cost := {taken[0]} + _cost) <= _limit else _cost_exceeded())"
                )
            return (
                f"({function}({t}, None) if type({t} := {target}) is not {optional} or {t}.has"
                f" else {empty})"
            )
        result = self.tmp("r")
        self.emit(f"{t} = {target}")
        self.emit(f"if type({t}) is {optional} and not {t}.has:")
        with self.block():
            start = len(self.lines)
            with self.frame() as taken:
                self.emit(f"{result} = {function}({t}, {self.expr(node.args[0])})")
            self.charge_at(start, taken[0])
        self.emit("else:")
        with self.block():
            self.emit(f"{result} = {function}({t}, None)")
        return result

    def undeclared(self, node: ast.Call, name: str) -> str:
        if self.env.checked:
            raise self.error(node, f"undeclared reference to '{name}' (in container '')")
        return self.runtime_error(f"no such function: {name}")

    def call(
        self, node: ast.Call, name: str, fn: Callable[..., Any], target: ast.Node | None
    ) -> str:
        low, high = _arity(fn)
        count = len(node.args) + (1 if target is not None else 0)
        if not low <= count <= high:
            if self.env.checked:
                raise self.error(node, f"found no matching overload for '{name}'")
            return self.runtime_error(f"found no matching overload for '{name}'")
        operands = ([target] if target is not None else []) + list(node.args)
        cost = runtimecost.CALLS.get(name)
        if name in _CONVERSIONS and target is None and len(operands) == 1:
            constant = _constant_value(operands[0])
            if constant is not _NOT_CONSTANT:
                # Planned away upstream: nothing to count at run time.
                try:
                    return self.bind(fn(constant))
                except (CELEvalError, ArithmeticError, ValueError, TypeError) as exc:
                    raise CELCompileError(f"program instantiation failed: {exc}") from None
        if name in _FOLDABLE and all(isinstance(a, ast.Lit) for a in operands):
            values = [a.value for a in operands if isinstance(a, ast.Lit)]
            try:
                folded = self.bind(fn(*values))
            except CELEvalError:
                pass
            else:
                # Folded here, not upstream: charge what upstream's call costs.
                self.charge(1 if cost is None else cost(*values))
                return folded
        args = [self.expr(a) for a in operands]
        pins = self.checked.pinned.get(id(node), ()) if self.checked is not None else ()
        for position, kind in pins:
            guard = self.helper("pinned", _pinned)
            args[position] = f"{guard}({args[position]}, {kind!r}, {name!r})"
        if name in functions.REGEX_FUNCTIONS and len(operands) >= 2:
            args[1] = self._constant_regex(node, operands[1], args[1])
        safe = "".join(c if c.isalnum() else "_" for c in name)
        function = self.helper(("m_" if target is not None else "f_") + safe, fn)
        if cost is None:
            self.charge(1)
            return f"{function}({', '.join(args)})"
        if name in ("startsWith", "endsWith") and isinstance(node.args[0], ast.Lit):
            # Upstream charges a tenth of the prefix's size: known now.
            self.charge(cost(None, node.args[0].value))
            return f"{function}({', '.join(args)})"
        placeholders = ", ".join("{}" for _ in args)
        work = _WORK.get(name)
        return self.charged(safe, cost, args, f"{function}({placeholders})", work)

    def _constant_regex(self, node: ast.Call, pattern: ast.Node, code: str) -> str:
        """A literal pattern is compiled now: a syntax error is a compile error, as in cel-go."""
        if not (isinstance(pattern, ast.Lit) and type(pattern.value) is str):
            return code
        try:
            return self.bind(compile_regex(pattern.value), "re")
        except RegexSyntaxError as exc:
            raise self.error(node, str(exc)) from None


_NOT_CONSTANT = object()


def _pinned(value: Any, kind: str, name: str) -> Any:
    """An argument whose type the checker fixed from the first overload that took it
    (``Checked.pinned``): a value of another type has no overload, as in cel-go."""
    if type_name(value) != kind:
        raise CELEvalError(f"no such overload: {name}({type_name(value)})")
    return value


def _folded_variable(node: ast.Node) -> int:
    """1 if a ternary's branch is a variable, or a selection or index on one: cel-go plans
    it into the conditional and does not count the variable (its selections and indexes
    still count)."""
    while isinstance(node, (ast.Select, ast.Index)):
        node = node.operand
    return 1 if isinstance(node, ast.Ident) else 0


def _filtering(node: ast.Comprehension) -> bool:
    """Whether a macro's step is conditional: filter, and map, transformList and
    transformMap with a predicate."""
    return node.kind == "filter" or (
        node.kind in ("map", "transformList", "transformMap") and len(node.args) == 2
    )


def _constant_value(node: ast.Node) -> Any:
    """The value of a literal or of a type conversion of constants (cel-go folds these when
    it plans a program), else _NOT_CONSTANT."""
    if isinstance(node, ast.Lit):
        return node.value
    if (
        isinstance(node, ast.Call)
        and node.target is None
        and node.name in _CONVERSIONS
        and len(node.args) == 1
    ):
        inner = _constant_value(node.args[0])
        if inner is not _NOT_CONSTANT:
            try:
                return functions.GLOBAL[node.name](inner)
            except (CELEvalError, ArithmeticError, ValueError, TypeError):
                return _NOT_CONSTANT  # reported when the inner call itself is translated
    return _NOT_CONSTANT


def _mentions(node: ast.Node, name: str) -> bool:
    """Whether ``name`` appears as an identifier anywhere in ``node`` (shadowing ignored:
    a false "yes" only costs the laziness of one binding)."""
    if isinstance(node, ast.Ident):
        return node.name == name and not node.root
    return any(_mentions(value, name) for value in _children(node))


def _children(node: ast.Node) -> Iterator[ast.Node]:
    for slot in type(node).__slots__:
        value = getattr(node, slot)
        if isinstance(value, ast.Node):
            yield value
        elif isinstance(value, tuple):
            for item in value:
                if isinstance(item, ast.Node):
                    yield item
                elif isinstance(item, tuple):
                    yield from (x for x in item if isinstance(x, ast.Node))


def _constant(node: ast.Node) -> bool:
    """A literal, or a list or map literal of constants (what upstream folds)."""
    if isinstance(node, ast.Lit):
        return True
    if isinstance(node, ast.ListLit):
        return all(not optional and _constant(e) for e, optional in node.elements)
    if isinstance(node, ast.MapLit):
        return all(
            not optional and _constant(k) and _constant(v) for k, v, optional in node.entries
        )
    return False


def _constant_primitives(node: ast.Node) -> bool:
    """A list literal of bool, int, uint, double or string literals (a set lookup upstream)."""
    return isinstance(node, ast.ListLit) and all(
        not optional and isinstance(e, ast.Lit) and type(e.value) in (bool, int, UInt, float, str)
        for e, optional in node.elements
    )


def _literal_operand(*nodes: ast.Node) -> ast.Lit | None:
    """The first operand written as a literal, if any."""
    for node in nodes:
        if isinstance(node, ast.Lit):
            return node
    return None


def _literal_bound(value: Any) -> int:
    """Upper bound of a comparison's cost with this literal on one side."""
    if isinstance(value, (str, bytes)):
        return math.ceil(len(value) * runtimecost.STRING_FACTOR)
    return 1


def _and_step(accumulated: Any, value: Any) -> Any:
    """Fold one more non-false ``&&`` operand: the first error or non-bool is kept."""
    return value if accumulated is True else accumulated


def _or_step(accumulated: Any, value: Any) -> Any:
    return value if accumulated is False else accumulated


def _logical_finish(accumulated: Any, short: bool) -> bool:
    if accumulated is (not short):
        return not short
    if accumulated is short:
        return short
    if isinstance(accumulated, CELEvalError):
        raise accumulated
    semantics.no_overload("_&&_" if short is False else "_||_", accumulated)


def _cost_exceeded() -> None:
    raise CELCostError()


def _not_bool(value: Any, macro: str) -> CELEvalError:
    if isinstance(value, CELEvalError):
        return value
    return CELEvalError(
        f"found no matching overload for '{macro}' applied to '({semantics.type_name(value)})'"
    )


def generate(
    tree: ast.Node,
    env: Environment,
    source: str,
    checked: Checked | None = None,
    own_costs: dict[int, int] | None = None,
) -> GeneratedCode:
    """Python source of ``_cel_program(vars, limit) -> result`` and of ``_cel_program_cost``.

    The second returns ``(result, actual cost)`` and sets ``actual_cost`` on the
    error it raises: the same body, for tests and diagnostics, so the hot path
    pays nothing for reporting its cost.
    """
    gen = _Codegen(env, source, own_costs, checked)
    result = gen.expr(tree)
    body = gen.lines
    flat = gen.frames[0]
    header = [f"    _cost = {flat}"]
    if any("_work" in line for line in body) or "_work" in result:
        header.append("    _work = 0")
    if flat:
        # The fixed costs are counted up front: over the limit, nothing runs.
        header += ["    if _cost > _limit:", "        _cost_exceeded()"]
    for cel_name, local in gen.used_vars.items():
        # The device selector's program receives the DeviceView itself.
        source_of = "_vars" if cel_name == env.device_var else f"_vars[{cel_name!r}]"
        header.append(f"    {local} = {source_of}")
    params = "_vars, _limit"
    source_text = "\n".join(
        [
            "def _cel_program(" + params + "):",
            *header,
            *body,
            f"    return {result}",
            "",
            "def _cel_program_cost(" + params + "):",
            *header,
            "    try:",
            *(["    " + line for line in body] or ["        pass"]),
            f"        return ({result}, _cost)",
            "    except _CELError as _exc:",
            "        _exc.actual_cost = _cost",
            "        raise",
            "",
        ]
    )
    gen.namespace["_cost_exceeded"] = _cost_exceeded
    gen.namespace["_ONCE"] = (None,)
    gen.namespace["_CELError"] = CELError
    return GeneratedCode(
        source=source_text,
        namespace=gen.namespace,
        flat_cost=flat,
        variables=tuple(gen.used_vars.items()),
    )


def is_identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


__all__ = ["DEVICE_FIELDS", "Environment", "GeneratedCode", "UInt", "generate", "is_identifier"]
