"""The static type checker: upstream's compile-time verdict on a device selector.

The API server compiles selectors with cel-go's checker, so an expression that
does not type-check there (``1 == 1.0``, ``"gpu".startsWith(1)``, ``[1, "a"]``)
is refused when a claim or class is created; dralloc must refuse the same
expressions. The checker walks the tree once, gives every node a ``types.Type``,
resolves every call to the overloads that may apply (by upstream's ids, which
the cost estimator needs), and raises ``CELCompileError`` with upstream's
message at the first error. Macros are checked as the comprehensions cel-go
expands them into, so a predicate that is not a bool fails the way it fails
upstream. List and map literals must be homogeneous (upstream's validator),
except inside ``format`` arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from . import analysis, ast, decls
from . import types as t
from .errors import CELCompileError
from .parser import RESERVED_WORDS
from .values import DURATION_TYPE_NAME, TIMESTAMP_TYPE_NAME, TYPE_NAMES

#: The fields of upstream's ``kubernetes.DRADevice``, by attribute type.
ATTRIBUTE_SCALAR = t.ANY  # before DRAListTypeAttributes: google.protobuf.Any
ATTRIBUTE_LIST = t.DYN  # with DRAListTypeAttributes


def device_fields(list_attributes: bool, consumable_capacity: bool) -> dict[str, t.Type]:
    attribute = ATTRIBUTE_LIST if list_attributes else ATTRIBUTE_SCALAR
    fields = {
        "driver": t.STRING,
        "attributes": t.map_of(t.STRING, t.map_of(t.STRING, attribute)),
        "capacity": t.map_of(t.STRING, t.map_of(t.STRING, t.QUANTITY)),
    }
    if consumable_capacity:
        fields["allowMultipleAllocations"] = t.BOOL
    return fields


@dataclass(frozen=True)
class Declarations:
    """What an expression may reference: variables, struct fields and functions."""

    variables: Mapping[str, t.Type]
    structs: Mapping[str, Mapping[str, t.Type]] = field(default_factory=dict)
    includes: bool = False


@dataclass(frozen=True)
class Checked:
    """The checker's findings, keyed by ``id(node)`` of the tree that was checked."""

    result: t.Type
    types: Mapping[int, t.Type]
    overloads: Mapping[int, tuple[str, ...]]
    #: Calls whose argument had a type not yet known (an element of ``flatten()`` over
    #: dynamic values) that overload resolution fixed: cel-go binds such a type to the
    #: first overload that accepts it, keeps only the overloads of that type, and at run
    #: time has no overload for a value of another (``string(x)`` of an int then fails).
    #: Call node -> (argument position, the runtime type name it was fixed to).
    pinned: Mapping[int, tuple[tuple[int, str], ...]] = field(default_factory=dict)

    def type_of(self, node: ast.Node) -> t.Type:
        return self.types.get(id(node), t.DYN)


def check(tree: ast.Node, declarations: Declarations) -> Checked:
    """Type-check ``tree``; raises CELCompileError with upstream's message."""
    checker = _Checker(declarations)
    checker.check(tree)
    checker.homogeneous(tree, exempt=False)
    checker.format_literals(tree)
    mapping = checker.mapping
    final = {key: mapping.substitute(value, True) for key, value in checker.types.items()}
    return Checked(final[id(tree)], final, checker.overloads, checker.pinned)


#: The calls whose pinned argument is checked at run time (``Checked.pinned``): the type
#: conversions, whose first overload in cel-go, as here, is their own type's (so the type
#: they pin is theirs: ``string(x)`` keeps only ``string(string)``). Other functions list
#: their overloads in another order than cel-go, so a pin there could refuse what cel-go
#: runs (``size(x)`` of a string); they keep dispatching on the value.
_PINNED_FUNCTIONS = frozenset(
    ("bool", "bytes", "double", "duration", "int", "string", "timestamp", "uint")
)
#: A pinned type -> the name of the values of that type at run time (``values.type_name``).
_PINNABLE: Mapping[str, str] = {
    "bool": "bool",
    "bytes": "bytes",
    "double": "double",
    "int": "int",
    "string": "string",
    "uint": "uint",
    "timestamp": TIMESTAMP_TYPE_NAME,
    "duration": DURATION_TYPE_NAME,
}


def _format(x: t.Type) -> str:
    """A type as cel-go's messages print it: ``google.protobuf.Any`` is ``any`` at any depth."""
    if x.kind == "any":
        return "any"
    if not x.params:
        return str(x)
    inner = ", ".join(_format(p) for p in x.params)
    if x.kind in ("list", "map", "type"):
        return f"{x.kind}({inner})"
    return f"{x.name}({inner})" if x.kind == "opaque" else str(x)


class _Checker:
    def __init__(self, declarations: Declarations) -> None:
        self.decls = declarations
        self.functions = decls.functions(declarations.includes)
        self.mapping = t.Mapping()
        self.types: dict[int, t.Type] = {}
        self.overloads: dict[int, tuple[str, ...]] = {}
        self.pinned: dict[int, tuple[tuple[int, str], ...]] = {}
        self.scopes: list[dict[str, t.Type]] = []

    # --- plumbing ---------------------------------------------------------------
    def error(self, node: ast.Node, message: str) -> CELCompileError:
        line, column = node.pos
        return CELCompileError(f"compilation failed: ERROR: <input>:{line}:{column}: {message}")

    def set(self, node: ast.Node, value: t.Type) -> t.Type:
        self.types[id(node)] = value
        return value

    def check(self, node: ast.Node) -> t.Type:
        method = getattr(self, "c_" + type(node).__name__)
        result: t.Type = method(node)
        return self.set(node, result)

    def sub(self, value: t.Type) -> t.Type:
        return self.mapping.substitute(value)

    def lookup(self, name: str) -> t.Type | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    # --- leaves -------------------------------------------------------------------
    def c_Lit(self, node: ast.Lit) -> t.Type:
        value = node.value
        if value is None:
            return t.NULL
        if isinstance(value, bool):
            return t.BOOL
        if type(value).__name__ == "UInt":
            return t.UINT
        if isinstance(value, int):
            return t.INT
        if isinstance(value, float):
            return t.DOUBLE
        if isinstance(value, str):
            return t.STRING
        if isinstance(value, bytes):
            return t.BYTES
        return t.DYN

    def c_Ident(self, node: ast.Ident) -> t.Type:
        local = None if node.root else self.lookup(node.name)
        if local is not None:
            return local
        declared = self.decls.variables.get(node.name)
        if declared is not None:
            return declared
        if node.name in TYPE_NAMES:
            return t.type_of(_named_type(node.name))
        if node.name in RESERVED_WORDS:
            raise self.error(node, f"reserved identifier: {node.name}")
        raise self.error(node, f"undeclared reference to '{node.name}' (in container '')")

    def c_StructLit(self, node: ast.StructLit) -> t.Type:
        for _, value in node.fields:
            self.check(value)
        return t.DYN  # refused by the code generator (no message types)

    # --- selection ----------------------------------------------------------------
    def select_field(self, node: ast.Node, operand: t.Type, name: str, optional: bool) -> t.Type:
        target = self.sub(operand)
        wrapped = target.is_optional
        if wrapped:
            target = target.params[0]
        if target.kind == "map":
            result = target.params[1]
        elif target.kind == "struct":
            fields = self.decls.structs.get(target.name)
            if fields is None or name not in fields:
                raise self.error(node, f"undefined field '{name}'")
            result = fields[name]
        elif target.kind == "param":
            self.mapping.assignable(t.DYN, target)
            result = t.DYN
        elif target.is_dyn or target.kind == "error":
            result = t.DYN
        else:
            raise self.error(node, f"type '{_format(target)}' does not support field selection")
        return t.optional_of(result) if wrapped or optional else result

    def c_Select(self, node: ast.Select) -> t.Type:
        operand = self.check(node.operand)
        return self.select_field(node, operand, node.field, node.optional)

    def c_Has(self, node: ast.Has) -> t.Type:
        select = node.select
        operand = self.check(select.operand)
        self.select_field(select, operand, select.field, False)
        return t.BOOL

    def c_Index(self, node: ast.Index) -> t.Type:
        operand = self.check(node.operand)
        index = self.check(node.index)
        name = "_[?_]" if node.optional else "_[_]"
        return self.resolve(node, name, (operand, index), member=False)

    # --- operators ------------------------------------------------------------------
    def c_Unary(self, node: ast.Unary) -> t.Type:
        operand = self.check(node.operand)
        return self.resolve(node, "!_" if node.op == "!" else "-_", (operand,), member=False)

    def c_Binary(self, node: ast.Binary) -> t.Type:
        left = self.check(node.left)
        right = self.check(node.right)
        name = "@in" if node.op == "in" else f"_{node.op}_"
        return self.resolve(node, name, (left, right), member=False)

    def logical(self, node: ast.Node, operands: tuple[ast.Node, ...]) -> t.Type:
        for operand in operands:
            found = self.sub(self.types[id(operand)])
            if not self.mapping.assignable(found, t.BOOL):
                raise self.error(operand, f"expected type 'bool' but found '{_format(found)}'")
        return t.BOOL

    def c_And(self, node: ast.And) -> t.Type:
        self.check(node.left)
        self.check(node.right)
        self.overloads[id(node)] = ("logical_and",)
        return self.logical(node, (node.left, node.right))

    def c_Or(self, node: ast.Or) -> t.Type:
        self.check(node.left)
        self.check(node.right)
        self.overloads[id(node)] = ("logical_or",)
        return self.logical(node, (node.left, node.right))

    def c_Cond(self, node: ast.Cond) -> t.Type:
        args = (self.check(node.cond), self.check(node.then), self.check(node.otherwise))
        return self.resolve(node, "_?_:_", args, member=False)

    # --- literals -------------------------------------------------------------------
    def join(self, previous: t.Type | None, current: t.Type) -> t.Type:
        if previous is None:
            return current
        if self.mapping.assignable(previous, current):
            return t.most_general(previous, current)
        return t.DYN

    def element(self, node: ast.Node, optional: bool) -> t.Type:
        found = self.check(node)
        if not optional:
            return found
        found = self.sub(found)
        if found.is_optional:
            return found.params[0]
        if not found.is_dyn:
            raise self.error(
                node, f"expected type '{t.optional_of(found)}' but found '{_format(found)}'"
            )
        return found

    def c_ListLit(self, node: ast.ListLit) -> t.Type:
        joined: t.Type | None = None
        for element, optional in node.elements:
            joined = self.join(joined, self.element(element, optional))
        return t.list_of(joined if joined is not None else t.fresh())

    def c_MapLit(self, node: ast.MapLit) -> t.Type:
        keys: t.Type | None = None
        values: t.Type | None = None
        for key, value, optional in node.entries:
            keys = self.join(keys, self.check(key))
            values = self.join(values, self.element(value, optional))
        if keys is None or values is None:
            return t.map_of(t.fresh(), t.fresh())
        return t.map_of(keys, values)

    def homogeneous(self, node: ast.Node, exempt: bool) -> None:
        """Upstream's homogeneous-literal validator, on the final types."""
        if isinstance(node, ast.Call) and node.name == "format":
            exempt = True
        if not exempt and isinstance(node, ast.ListLit):
            first: t.Type | None = None
            for element, optional in node.elements:
                found = self.final(element, optional)
                if first is None:
                    first = found
                elif not t.equivalent(first, found):
                    raise self.error(
                        element, f"expected type '{_format(first)}' but found '{_format(found)}'"
                    )
        if not exempt and isinstance(node, ast.MapLit) and node.entries:
            key0, value0, optional0 = node.entries[0]
            first_key, first_value = self.final(key0, False), self.final(value0, optional0)
            for key, value, optional in node.entries[1:]:
                for part, found, expected in (
                    (key, self.final(key, False), first_key),
                    (value, self.final(value, optional), first_value),
                ):
                    if not t.equivalent(expected, found):
                        raise self.error(
                            part,
                            f"expected type '{_format(expected)}' but found '{_format(found)}'",
                        )
        for child in _children(node):
            self.homogeneous(child, exempt)

    def format_literals(self, node: ast.Node) -> None:
        """Upstream's format validator: a literal format string against a literal argument list."""
        if (
            isinstance(node, ast.Call)
            and node.name == "format"
            and isinstance(node.target, ast.Lit)
            and type(node.target.value) is str
            and len(node.args) == 1
            and isinstance(node.args[0], ast.ListLit)
        ):
            self.check_format(node, node.target.value, [e for e, _ in node.args[0].elements])
        for child in _children(node):
            self.format_literals(child)

    def check_format(self, node: ast.Call, template: str, args: list[ast.Node]) -> None:
        used = 0
        i = 0
        while i < len(template):
            if template[i] != "%":
                i += 1
                continue
            if template[i + 1 : i + 2] == "%":
                i += 2
                continue
            if i + 1 >= len(template):
                raise self.error(node, "unexpected end of string")
            if used >= len(args):
                raise self.error(node, f"index {used} out of range")
            j = i + 1
            if template[j] == ".":
                j += 1
                while j < len(template) and template[j].isdigit():
                    j += 1
            clause = template[j : j + 1]
            allowed = _FORMAT_CLAUSES.get(clause)
            if allowed is None:
                raise self.error(
                    node, "could not parse formatting clause: unrecognized formatting clause"
                )
            self.check_format_arg(args[used], clause, allowed)
            used += 1
            i = j + 1
        if len(args) > used:
            raise self.error(
                node,
                f"too many arguments supplied to string.format (expected {used}, got {len(args)})",
            )

    def check_format_arg(self, arg: ast.Node, clause: str, allowed: tuple[str, ...]) -> None:
        found = self.final(arg, False)
        if found.kind == "dyn" or found.kind in allowed:
            if clause == "s" and isinstance(arg, ast.ListLit):
                for element, _ in arg.elements:
                    self.check_format_arg(element, clause, allowed)
            if clause == "s" and isinstance(arg, ast.MapLit):
                for key, value, _ in arg.entries:
                    self.check_format_arg(key, clause, allowed)
                    self.check_format_arg(value, clause, allowed)
            return
        name = found.name if found.kind not in ("list", "map", "opaque") else found.kind
        if found.is_optional:
            name = found.name
        raise self.error(
            arg, f"error during formatting: {_FORMAT_ERRORS[clause]}, was given {name}"
        )

    def final(self, node: ast.Node, optional: bool) -> t.Type:
        found = self.mapping.substitute(self.types.get(id(node), t.DYN))
        if optional and found.is_optional:
            return found.params[0]
        return found

    # --- calls ------------------------------------------------------------------------
    def c_Call(self, node: ast.Call) -> t.Type:
        namespace = analysis.namespace_of(node.target) if node.target is not None else None
        if namespace is not None and self.lookup(namespace.split(".")[0]) is None:
            qualified = f"{namespace}.{node.name}"
            if qualified in self.functions and namespace not in self.decls.variables:
                args = tuple(self.check(a) for a in node.args)
                return self.resolve(node, qualified, args, member=False)
        args = tuple(self.check(a) for a in node.args)
        if node.target is None:
            if node.name not in self.functions:
                raise self.error(node, f"undeclared reference to '{node.name}' (in container '')")
            return self.resolve(node, node.name, args, member=False)
        target = self.check(node.target)
        if node.name not in self.functions:
            raise self.error(node, f"undeclared reference to '{node.name}' (in container '')")
        return self.resolve(node, node.name, (target, *args), member=True)

    def resolve(
        self,
        node: ast.Node,
        name: str,
        args: tuple[t.Type, ...],
        *,
        member: bool,
        record: bool = True,
    ) -> t.Type:
        """cel-go's overload resolution: every overload whose parameters accept the arguments."""
        result: t.Type | None = None
        matched: list[str] = []
        free = [i for i, a in enumerate(args) if self.sub(a).kind == "param"]
        for overload in self.functions.get(name, ()):
            if overload.member != member or len(overload.args) != len(args):
                continue
            fresh = {p: t.fresh() for p in overload.params}
            params = tuple(_instantiate(a, fresh) for a in overload.args)
            if not self.mapping.assignable_all(params, args):
                continue
            matched.append(overload.id)
            found = self.sub(_instantiate(overload.result, fresh))
            if result is None:
                result = found
            elif not result.is_dyn and found != result:
                result = t.DYN
        if result is None:
            shown = [_format(self.mapping.substitute(a, True)) for a in args]
            signature = (
                f"{shown[0]}.({', '.join(shown[1:])})" if member else f"({', '.join(shown)})"
            )
            display = {"@in": "@in", "_[?_]": "_[?_]"}.get(name, name)
            raise self.error(
                node, f"found no matching overload for '{display}' applied to '{signature}'"
            )
        if record:
            self.overloads[id(node)] = tuple(matched)
            pins = (
                tuple(
                    (i, _PINNABLE[kind])
                    for i in free
                    if (kind := self.sub(args[i]).kind) in _PINNABLE
                )
                if name in _PINNED_FUNCTIONS and not member
                else ()
            )
            if pins:
                self.pinned[id(node)] = pins
        return result

    # --- macros -------------------------------------------------------------------------
    def range_vars(self, node: ast.Comprehension, rng: t.Type) -> tuple[t.Type, ...]:
        rng = self.sub(rng)
        two = len(node.vars) == 2
        if rng.kind == "list":
            return (t.INT, rng.params[0]) if two else (rng.params[0],)
        if rng.kind == "map":
            return (rng.params[0], rng.params[1]) if two else (rng.params[0],)
        if rng.kind in ("dyn", "error", "param"):
            self.mapping.assignable(t.DYN, rng)
            return (t.DYN, t.DYN) if two else (t.DYN,)
        raise self.error(
            node.range,
            f"expression of type '{_format(rng)}' cannot be range of a comprehension "
            "(must be list, map, or dynamic)",
        )

    def predicate(self, node: ast.Node, name: str, accumulator: t.Type) -> None:
        """A macro's predicate, checked as the step cel-go expands it into."""
        found = self.sub(self.types[id(node)])
        if name in ("_&&_", "_||_"):
            if not self.mapping.assignable(found, t.BOOL):
                raise self.error(node, f"expected type 'bool' but found '{_format(found)}'")
            return
        self.resolve(node, "_?_:_", (found, accumulator, accumulator), member=False, record=False)

    def c_Comprehension(self, node: ast.Comprehension) -> t.Type:
        rng = self.check(node.range)
        variables = self.range_vars(node, rng)
        self.scopes.append(dict(zip(node.vars, variables, strict=True)))
        try:
            for arg in node.args:
                self.check(arg)
        finally:
            self.scopes.pop()
        kind = node.kind
        if kind in ("all", "exists"):
            self.predicate(node.args[0], "_&&_" if kind == "all" else "_||_", t.BOOL)
            return t.BOOL
        if kind == "exists_one":
            self.predicate(node.args[0], "_?_:_", t.INT)
            return t.BOOL
        if kind == "filter":
            result = t.list_of(variables[0])
            self.predicate(node.args[0], "_?_:_", result)
            return result
        transform = self.sub(self.types[id(node.args[-1])])
        if kind == "transformMap":
            result = t.map_of(variables[0], transform)
        else:
            result = t.list_of(transform)
        if len(node.args) == 2:
            self.predicate(node.args[0], "_?_:_", result)
        return result

    def c_Bind(self, node: ast.Bind) -> t.Type:
        init = self.check(node.init)
        self.scopes.append({node.var: init})
        try:
            return self.check(node.body)
        finally:
            self.scopes.pop()

    def c_OptMap(self, node: ast.OptMap) -> t.Type:
        target = self.check(node.target)
        self.resolve(node, "hasValue", (target,), member=True, record=False)
        inner = self.sub(target)
        value = inner.params[0] if inner.is_optional else t.DYN
        self.scopes.append({node.var: value})
        try:
            body = self.check(node.body)
        finally:
            self.scopes.pop()
        if not node.flat:
            return t.optional_of(body)
        optional = t.optional_of(t.fresh())
        return self.resolve(node, "_?_:_", (t.BOOL, body, optional), member=False, record=False)


#: What each format clause accepts (by kind), and what upstream says otherwise.
_FORMAT_CLAUSES: dict[str, tuple[str, ...]] = {
    "s": (
        "list",
        "map",
        "int",
        "uint",
        "double",
        "bool",
        "string",
        "timestamp",
        "bytes",
        "duration",
        "type",
        "null",
    ),
    "d": ("int", "uint"),
    "f": ("double", "string"),
    "e": ("double", "string"),
    "b": ("int", "uint", "bool"),
    "x": ("int", "uint", "string", "bytes"),
    "X": ("int", "uint", "string", "bytes"),
    "o": ("int", "uint"),
}
_FORMAT_ERRORS = {
    "s": "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, "
    "types, durations, and timestamps",
    "d": "decimal clause can only be used on integers",
    "f": "fixed-point clause can only be used on doubles",
    "e": "scientific clause can only be used on doubles",
    "b": "only integers and bools can be formatted as binary",
    "x": "only integers, byte buffers, and strings can be formatted as hex",
    "X": "only integers, byte buffers, and strings can be formatted as hex",
    "o": "octal clause can only be used on integers",
}


def _instantiate(x: t.Type, fresh: dict[str, t.Type]) -> t.Type:
    if x.kind == "param":
        return fresh.get(x.name, x)
    if x.params:
        return t.Type(x.kind, x.name, tuple(_instantiate(p, fresh) for p in x.params))
    return x


def _named_type(name: str) -> t.Type:
    return {
        "int": t.INT,
        "uint": t.UINT,
        "double": t.DOUBLE,
        "bool": t.BOOL,
        "string": t.STRING,
        "bytes": t.BYTES,
        "list": t.list_of(t.DYN),
        "map": t.map_of(t.DYN, t.DYN),
        "null_type": t.NULL,
        "type": t.Type("type", "type"),
    }.get(name, t.DYN)


def _children(node: ast.Node) -> list[ast.Node]:
    if isinstance(node, ast.Comprehension):
        return [node.range, *node.args]
    if isinstance(node, ast.Has):
        return [node.select.operand]
    return analysis.children(node)


__all__ = ["Checked", "Declarations", "check", "device_fields"]
