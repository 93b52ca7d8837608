"""Claim constraints: matchAttribute and distinctAttribute.

Both are checked device by device during the search and must be undone on
backtracking, so each keeps a small stack. Constraints are monotonic: once a
device is refused, adding more devices cannot help, which lets the search
prune early. distinctAttribute compares every device (one value per device),
not just the last device of each request as upstream's code does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from operators.allocator.compiled import AttributeValue, CompiledConstraint, CompiledDevice


def _as_set(attr: AttributeValue) -> tuple[str, frozenset[Any]] | None:
    if not attr.kind:
        return None
    return attr.kind, frozenset(attr.values)


@dataclass(slots=True)
class _Scope:
    requests: frozenset[str]

    def applies(self, request: str, parent: str | None) -> bool:
        if not self.requests:
            return True
        if parent is None:
            return request in self.requests
        return parent in self.requests or f"{parent}/{request}" in self.requests


@dataclass(slots=True)
class MatchAttribute:
    """All devices in scope share one value (or, with list attributes, one common element)."""

    scope: _Scope
    attribute: str
    lists: bool
    stack: list[Any] = field(default_factory=list)

    def add(self, request: str, parent: str | None, device: CompiledDevice) -> bool:
        if not self.scope.applies(request, parent):
            return True
        attr = device.lookup_attribute(self.attribute)
        if attr is None:
            return False
        if self.lists:
            current = _as_set(attr)
            if current is None:
                return False
            if self.stack:
                kind, values = self.stack[-1]
                if kind != current[0] or not (values & current[1]):
                    return False
                current = (kind, values & current[1])
            self.stack.append(current)
            return True
        if self.stack:
            ref: AttributeValue = self.stack[0]
            if not attr.kind or attr.is_list or ref.is_list or attr.kind != ref.kind:
                return False
            if attr.values != ref.values:
                return False
        self.stack.append(attr)
        return True

    def remove(self, request: str, parent: str | None, device: CompiledDevice) -> None:
        if self.scope.applies(request, parent):
            self.stack.pop()

    def rejects(self, device: CompiledDevice) -> bool:
        """Cheap early "no" once a reference value is fixed (scalar mode only).

        The caller has checked the scope. Refusing here is the same outcome as
        refusing in ``add``, only earlier: it spares the counter and capacity
        checks for devices that cannot match anyway.
        """
        if self.lists or not self.stack:
            return False
        attr = device.lookup_attribute(self.attribute)
        ref: AttributeValue = self.stack[0]
        return attr is None or attr.kind != ref.kind or attr.is_list or attr.values != ref.values

    def describe(self) -> str:
        return f'matchAttribute "{self.attribute}"'


@dataclass(slots=True)
class DistinctAttribute:
    """Devices in scope have pairwise different values (disjoint sets for lists)."""

    scope: _Scope
    attribute: str
    lists: bool
    stack: list[AttributeValue] = field(default_factory=list)

    def add(self, request: str, parent: str | None, device: CompiledDevice) -> bool:
        if not self.scope.applies(request, parent):
            return True
        attr = device.lookup_attribute(self.attribute)
        if attr is None:
            return False
        if self.lists:
            mine = _as_set(attr)
            if mine is None:
                return False
            for other in self.stack:
                theirs = _as_set(other)
                if theirs is not None and theirs[0] == mine[0] and theirs[1] & mine[1]:
                    return False
        else:
            for other in self.stack:
                if not attr.kind or attr.is_list:
                    return False
                if not other.is_list and other.kind == attr.kind and other.values == attr.values:
                    return False
        self.stack.append(attr)
        return True

    def remove(self, request: str, parent: str | None, device: CompiledDevice) -> None:
        if self.scope.applies(request, parent):
            self.stack.pop()

    def describe(self) -> str:
        return f'distinctAttribute "{self.attribute}"'


Constraint = MatchAttribute | DistinctAttribute


def build_constraint(spec: CompiledConstraint, lists: bool) -> Constraint | None:
    """The runtime checker for a constraint, or None for an unknown constraint type."""
    scope = _Scope(frozenset(spec.requests))
    if spec.match_attribute is not None:
        return MatchAttribute(scope, spec.match_attribute, lists)
    if spec.distinct_attribute is not None:
        return DistinctAttribute(scope, spec.distinct_attribute, lists)
    return None
