"""Nodes and node selectors, with the node-affinity semantics of core/v1.

Slices and devices say where they are reachable through a node name, a node
selector or "all nodes"; allocation results carry a node selector that pins
the claim. Only what the allocator needs is modelled here.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from operators.allocator.objects import as_dict

NODE_NAME_FIELD = "metadata.name"
# What a node declares in status.declaredFeatures when its kubelet can skip node operations.
OPTIONAL_NODE_OPERATIONS = "DRAOptionalNodeOperations"
_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}


class NodeSelectorError(ValueError):
    """A node selector that cannot be evaluated."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the allocator needs to know about a node: its name, labels and the features its
    kubelet declares (``status.declaredFeatures``)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    # Only a device that skips node operations asks (DRAOptionalNodeOperations).
    declared_features: frozenset[str] = frozenset()
    # Hashable identity for caches that depend on name and labels (computed once:
    # find_node asks for it per node and per pod). Declared features are left out: which
    # slices and pools a node reaches does not depend on them.
    key: tuple[str, tuple[tuple[str, str], ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (self.name, tuple(sorted(self.labels.items()))))

    @classmethod
    def from_object(cls, node: Any) -> NodeInfo:
        """From a Node dict (``{"metadata": {...}}``), a model, or a NodeInfo."""
        if isinstance(node, NodeInfo):
            return node
        if isinstance(node, str):
            return cls(name=node)
        data = as_dict(node)
        meta = data.get("metadata") or {}
        features = (data.get("status") or {}).get("declaredFeatures") or ()
        return cls(
            name=meta.get("name", ""),
            labels=dict(meta.get("labels") or {}),
            declared_features=frozenset(str(f) for f in features),
        )


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement (a label or field expression)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, value: str | None) -> bool:
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if value is None:
            return False
        try:
            actual, limit = int(value), int(self.values[0])
        except ValueError:
            return False
        return actual > limit if op == "Gt" else actual < limit

    def same_as(self, other: Requirement) -> bool:
        """Equal key and operator and the same set of values (order ignored)."""
        return (
            self.key == other.key
            and self.operator == other.operator
            and set(self.values) == set(other.values)
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        return out


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements that must all hold (an empty term matches no node)."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()

    def matches(self, node: NodeInfo) -> bool:
        if not self.match_expressions and not self.match_fields:
            return False
        for req in self.match_expressions:
            if not req.matches(node.labels.get(req.key)):
                return False
        for req in self.match_fields:
            value = node.name if req.key == NODE_NAME_FIELD else None
            if not req.matches(value):
                return False
        return True

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.match_expressions:
            out["matchExpressions"] = [r.to_dict() for r in self.match_expressions]
        if self.match_fields:
            out["matchFields"] = [r.to_dict() for r in self.match_fields]
        return out


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """Terms of which at least one must match (core/v1 NodeSelector)."""

    terms: tuple[NodeSelectorTerm, ...]

    def matches(self, node: NodeInfo) -> bool:
        return any(term.matches(node) for term in self.terms)

    def to_dict(self) -> dict[str, Any]:
        return {"nodeSelectorTerms": [t.to_dict() for t in self.terms]}

    @classmethod
    def for_node(cls, node_name: str) -> NodeSelector:
        """The selector that pins a claim to one node by name (one shared, immutable object
        per name: every allocation on a node-local device asks for it)."""
        return _pin_selector(node_name)

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> NodeSelector:
        """Parse and validate a NodeSelector dict; raises NodeSelectorError."""
        terms = []
        for term in data.get("nodeSelectorTerms") or ():
            exprs = tuple(
                _parse_requirement(r, field_key=False) for r in term.get("matchExpressions") or ()
            )
            flds = tuple(
                _parse_requirement(r, field_key=True) for r in term.get("matchFields") or ()
            )
            terms.append(NodeSelectorTerm(exprs, flds))
        return cls(tuple(terms))


def _parse_requirement(data: Mapping[str, Any], field_key: bool) -> Requirement:
    key = str(data.get("key", ""))
    op = str(data.get("operator", ""))
    values = tuple(str(v) for v in data.get("values") or ())
    if op not in _OPERATORS:
        raise NodeSelectorError(f"{op!r} is not a valid node selector operator")
    if field_key:
        if key != NODE_NAME_FIELD:
            raise NodeSelectorError(f"{key!r} is not a valid field selector key")
        if op not in ("In", "NotIn") or len(values) != 1:
            raise NodeSelectorError("field selector requirements need In or NotIn with one value")
    if op in ("In", "NotIn") and not values:
        raise NodeSelectorError(f"values must be non-empty for operator {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise NodeSelectorError(f"values must be empty for operator {op}")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise NodeSelectorError(f"operator {op} needs exactly one value")
        try:
            int(values[0])
        except ValueError as err:
            raise NodeSelectorError(f"operator {op} needs an integer value") from err
    return Requirement(key, op, values)


def merge_terms(selectors: Iterable[NodeSelector]) -> NodeSelector | None:
    """AND the single terms of several one-term selectors, without duplicates.

    Returns None when nothing restricts placement (the claim works anywhere).
    """
    exprs: list[Requirement] = []
    flds: list[Requirement] = []
    for selector in selectors:
        if not selector.terms:
            continue
        if len(selector.terms) > 1:
            raise NodeSelectorError(
                f"unsupported ResourceSlice.NodeSelector with {len(selector.terms)} terms"
            )
        term = selector.terms[0]
        for req in term.match_fields:
            if not any(req.same_as(r) for r in flds):
                flds.append(req)
        for req in term.match_expressions:
            if not any(req.same_as(r) for r in exprs):
                exprs.append(req)
    if not exprs and not flds:
        return None
    return NodeSelector((NodeSelectorTerm(tuple(exprs), tuple(flds)),))


@functools.lru_cache(maxsize=4096)
def _pin_selector(node_name: str) -> NodeSelector:
    req = Requirement(NODE_NAME_FIELD, "In", (node_name,))
    return NodeSelector((NodeSelectorTerm(match_fields=(req,)),))
