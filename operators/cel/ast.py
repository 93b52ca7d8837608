"""The small expression tree the translator works on.

The Lark tree from the parser mirrors grammar precedence levels (about ten
nodes per CEL operator); this tree has one node per CEL construct, with macros
already recognised, which keeps the code generator, the cost estimator and the
type checker short.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Node:
    pos: tuple[int, int] = field(default=(1, 1), compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Lit(Node):
    value: Any


@dataclass(frozen=True, slots=True)
class Ident(Node):
    name: str
    root: bool = False  # written with a leading dot (".name")


@dataclass(frozen=True, slots=True)
class Select(Node):
    operand: Node
    field: str
    optional: bool = False


@dataclass(frozen=True, slots=True)
class Index(Node):
    operand: Node
    index: Node
    optional: bool = False


@dataclass(frozen=True, slots=True)
class Call(Node):
    """A function call; ``target`` is the receiver of a method-style call."""

    name: str
    args: tuple[Node, ...]
    target: Node | None = None


@dataclass(frozen=True, slots=True)
class ListLit(Node):
    elements: tuple[tuple[Node, bool], ...]  # (element, is_optional)


@dataclass(frozen=True, slots=True)
class MapLit(Node):
    entries: tuple[tuple[Node, Node, bool], ...]  # (key, value, is_optional)


@dataclass(frozen=True, slots=True)
class StructLit(Node):
    type_name: str
    fields: tuple[tuple[str, Node], ...]


@dataclass(frozen=True, slots=True)
class Unary(Node):
    op: str  # "!" or "-"
    operand: Node


@dataclass(frozen=True, slots=True)
class Binary(Node):
    op: str  # + - * / % == != < <= > >= in
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class And(Node):
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Or(Node):
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Cond(Node):
    cond: Node
    then: Node
    otherwise: Node


@dataclass(frozen=True, slots=True)
class Has(Node):
    select: Select


@dataclass(frozen=True, slots=True)
class Comprehension(Node):
    """A macro over a range: all, exists, exists_one, map, filter, transform*."""

    kind: str
    range: Node
    vars: tuple[str, ...]  # one or two iteration variables
    args: tuple[Node, ...]  # predicate and/or transform


@dataclass(frozen=True, slots=True)
class Bind(Node):
    var: str
    init: Node
    body: Node


@dataclass(frozen=True, slots=True)
class OptMap(Node):
    """``opt.optMap(x, e)`` / ``opt.optFlatMap(x, e)``."""

    flat: bool
    target: Node
    var: str
    body: Node
