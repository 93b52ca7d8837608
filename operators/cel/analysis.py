"""Static facts about an expression: a result-type guess and the flat cost.

Flat cost model (documented in ``__init__``): every variable reference, field
selection, index, operator and function call costs 1; literals cost 0; a list
literal costs 10 plus its elements and a map literal 30 plus its entries, as in
cel-go. A comprehension costs its range, plus per iteration its body and 2 for
the loop step and condition. ``flat_cost`` leaves out the iterations (they are
charged at run time, per iteration) and the size-dependent charges of
``costs`` (charged at run time before each operation). The worst case over
all devices is ``estimate.estimated_cost``.
"""

from __future__ import annotations

from . import ast

LOOP_STEP_COST = 2

_BOOL_FUNCTIONS = frozenset(
    [
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "isGreaterThan",
        "isLessThan",
        "isSemver",
        "isQuantity",
        "isInteger",
        "hasValue",
        "isSorted",
        "includes",
        "sets.contains",
        "sets.equivalent",
        "sets.intersects",
        "bool",
    ]
)
_INT_FUNCTIONS = frozenset(
    [
        "size",
        "int",
        "indexOf",
        "lastIndexOf",
        "compareTo",
        "sign",
        "major",
        "minor",
        "patch",
        "asInteger",
        "getFullYear",
        "getMonth",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getHours",
        "getMinutes",
        "getSeconds",
        "getMilliseconds",
    ]
)
_STRING_FUNCTIONS = frozenset(
    [
        "string",
        "charAt",
        "lowerAscii",
        "upperAscii",
        "replace",
        "substring",
        "trim",
        "join",
        "format",
        "strings.quote",
        "find",
    ]
)
_LIST_FUNCTIONS = frozenset(
    ["split", "findAll", "slice", "flatten", "distinct", "sort", "lists.range"]
)
_OTHER_FUNCTIONS = {
    "quantity": "kubernetes.Quantity",
    "semver": "kubernetes.Semver",
    "double": "double",
    "uint": "uint",
    "bytes": "bytes",
    "asApproximateFloat": "double",
    "timestamp": "google.protobuf.Timestamp",
    "duration": "google.protobuf.Duration",
    "type": "type",
    "optional.of": "optional_type",
    "optional.none": "optional_type",
    "optional.ofNonZeroValue": "optional_type",
}

_LIT_TYPES = {
    bool: "bool",
    int: "int",
    float: "double",
    str: "string",
    bytes: "bytes",
    type(None): "null_type",
}


def result_type(node: ast.Node, device_var: str | None = "device") -> str:
    """A conservative guess of the result type; "dyn" when it cannot be known statically."""
    if isinstance(node, ast.Lit):
        if type(node.value).__name__ == "UInt":
            return "uint"
        return _LIT_TYPES.get(type(node.value), "dyn")
    if isinstance(node, (ast.And, ast.Or, ast.Has)):
        return "bool"
    if isinstance(node, ast.Unary):
        return "bool" if node.op == "!" else result_type(node.operand, device_var)
    if isinstance(node, ast.Binary):
        if node.op in ("==", "!=", "<", "<=", ">", ">=", "in"):
            return "bool"
        left, right = result_type(node.left, device_var), result_type(node.right, device_var)
        return left if left == right and left != "dyn" else "dyn"
    if isinstance(node, ast.Cond):
        then, other = result_type(node.then, device_var), result_type(node.otherwise, device_var)
        return then if then == other else "dyn"
    if isinstance(node, ast.ListLit):
        return "list"
    if isinstance(node, ast.MapLit):
        return "map"
    if isinstance(node, ast.Comprehension):
        if node.kind in ("all", "exists", "exists_one"):
            return "bool"
        return "map" if node.kind == "transformMap" else "list"
    if isinstance(node, ast.Bind):
        return result_type(node.body, device_var)
    if isinstance(node, ast.Call):
        name = call_name(node)
        if name in _BOOL_FUNCTIONS:
            return "bool"
        if name in _INT_FUNCTIONS:
            return "int"
        if name in _STRING_FUNCTIONS:
            return "string"
        if name in _LIST_FUNCTIONS:
            return "list"
        return _OTHER_FUNCTIONS.get(name, "dyn")
    if isinstance(node, ast.Select) and device_var is not None:
        operand = node.operand
        if isinstance(operand, ast.Ident) and operand.name == device_var and not node.optional:
            return {
                "driver": "string",
                "allowMultipleAllocations": "bool",
                "attributes": "map",
                "capacity": "map",
            }.get(node.field, "dyn")
    return "dyn"


def call_name(node: ast.Call) -> str:
    """The function name, with the namespace for calls like ``strings.quote(x)``."""
    namespace = namespace_of(node.target) if node.target is not None else None
    return f"{namespace}.{node.name}" if namespace else node.name


def namespace_of(node: ast.Node | None) -> str | None:
    """``a.b`` for a target written as a plain dotted name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Select) and not node.optional:
        parts.append(node.field)
        node = node.operand
    if isinstance(node, ast.Ident):
        parts.append(node.name)
        return ".".join(reversed(parts))
    return None


def children(node: ast.Node) -> list[ast.Node]:
    if isinstance(node, (ast.Lit, ast.Ident)):
        return []
    if isinstance(node, ast.Select):
        return [node.operand]
    if isinstance(node, ast.Index):
        return [node.operand, node.index]
    if isinstance(node, ast.Call):
        return ([node.target] if node.target is not None else []) + list(node.args)
    if isinstance(node, ast.ListLit):
        return [e for e, _ in node.elements]
    if isinstance(node, ast.MapLit):
        return [x for k, v, _ in node.entries for x in (k, v)]
    if isinstance(node, ast.StructLit):
        return [v for _, v in node.fields]
    if isinstance(node, ast.Unary):
        return [node.operand]
    if isinstance(node, (ast.Binary, ast.And, ast.Or)):
        return [node.left, node.right]
    if isinstance(node, ast.Cond):
        return [node.cond, node.then, node.otherwise]
    if isinstance(node, ast.Has):
        return [node.select.operand]
    if isinstance(node, ast.Bind):
        return [node.init, node.body]
    if isinstance(node, ast.OptMap):
        return [node.target, node.body]
    raise TypeError(f"unknown node {node!r}")


def _own_cost(node: ast.Node) -> int:
    if isinstance(node, ast.Lit):
        return 0
    if isinstance(node, ast.ListLit):
        return 10
    if isinstance(node, ast.MapLit):
        return 30
    if isinstance(node, (ast.And, ast.Or, ast.Cond, ast.Bind)):
        return 0
    return 1


def flat_cost(node: ast.Node) -> int:
    """Cost of one evaluation of ``node`` without the iterations of comprehensions."""
    if isinstance(node, ast.Comprehension):
        return flat_cost(node.range) + 1
    if isinstance(node, ast.Cond):
        return flat_cost(node.cond) + max(flat_cost(node.then), flat_cost(node.otherwise))
    return _own_cost(node) + sum(flat_cost(c) for c in children(node))


def iteration_cost(node: ast.Comprehension) -> int:
    """What one iteration of a comprehension is charged at run time."""
    return sum(flat_cost(a) for a in node.args) + LOOP_STEP_COST


def is_constant(node: ast.Node) -> bool:
    """A literal, or a list or map literal made only of literals: its size is fixed."""
    if isinstance(node, ast.Lit):
        return True
    if isinstance(node, ast.ListLit):
        return all(not optional and is_constant(e) for e, optional in node.elements)
    if isinstance(node, ast.MapLit):
        return all(
            not optional and is_constant(k) and is_constant(v) for k, v, optional in node.entries
        )
    return False
