"""Structural helpers over the expression tree: call names and children.

Shared by the checker, the cost estimator and the code generator, which all
need to see ``strings.quote(x)`` as one namespaced function rather than a
member call on a variable named ``strings``.
"""

from __future__ import annotations

from . import ast


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
