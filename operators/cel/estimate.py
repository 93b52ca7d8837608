"""Worst-case cost of one evaluation, computed as upstream computes it.

New or changed selectors are refused when this exceeds the 1,000,000 limit, so
the number must be upstream's: cel-go's static estimator (``checker/cost.go``)
with the Kubernetes library's call estimates, the lists extension's
estimators and the DRA size bounds of ``k8s.io/dynamic-resource-allocation``
(a driver name of at most 63 characters, 32 map entries per level, domains of
63 and ids of 32 characters, attribute values of at most 64 characters or
elements). It works on the checked tree: the types say which overloads a call
may take (the estimate covers all of them) and which selections cost a step,
and macros are costed as the comprehensions cel-go expands them into. Sizes
are ranges, carried through ``cel.bind``, concatenation and macros; an
unknown size is 2**64-1, and every sum and product saturates there, as in Go.

Besides the total, the estimate of each node's own cost is kept (``Estimate.own``):
the code generator charges it at run time for comparisons bounded by a literal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from . import analysis, ast
from . import types as t
from .checker import Checked

MAX: Final = 2**64 - 1
STRING_FACTOR: Final = 0.1
REGEX_FACTOR: Final = 0.25
LIST_CREATE: Final = 10
MAP_CREATE: Final = 30

Size = tuple[int, int]
UNKNOWN: Final[Size] = (0, MAX)

#: DRA's bounds (k8s.io/api resource/v1).
MAX_MAP_ENTRIES: Final = 32
MAX_DRIVER: Final = 63
MAX_DOMAIN: Final = 63
MAX_ID: Final = 32
MAX_ATTRIBUTE: Final = 64


def _add(a: int, b: int) -> int:
    return min(a + b, MAX)


def _mul(a: int, b: int) -> int:
    return min(a * b, MAX)


def _factor(x: int, f: float) -> int:
    """cel-go's multiplyByCostFactor: rounded up, saturating."""
    if x > 0 and f > 0 and x > MAX / f:
        return MAX
    value = math.ceil(x * f)
    return MAX if value >= 2**64 else value


def _size_factor(size: Size, f: float) -> Size:
    return (_factor(size[0], f), _factor(size[1], f))


def _union(a: Size, b: Size) -> Size:
    return (min(a[0], b[0]), max(a[1], b[1]))


@dataclass(frozen=True, slots=True)
class _Decl:
    """One level of the declared device: a field map or a key and element, and a bound."""

    max: int
    fields: tuple[tuple[str, _Decl], ...] = ()
    key: _Decl | None = None
    element: _Decl | None = None


_ATTRIBUTE: Final = _Decl(MAX_ATTRIBUTE)
_QUANTITY: Final = _Decl(0)
_DOMAIN: Final = _Decl(MAX_DOMAIN)
_ID: Final = _Decl(MAX_ID)
_DEVICE: Final = _Decl(
    0,
    fields=(
        ("driver", _Decl(MAX_DRIVER)),
        ("allowMultipleAllocations", _Decl(1)),
        (
            "attributes",
            _Decl(
                MAX_MAP_ENTRIES,
                key=_DOMAIN,
                element=_Decl(MAX_MAP_ENTRIES, key=_ID, element=_ATTRIBUTE),
            ),
        ),
        (
            "capacity",
            _Decl(
                MAX_MAP_ENTRIES,
                key=_DOMAIN,
                element=_Decl(MAX_MAP_ENTRIES, key=_ID, element=_QUANTITY),
            ),
        ),
    ),
)


def device_size(path: tuple[str, ...]) -> Size | None:
    """DRA's size estimator: the bound of what ``path`` reaches from ``device``."""
    if not path or path[0] != "device":
        return None
    node = _DEVICE
    for name in path[1:]:
        following: _Decl | None
        if name in ("@items", "@values"):
            following = node.element
        elif name == "@keys":
            following = node.key
        else:
            following = dict(node.fields).get(name)
            if following is None and node.element is _ATTRIBUTE:
                following = _ATTRIBUTE
        if following is None:
            return None
        node = following
    return (0, node.max)


@dataclass(frozen=True, slots=True)
class _Entry:
    """The sizes of a container's keys (or indexes) and values."""

    kind: str  # "list" or "map"
    key: Size
    value: Size

    def union(self, other: _Entry | None) -> _Entry | None:
        if other is None:
            return None
        return _Entry(self.kind, _union(self.key, other.key), _union(self.value, other.value))


@dataclass
class _Local:
    path: tuple[str, ...] | None
    size: Size | None
    entry: _Entry | None


@dataclass(frozen=True)
class Estimate:
    cost: int
    own: dict[int, int] = field(default_factory=dict)


def estimate(tree: ast.Node, checked: Checked) -> Estimate:
    """Upstream's worst-case cost of one evaluation of a checked selector."""
    coster = _Coster(checked)
    return Estimate(coster.cost(tree), coster.own)


def estimated_cost(tree: ast.Node, checked: Checked) -> int:
    return estimate(tree, checked).cost


class _Coster:
    def __init__(self, checked: Checked) -> None:
        self.checked = checked
        self.paths: dict[int, tuple[str, ...]] = {}
        self.sizes: dict[int, Size] = {}
        self.entries: dict[int, _Entry] = {}
        self.locals: dict[str, list[_Local]] = {}
        self.own: dict[int, int] = {}

    # --- sizes and paths ---------------------------------------------------------------
    def type_of(self, node: ast.Node) -> t.Type:
        return self.checked.type_of(node)

    def local(self, name: str) -> _Local | None:
        stack = self.locals.get(name)
        return stack[-1] if stack else None

    def push(self, name: str, value: _Local) -> None:
        self.locals.setdefault(name, []).append(value)

    def pop(self, name: str) -> None:
        self.locals[name].pop()

    def path(self, node: ast.Node) -> tuple[str, ...]:
        if isinstance(node, ast.Ident) and not node.root:
            found = self.local(node.name)
            if found is not None:
                return found.path or ()
        return self.paths.get(id(node), ())

    def size(self, node: ast.Node) -> Size | None:
        """cel-go's computeSize."""
        known = self.sizes.get(id(node))
        if known is not None:
            return known
        literal = _literal_size(node)
        if literal is not None:
            return literal
        bound = device_size(self.path(node))
        if bound is not None:
            self.sizes[id(node)] = bound
            return bound
        if t.is_scalar(self.type_of(node)):
            return (1, 1)
        if isinstance(node, ast.Ident) and not node.root:
            found = self.local(node.name)
            if found is not None and found.size is not None:
                return found.size
        return None

    def size_or_unknown(self, node: ast.Node) -> Size:
        found = self.size(node)
        return found if found is not None else UNKNOWN

    def entry(self, node: ast.Node) -> _Entry | None:
        known = self.entries.get(id(node))
        if known is not None:
            return known
        if isinstance(node, ast.Ident) and not node.root:
            found = self.local(node.name)
            if found is not None:
                return found.entry
        return None

    # --- the walk ------------------------------------------------------------------------
    def cost(self, node: ast.Node) -> int:
        method = getattr(self, "k_" + type(node).__name__)
        result: int = method(node)
        return result

    def k_Lit(self, node: ast.Lit) -> int:
        return 0

    def k_StructLit(self, node: ast.StructLit) -> int:
        return _add(40, sum(self.cost(v) for _, v in node.fields))

    def k_Ident(self, node: ast.Ident) -> int:
        found = None if node.root else self.local(node.name)
        if found is None:
            self.paths[id(node)] = (node.name,)
        return 1

    def k_Select(self, node: ast.Select) -> int:
        operand = self.cost(node.operand)
        if node.optional:
            # ``_?._(operand, "field")``: a call.
            self.own[id(node)] = 1
            return _add(operand, 1)
        cost = operand
        if self.type_of(node.operand).kind in ("map", "struct", "param"):
            cost = _add(cost, 1)
        self.paths[id(node)] = (*self.path(node.operand), node.field)
        return cost

    def k_Has(self, node: ast.Has) -> int:
        # Kubernetes sets PresenceTestHasCost(false): the test itself is free.
        return self.cost(node.select.operand)

    def k_Index(self, node: ast.Index) -> int:
        operand = self.cost(node.operand)
        index = self.cost(node.index)
        overloads = self.checked.overloads.get(id(node), ())
        result: Size | None = None
        for overload in overloads:
            if overload in ("index_list", "index_map"):
                found = self.entry(node.operand)
                result = found.value if found is not None else None
                step = "@items" if overload == "index_list" else "@values"
                self.paths[id(node)] = (*self.path(node.operand), step)
            if result is None:
                result = self.size(node)
        if result is not None:
            self.sizes[id(node)] = result
        self.own[id(node)] = 1
        return _add(_add(operand, index), 1)

    def k_Unary(self, node: ast.Unary) -> int:
        self.own[id(node)] = 1
        return _add(self.cost(node.operand), 1)

    def k_Binary(self, node: ast.Binary) -> int:
        costs = [self.cost(node.left), self.cost(node.right)]
        return self.call(node, None, [node.left, node.right], costs)

    def k_And(self, node: ast.And) -> int:
        return _add(self.cost(node.left), self.cost(node.right))

    k_Or = k_And

    def k_Cond(self, node: ast.Cond) -> int:
        cond, then, otherwise = (self.cost(x) for x in (node.cond, node.then, node.otherwise))
        self.sizes[id(node)] = _union(
            self.size_or_unknown(node.then), self.size_or_unknown(node.otherwise)
        )
        then_entry, else_entry = self.entry(node.then), self.entry(node.otherwise)
        if then_entry is not None and else_entry is not None:
            joined = then_entry.union(else_entry)
            if joined is not None:
                self.entries[id(node)] = joined
        return _add(cond, max(then, otherwise))

    def k_ListLit(self, node: ast.ListLit) -> int:
        total = 0
        item: Size = (0, 0) if not node.elements else (MAX, 0)
        for element, _ in node.elements:
            total = _add(total, self.cost(element))
            item = _union(item, self.size_or_unknown(element))
        self.entries[id(node)] = _Entry("list", (1, 1), item)
        return _add(total, LIST_CREATE)

    def k_MapLit(self, node: ast.MapLit) -> int:
        total = 0
        empty = not node.entries
        key: Size = (0, 0) if empty else (MAX, 0)
        value: Size = (0, 0) if empty else (MAX, 0)
        for k, v, _ in node.entries:
            total = _add(_add(total, self.cost(k)), self.cost(v))
            key = _union(key, self.size_or_unknown(k))
            value = _union(value, self.size_or_unknown(v))
        self.entries[id(node)] = _Entry("map", key, value)
        return _add(total, MAP_CREATE)

    def k_Bind(self, node: ast.Bind) -> int:
        # cel.bind is a comprehension over [] (10) whose accumulator is the binding.
        init = self.cost(node.init)
        self.push(
            node.var, _Local(self.path(node.init), self.size(node.init), self.entry(node.init))
        )
        try:
            body = self.cost(node.body)
        finally:
            self.pop(node.var)
        size = self.size(node.body)
        if size is not None:
            self.sizes[id(node)] = size
        entry = self.entry(node.body)
        if entry is not None:
            self.entries[id(node)] = entry
        return _add(_add(LIST_CREATE, init), body)

    def k_OptMap(self, node: ast.OptMap) -> int:
        # target.hasValue() ? optional.of(cel.bind(v, target.value(), body)) : optional.none()
        # (optFlatMap without optional.of): the target appears twice in the expansion.
        target = self.cost(node.target)
        self.push(node.var, _Local(None, None, None))
        try:
            body = self.cost(node.body)
        finally:
            self.pop(node.var)
        inner = _add(_add(_add(LIST_CREATE, _add(target, 1)), body), 0 if node.flat else 1)
        return _add(_add(target, 1), max(inner, 1))

    def k_Comprehension(self, node: ast.Comprehension) -> int:
        rng = self.cost(node.range)
        kind = node.kind
        accu_init = {"map": LIST_CREATE, "filter": LIST_CREATE, "transformList": LIST_CREATE}.get(
            kind, MAP_CREATE if kind == "transformMap" else 0
        )
        self.push_iteration(node)
        try:
            args = [self.cost(a) for a in node.args]
            # What the step appends ([t], or [x] for filter): the result's element size.
            appended: ast.Node | None = None
            if kind == "filter":
                appended = ast.Ident(node.vars[0])
            elif kind in ("map", "transformList"):
                appended = node.args[-1]
            element = self.size_or_unknown(appended) if appended is not None else None
        finally:
            for name in node.vars:
                self.pop(name)
        # Loop condition + step of cel-go's expansion, around the macro's arguments.
        if kind == "all":
            per = _add(2, _add(1, args[0]))
        elif kind == "exists":
            per = _add(3, _add(1, args[0]))
        elif kind == "exists_one":
            per = _add(args[0], 2)
        elif kind == "filter":
            per = _add(args[0], 13)
        else:
            transform = args[-1]
            step = _add(3 if kind == "transformMap" else 12, transform)
            per = _add(args[0], max(step, 1)) if len(args) == 2 else step
        result = 2 if kind == "exists_one" else 1
        count = self.size_or_unknown(node.range)
        loop = _mul(count[1], per)
        if kind in ("all", "exists", "exists_one"):
            self.sizes[id(node)] = (1, 1)
        else:
            self.sizes[id(node)] = count
        if element is not None:
            # cel-go takes the step's entry size: the empty accumulator's joined with [t].
            self.entries[id(node)] = _Entry("list", (1, 1), _union((0, 0), element))
        return _add(_add(_add(_add(rng, accu_init), result), loop), 0)

    def push_iteration(self, node: ast.Comprehension) -> None:
        """The iteration variables' paths and sizes (cel-go's pushIterSingle/Key/Value)."""
        rng = node.range
        entry = self.entry(rng)
        path = self.path(rng)
        container = entry.kind if entry is not None else self.type_of(rng).kind
        if len(node.vars) == 1:
            if container == "list":
                size, step = (entry.value if entry else None), "@items"
            else:
                size, step = (entry.key if entry else None), "@keys"
            self.push(node.vars[0], _Local((*path, step), size, None))
            return
        key_step = "@indices" if container == "list" else "@keys"
        value_step = "@items" if container == "list" else "@values"
        self.push(node.vars[0], _Local((*path, key_step), entry.key if entry else None, None))
        self.push(node.vars[1], _Local((*path, value_step), entry.value if entry else None, None))

    # --- calls ---------------------------------------------------------------------------
    def k_Call(self, node: ast.Call) -> int:
        name = analysis.call_name(node)
        overloads = self.checked.overloads.get(id(node), ())
        namespaced = node.target is not None and overloads and "." in name and name in _NAMESPACED
        if node.target is None or namespaced:
            target = None
        else:
            target = node.target
            name = node.name
        if name == "dyn" and len(node.args) == 1:
            cost = _add(1, self.cost(node.args[0]))
            size = self.size(node.args[0])
            if size is not None:
                self.sizes[id(node)] = size
            return cost
        args = list(node.args)
        arg_costs = [self.cost(a) for a in args]
        total = 0
        if target is not None:
            total = self.cost(target)
        return _add(total, self.call(node, target, args, arg_costs, name))

    def call(
        self,
        node: ast.Node,
        target: ast.Node | None,
        args: list[ast.Node],
        arg_costs: list[int],
        name: str = "",
    ) -> int:
        """cel-go's costCall over every overload the checker found (the dearest counts)."""
        argsum = 0
        for c in arg_costs:
            argsum = _add(argsum, c)
        overloads = self.checked.overloads.get(id(node), ())
        if not overloads:
            return 0
        best = 0
        result: Size | None = None
        for overload in overloads:
            own, size = self.function(node, name, overload, target, args, arg_costs)
            best = max(best, own)
            if size is not None:
                result = size if result is None else _union(result, size)
        if result is None:
            result = self.size(node)
        if result is not None:
            self.sizes[id(node)] = result
        self.own[id(node)] = best
        return _add(best, argsum)

    def function(
        self,
        node: ast.Node,
        name: str,
        overload: str,
        target: ast.Node | None,
        args: list[ast.Node],
        arg_costs: list[int],
    ) -> tuple[int, Size | None]:
        """(cost without the arguments, result size) of one overload."""
        listed = _lists_extension(self, overload, target, args)
        if listed is not None:
            return listed
        kubernetes = _kubernetes(self, name, overload, target, args)
        if kubernetes is not None:
            return kubernetes
        return _cel_default(self, node, overload, target, args, arg_costs)


_NAMESPACED: Final = frozenset(
    {
        "optional.of",
        "optional.none",
        "optional.ofNonZeroValue",
        "sets.contains",
        "sets.equivalent",
        "sets.intersects",
        "lists.range",
        "strings.quote",
        "ip.isCanonical",
    }
)


def _literal_size(node: ast.Node) -> Size | None:
    if isinstance(node, ast.Lit):
        value = node.value
        if isinstance(value, (str, bytes)):
            return (len(value), len(value))
        return (1, 1)
    if isinstance(node, ast.ListLit):
        return (len(node.elements), len(node.elements))
    if isinstance(node, ast.MapLit):
        return (len(node.entries), len(node.entries))
    return None


def _literal_uint(node: ast.Node, default: int) -> int:
    """The lists extension's nodeAsUintValue: a literal int (negative is 0), else the default."""
    if isinstance(node, ast.Lit) and type(node.value) is int:
        return max(node.value, 0)
    return default


def _allocating(factor: float, size: Size) -> tuple[int, Size]:
    return _add(_add(_factor(size[1], factor), 1), LIST_CREATE), size


def _lists_extension(
    c: _Coster, overload: str, target: ast.Node | None, args: list[ast.Node]
) -> tuple[int, Size | None] | None:
    """The lists and sets extensions' estimators (they come first, by overload id)."""
    if overload == "lists_range" and target is None and len(args) == 1:
        n = _literal_uint(args[0], MAX)
        return _allocating(1, (n, n))
    if overload.startswith("list_sets_") and target is None and len(args) == 2:
        # The sets extension: the product of the sizes (twice for equivalent), plus the call.
        left, right = c.size_or_unknown(args[0]), c.size_or_unknown(args[1])
        factor = 2.0 if overload == "list_sets_equivalent_list" else 1.0
        return _add(_factor(_mul(left[1], right[1]), factor), 1), None
    if target is None:
        return None
    size = c.size_or_unknown(target)
    if overload == "list_slice" and len(args) == 2:
        start = _literal_uint(args[0], 0)
        end = _literal_uint(args[1], size[1])
        n = (end - start) % 2**64
        return _allocating(1, (n, n))
    if overload == "list_reverse" and not args:
        return _allocating(1, size)
    if overload in ("list_flatten", "list_flatten_int") and len(args) <= 1:
        depth = _literal_uint(args[0], MAX) if args else 1
        return _allocating(float(depth), size)
    if overload == "list_distinct" and not args:
        squared = (_mul(size[0], size[0]), _mul(size[1], size[1]))
        return _allocating(2.0, squared)
    if overload.endswith("_sort") and overload.startswith("list_") and not args:
        squared = (_mul(size[0], size[0]), _mul(size[1], size[1]))
        factor = 2.0 + (STRING_FACTOR if overload in ("list_string_sort", "list_bytes_sort") else 0)
        return _allocating(factor, squared)
    return None


def _element_size(c: _Coster, target: ast.Node) -> Size | None:
    """The Kubernetes library's listElementNode: the bound of the target's elements."""
    return device_size((*c.path(target), "@items"))


def _kubernetes(
    c: _Coster, name: str, overload: str, target: ast.Node | None, args: list[ast.Node]
) -> tuple[int, Size | None] | None:
    """The Kubernetes library's EstimateCallCost (by function name)."""
    if name in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf", "includes"):
        if target is None:
            return None
        size = c.size_or_unknown(target)
        params = c.type_of(target).params
        if params:
            element = 1
            if params[0].kind in ("string", "bytes"):
                found = _element_size(c, target) or UNKNOWN
                element = _add(1, _factor(found[1], STRING_FACTOR))
            return _mul(size[1], element), None
        if name == "includes":
            return size[1], None
        return _factor(size[1], STRING_FACTOR), None
    if name in ("lowerAscii", "upperAscii", "substring", "trim") and target is not None:
        size = c.size_or_unknown(target)
        return _factor(size[1], STRING_FACTOR), size
    if name == "replace" and target is not None and len(args) >= 2:
        return _replace(c, target, args)
    if name == "split" and target is not None:
        size = c.size_or_unknown(target)
        limit = size[1]
        if len(args) > 1 and isinstance(args[1], ast.Lit) and type(args[1].value) is int:
            limit = args[1].value % 2**64
        return _factor(size[1], 2 * STRING_FACTOR), (0, limit)
    if name == "join" and target is not None:
        return _join(c, target, args)
    if name in ("find", "findAll") and target is not None and args:
        size = c.size_or_unknown(target)
        text = _factor(_add(size[1], 1), STRING_FACTOR)
        pattern = _factor(c.size_or_unknown(args[0])[1], REGEX_FACTOR)
        return _mul(text, pattern), (0, size[1])
    if name in ("cidr", "isIP", "isCIDR", "quantity", "isQuantity", "semver", "isSemver"):
        if args:
            return _factor(c.size_or_unknown(args[0])[1], STRING_FACTOR), None
        return None
    if name == "ip":
        if overload == "cidr_ip":
            return 1, None
        if args:
            return _factor(c.size_or_unknown(args[0])[1], STRING_FACTOR), None
        return None
    if name == "ip.isCanonical" and args:
        return _factor(c.size_or_unknown(args[0])[1], 2 * STRING_FACTOR), None
    if name in _KUBERNETES_UNIT:
        return 1, None
    if name in ("containsIP", "containsCIDR") and args:
        cost = _factor(32, STRING_FACTOR)
        if name == "containsCIDR":
            cost += _factor(16, STRING_FACTOR) + 1
        if overload.endswith("_string"):
            cost = _add(cost, _factor(c.size_or_unknown(args[0])[1], STRING_FACTOR))
        return cost, None
    if overload == "equals" and len(args) == 2:
        left, right = c.type_of(args[0]), c.type_of(args[1])
        if left == right and left in (t.IP, t.CIDR, t.QUANTITY, t.SEMVER):
            return 1, None
    return None


_KUBERNETES_UNIT: Final = frozenset(
    {
        "masked",
        "prefixLength",
        "family",
        "isUnspecified",
        "isLoopback",
        "isLinkLocalMulticast",
        "isLinkLocalUnicast",
        "isGlobalUnicast",
        "sign",
        "asInteger",
        "isInteger",
        "asApproximateFloat",
        "isGreaterThan",
        "isLessThan",
        "compareTo",
        "add",
        "sub",
        "major",
        "minor",
        "patch",
    }
)


def _replace(c: _Coster, target: ast.Node, args: list[ast.Node]) -> tuple[int, Size | None]:
    size = c.size_or_unknown(target)
    old = c.size_or_unknown(args[0])
    new = c.size_or_unknown(args[1])
    if old[0] == 0:
        count_max = size[1] + 1 if size[1] < MAX else size[1]
        retained_max = size[1]
    elif new[1] <= old[0]:
        count_max, retained_max = 0, size[1]
    else:
        count_max, retained_max = math.ceil(size[1] / old[0]), 0
    if old[1] == 0:
        count_min = size[0] + 1 if size[0] < MAX else size[0]
        retained_min = size[0]
    elif old[1] <= new[0]:
        count_min, retained_min = 0, size[0]
    else:
        count_min, retained_min = math.ceil(size[0] / old[1]), 0
    result = (
        _add(_mul(count_min, new[0]), retained_min),
        _add(_mul(count_max, new[1]), retained_max),
    )
    return _factor(size[1], 2 * STRING_FACTOR), result


def _join(c: _Coster, target: ast.Node, args: list[ast.Node]) -> tuple[int, Size | None]:
    items = c.size_or_unknown(target)
    size: Size = (0, 0)
    if c.type_of(target).params:
        element = _element_size(c, target) or UNKNOWN
        size = (_mul(items[0], element[0]), _mul(items[1], element[1]))
    if args:
        separator = c.size_or_unknown(args[0])
        gaps = (max(items[0] - 1, 0), max(items[1] - 1, 0))
        size = (
            _add(size[0], _mul(separator[0], gaps[0])),
            _add(size[1], _mul(separator[1], gaps[1])),
        )
    return _factor(size[1], STRING_FACTOR), size


_SIZED_COMPARISONS: Final = frozenset(
    {
        f"{op}_{kind}"
        for op in ("less", "greater", "less_equals", "greater_equals")
        for kind in ("string", "bytes")
    }
    | {"equals", "not_equals"}
)


def _cel_default(
    c: _Coster,
    node: ast.Node,
    overload: str,
    target: ast.Node | None,
    args: list[ast.Node],
    arg_costs: list[int],
) -> tuple[int, Size | None]:
    """cel-go's own estimates (checker/cost.go functionCost), else a flat 1."""
    if overload == "string_format" and target is not None:
        return _factor(c.size_or_unknown(target)[1], STRING_FACTOR), None
    if overload in ("string_to_bytes", "bytes_to_string", "strings_quote") and len(args) == 1:
        size = c.size_or_unknown(args[0])
        result = {
            "string_to_bytes": (size[0], _mul(size[1], 4)),
            "bytes_to_string": (size[0] // 4, size[1]),
            "strings_quote": (_add(size[0], 2), _add(_mul(size[1], 2), 2)),
        }[overload]
        return _factor(size[1], STRING_FACTOR), result
    if overload in ("starts_with_string", "ends_with_string") and len(args) == 1:
        return _factor(c.size_or_unknown(args[0])[1], STRING_FACTOR), None
    if overload == "in_list" and len(args) == 2:
        return c.size_or_unknown(args[1])[1], None
    if overload in ("matches", "matches_string"):
        if overload == "matches_string" and target is not None and len(args) == 1:
            text, pattern = target, args[0]
        elif overload == "matches" and target is None and len(args) == 2:
            text, pattern = args[0], args[1]
        else:
            return 1, None
        text_cost = _factor(_add(c.size_or_unknown(text)[1], 1), STRING_FACTOR)
        return _mul(text_cost, _factor(c.size_or_unknown(pattern)[1], REGEX_FACTOR)), None
    if overload == "contains_string" and target is not None and len(args) == 1:
        scanned = _factor(c.size_or_unknown(target)[1], STRING_FACTOR)
        return _mul(scanned, _factor(c.size_or_unknown(args[0])[1], STRING_FACTOR)), None
    if overload == "conditional":
        raise AssertionError("conditionals are costed by k_Cond")
    if overload in ("add_string", "add_bytes", "add_list") and len(args) == 2:
        left, right = c.size_or_unknown(args[0]), c.size_or_unknown(args[1])
        result = (_add(left[0], right[0]), _add(left[1], right[1]))
        left_entry, right_entry = c.entry(args[0]), c.entry(args[1])
        if left_entry is not None:
            joined = left_entry.union(right_entry)
            if joined is not None:
                c.entries[id(node)] = joined
        if overload == "add_list":
            return 1, result
        return _factor(result[1], STRING_FACTOR), result
    if overload in _SIZED_COMPARISONS and len(args) == 2:
        smallest = min(c.size_or_unknown(args[0])[1], c.size_or_unknown(args[1])[1])
        return _factor(smallest, STRING_FACTOR), None
    return 1, None


__all__ = ["MAX", "Estimate", "device_size", "estimate", "estimated_cost"]
