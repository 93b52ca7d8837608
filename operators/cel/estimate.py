"""Worst-case cost of one evaluation, for any device: upstream's estimated-cost check.

New or changed selectors are refused when this exceeds the limit. The estimate
follows the runtime model (flat 1 per operation, iterations charged per
element, size-proportional charges from ``costs``), with sizes bounded the way
upstream's estimator bounds a device: a driver name of at most 63 characters,
at most 32 entries per map level, attribute values of at most 64 characters or
elements. Sizes are carried through ``cel.bind`` and concatenation, so
``cel.bind(a, device.driver + device.driver, ...)`` nested thirty times is
seen to build a 2**30-fold string and is refused before it ever runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from . import analysis, ast, functions
from .costs import ELEMENT_COST, REGEX_FACTOR, STRING_FACTOR

#: Largest number of entries in one level of ``device.attributes`` / ``device.capacity``.
MAX_MAP_ENTRIES: Final = 32
#: Largest attribute value (string characters or list items), and any unknown size.
MAX_ELEMENTS: Final = 64
#: Upstream's bound on a driver name.
MAX_DRIVER: Final = 63
#: ``includes`` looks at no more than this many list items.
INCLUDES_MAX: Final = 48
#: Size assumed for a number or other scalar rendered as text.
SCALAR_TEXT: Final = 32


@dataclass(frozen=True, slots=True)
class Shape:
    """What the estimator knows about a value: its largest size and its kind.

    ``kind`` is a CEL kind ("string", "bytes", "list", "map", "scalar", "dyn") or
    one of the device's own levels ("device", "attributes", "attribute-domain",
    "capacity", "capacity-domain").
    """

    size: int
    kind: str


DYN: Final = Shape(MAX_ELEMENTS, "dyn")
SCALAR: Final = Shape(1, "scalar")
_SIZED: Final = frozenset({"string", "bytes", "list", "map", "dyn"})
_DEVICE_FIELDS: Final = {
    "driver": Shape(MAX_DRIVER, "string"),
    "attributes": Shape(MAX_MAP_ENTRIES, "attributes"),
    "capacity": Shape(MAX_MAP_ENTRIES, "capacity"),
    "allowMultipleAllocations": SCALAR,
}
#: Looking up one entry of a device level gives the next level.
_DEVICE_LEVELS: Final = {
    "attributes": Shape(MAX_MAP_ENTRIES, "attribute-domain"),
    "attribute-domain": DYN,
    "capacity": Shape(MAX_MAP_ENTRIES, "capacity-domain"),
    "capacity-domain": SCALAR,
}


def _chars(n: float) -> int:
    return math.ceil(n * STRING_FACTOR)


def estimated_cost(node: ast.Node, device_var: str | None = "device") -> int:
    """Worst-case cost of one evaluation of ``node``."""
    scope: dict[str, Shape] = {}
    if device_var is not None:
        scope[device_var] = Shape(1, "device")
    return _Estimator(scope).cost(node)[0]


class _Estimator:
    def __init__(self, scope: dict[str, Shape]) -> None:
        self.scopes = [scope]

    def lookup(self, name: str) -> Shape | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def cost(self, node: ast.Node) -> tuple[int, Shape]:
        """(worst-case cost, shape of the value) of ``node``."""
        method = getattr(self, "e_" + type(node).__name__, None)
        if method is None:
            children = analysis.children(node)
            return 1 + sum(self.cost(c)[0] for c in children), DYN
        result: tuple[int, Shape] = method(node)
        return result

    def e_Lit(self, node: ast.Lit) -> tuple[int, Shape]:
        value = node.value
        if isinstance(value, str):
            return 0, Shape(len(value), "string")
        if isinstance(value, bytes):
            return 0, Shape(len(value), "bytes")
        return 0, SCALAR

    def e_Ident(self, node: ast.Ident) -> tuple[int, Shape]:
        known = None if node.root else self.lookup(node.name)
        return 1, known if known is not None else DYN

    def e_Select(self, node: ast.Select) -> tuple[int, Shape]:
        cost, operand = self.cost(node.operand)
        if operand.kind == "device":
            return cost + 1, _DEVICE_FIELDS.get(node.field, DYN)
        return cost + 1, _DEVICE_LEVELS.get(operand.kind, DYN)

    def e_Index(self, node: ast.Index) -> tuple[int, Shape]:
        operand_cost, operand = self.cost(node.operand)
        index_cost, _ = self.cost(node.index)
        return operand_cost + index_cost + 1, _DEVICE_LEVELS.get(operand.kind, DYN)

    def e_Has(self, node: ast.Has) -> tuple[int, Shape]:
        return self.cost(node.select.operand)[0] + 1, SCALAR

    def e_Unary(self, node: ast.Unary) -> tuple[int, Shape]:
        return self.cost(node.operand)[0] + 1, SCALAR

    def e_Binary(self, node: ast.Binary) -> tuple[int, Shape]:
        left_cost, left = self.cost(node.left)
        right_cost, right = self.cost(node.right)
        cost = left_cost + right_cost + 1
        op = node.op
        if op == "+":
            if left.kind not in _SIZED or right.kind not in _SIZED:
                return cost, SCALAR
            total = left.size + right.size
            if "list" in (left.kind, right.kind):
                return cost + total * ELEMENT_COST, Shape(total, "list")
            kind = left.kind if left.kind != "dyn" else right.kind
            return cost + _chars(total), Shape(total, kind)
        if op == "in":
            # Lists are searched item by item; maps (and the device's levels) are hashed.
            if analysis.is_constant(node.right) or right.kind not in ("list", "dyn"):
                return cost, SCALAR
            return cost + right.size, SCALAR
        if op in ("==", "!=", "<", "<=", ">", ">="):
            if analysis.is_constant(node.left) or analysis.is_constant(node.right):
                return cost, SCALAR
            return cost + _chars(min(left.size, right.size)), SCALAR
        return cost, SCALAR if left.kind == "scalar" else DYN

    def e_And(self, node: ast.And) -> tuple[int, Shape]:
        return self.cost(node.left)[0] + self.cost(node.right)[0], SCALAR

    def e_Or(self, node: ast.Or) -> tuple[int, Shape]:
        return self.cost(node.left)[0] + self.cost(node.right)[0], SCALAR

    def e_Cond(self, node: ast.Cond) -> tuple[int, Shape]:
        then_cost, then = self.cost(node.then)
        else_cost, otherwise = self.cost(node.otherwise)
        shape = then if then == otherwise else Shape(max(then.size, otherwise.size), "dyn")
        return self.cost(node.cond)[0] + max(then_cost, else_cost), shape

    def e_ListLit(self, node: ast.ListLit) -> tuple[int, Shape]:
        cost = 10 + sum(self.cost(e)[0] for e, _ in node.elements)
        return cost, Shape(len(node.elements), "list")

    def e_MapLit(self, node: ast.MapLit) -> tuple[int, Shape]:
        cost = 30 + sum(self.cost(k)[0] + self.cost(v)[0] for k, v, _ in node.entries)
        return cost, Shape(len(node.entries), "map")

    def e_Bind(self, node: ast.Bind) -> tuple[int, Shape]:
        init_cost, init = self.cost(node.init)
        self.scopes.append({node.var: init})
        try:
            body_cost, body = self.cost(node.body)
        finally:
            self.scopes.pop()
        return init_cost + body_cost, body

    def e_OptMap(self, node: ast.OptMap) -> tuple[int, Shape]:
        target_cost, _ = self.cost(node.target)
        self.scopes.append({node.var: DYN})
        try:
            body_cost, _ = self.cost(node.body)
        finally:
            self.scopes.pop()
        return target_cost + body_cost + 1, DYN

    def e_Comprehension(self, node: ast.Comprehension) -> tuple[int, Shape]:
        range_cost, rng = self.cost(node.range)
        count = _iterations(node.range, rng)
        element = _DEVICE_LEVELS.get(rng.kind, DYN) if rng.kind != "device" else DYN
        variables = dict.fromkeys(node.vars, DYN)
        if len(node.vars) == 1 and rng.kind in _DEVICE_LEVELS:
            variables[node.vars[0]] = Shape(MAX_DRIVER, "string")  # a domain or id
        elif len(node.vars) == 2:
            variables[node.vars[1]] = element
        self.scopes.append(variables)
        try:
            body = sum(self.cost(a)[0] for a in node.args) + analysis.LOOP_STEP_COST
        finally:
            self.scopes.pop()
        cost = range_cost + 1 + count * body
        if node.kind in ("map", "filter", "transformList"):
            return cost, Shape(count, "list")
        if node.kind == "transformMap":
            return cost, Shape(count, "map")
        return cost, SCALAR

    def e_Call(self, node: ast.Call) -> tuple[int, Shape]:
        name = analysis.call_name(node)
        if node.target is not None and not ("." in name and name in functions.GLOBAL):
            name = node.name
            operands = [node.target, *node.args]
        else:
            operands = list(node.args)
        estimates = [self.cost(o) for o in operands]
        cost = 1 + sum(c for c, _ in estimates)
        shapes = [s for _, s in estimates]
        extra, shape = _call(name, operands, shapes)
        return cost + extra, shape


def _iterations(range_node: ast.Node, shape: Shape) -> int:
    """How many times a comprehension over ``range_node`` can iterate."""
    if shape.kind in ("device", "scalar"):
        return 0
    if isinstance(range_node, ast.Call) and analysis.call_name(range_node) == "lists.range":
        arg = range_node.args[0] if range_node.args else None
        if isinstance(arg, ast.Lit) and type(arg.value) is int:
            return max(arg.value, 0)
    return shape.size


_SAME_SIZE_STRING: Final = frozenset({"lowerAscii", "upperAscii", "trim", "substring"})
_TRAVERSE_LIST: Final = frozenset({"isSorted", "sum", "min", "max", "indexOf", "lastIndexOf"})
_PARSERS: Final = frozenset(
    {
        "int",
        "uint",
        "double",
        "bool",
        "bytes",
        "timestamp",
        "duration",
        "quantity",
        "isQuantity",
        "semver",
        "isSemver",
        "ip",
        "cidr",
        "isIP",
        "isCIDR",
        "ip.isCanonical",
    }
)


def _call(name: str, operands: list[ast.Node], shapes: list[Shape]) -> tuple[int, Shape]:
    """(size-dependent extra cost, result shape) of one library call; mirrors ``costs.CALLS``."""
    first = shapes[0].size if shapes else 1
    second = shapes[1].size if len(shapes) > 1 else 1
    if name == "includes":
        return INCLUDES_MAX, SCALAR
    if name in ("startsWith", "endsWith"):
        bounded = len(operands) > 1 and analysis.is_constant(operands[1])
        return (0 if bounded else _chars(min(first, second))), SCALAR
    if name == "contains":
        return _chars(first) * max(_chars(second), 1), SCALAR
    if name in ("matches", "find", "findAll"):
        extra = _chars(1 + first) * math.ceil(second * REGEX_FACTOR)
        if name == "findAll":
            return extra + (first + 1) * ELEMENT_COST, Shape(first + 1, "list")
        return extra, SCALAR if name == "matches" else Shape(first, "string")
    if name in _SAME_SIZE_STRING:
        return _chars(first), Shape(first, "string")
    if name == "reverse" or name == "slice":
        kind = shapes[0].kind if shapes else "dyn"
        return (first if kind == "list" else _chars(first)), Shape(first, kind)
    if name == "replace" and len(shapes) >= 3:
        result = first + (first + 1) * shapes[2].size
        return _chars(2 * first + result), Shape(result, "string")
    if name == "split":
        return _chars(2 * first) + first * ELEMENT_COST, Shape(first, "list")
    if name == "join":
        separator = second if len(shapes) > 1 else 0
        result = first * MAX_ELEMENTS + separator * max(first - 1, 0)
        return _chars(2 * result), Shape(result, "string")
    if name == "format":
        result = first + second * SCALAR_TEXT
        return _chars(result), Shape(result, "string")
    if name == "strings.quote":
        return 2 * _chars(first), Shape(6 * first, "string")
    if name == "string":
        return _chars(first), Shape(max(first, SCALAR_TEXT), "string")
    if name in _TRAVERSE_LIST:
        return first, DYN if name in ("sum", "min", "max") else SCALAR
    if name == "distinct":
        return _chars(first * first), Shape(first, "list")
    if name == "sort":
        return max(first, 2).bit_length() * first, Shape(first, "list")
    if name == "flatten":
        return first * MAX_ELEMENTS, Shape(first * MAX_ELEMENTS, "list")
    if name == "lists.range":
        n = _literal_int(operands[0]) if operands else None
        size = MAX_ELEMENTS if n is None else max(n, 0)
        return size * ELEMENT_COST, Shape(size, "list")
    if name in ("sets.contains", "sets.intersects", "sets.equivalent"):
        pairs = math.ceil(first * second * STRING_FACTOR) + first + second
        return (2 * pairs if name == "sets.equivalent" else pairs), SCALAR
    if name in _PARSERS:
        return _chars(shapes[-1].size if shapes else 1), SCALAR
    if name == "size":
        return 0, SCALAR
    return 0, DYN


def _literal_int(node: ast.Node) -> int | None:
    if isinstance(node, ast.Lit) and type(node.value) is int:
        return int(node.value)
    return None


__all__ = ["MAX_ELEMENTS", "MAX_MAP_ENTRIES", "Shape", "estimated_cost"]
