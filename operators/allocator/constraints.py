"""Claim constraints: matchAttribute and distinctAttribute.

Both are checked device by device during the search and must be undone on
backtracking, so each keeps a small stack. Constraints are monotonic: once a
device is refused, adding more devices cannot help, which lets the search
prune early. distinctAttribute compares every device (one value per device),
not just the last device of each request as upstream's code does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from operators.allocator.compiled import (
    AttributeValue,
    CompiledConstraint,
    CompiledDevice,
)

# Computes a derived attribute: (request, parent, attribute name, expression, device).
Derive = Callable[[str, str | None, str, str, CompiledDevice], AttributeValue]


@dataclass(frozen=True, slots=True)
class DerivedAttributes:
    """The derived attributes of a claim's requests (DRADerivedAttributes), for the
    constraints that compare them: for such a request the computed value stands in for
    a published attribute of that name, for the others nothing changes."""

    # (request, parent) -> attribute name -> CEL expression
    expressions: Mapping[tuple[str, str | None], Mapping[str, str]]
    derive: Derive

    def expression(self, request: str, parent: str | None, attribute: str) -> str | None:
        own = self.expressions.get((request, parent))
        return own.get(attribute) if own is not None else None

    def names(self) -> frozenset[str]:
        return frozenset(name for own in self.expressions.values() for name in own)


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
class _AttributeConstraint:
    """One constraint on an attribute of the devices that the requests in scope get.

    ``stack`` holds what each device in scope added, so backtracking pops it again.
    Subclasses say, in ``_entry``, whether a device's attribute is acceptable next to
    those already taken and what it adds to the stack.
    """

    scope: _Scope
    attribute: str
    lists: bool
    stack: list[Any] = field(default_factory=list)
    # Set only when some request of the claim derives this attribute.
    derived: DerivedAttributes | None = None

    kind: ClassVar[str]  # the API field, for messages

    def add(self, request: str, parent: str | None, device: CompiledDevice) -> bool:
        if not self.scope.applies(request, parent):
            return True
        derived = self.derived
        expression = (
            None if derived is None else derived.expression(request, parent, self.attribute)
        )
        if expression is None:
            attr = device.lookup_attribute(self.attribute)
        else:
            assert derived is not None
            attr = derived.derive(request, parent, self.attribute, expression, device)
        entry = None if attr is None else self._entry(attr)
        if entry is None:
            return False
        self.stack.append(entry)
        return True

    def derives(self, request: str, parent: str | None) -> bool:
        """Whether the request computes this attribute rather than reading it (then the
        published values, which ``rejects`` and ``pin`` look at, say nothing)."""
        derived = self.derived
        return derived is not None and (
            derived.expression(request, parent, self.attribute) is not None
        )

    def remove(self, request: str, parent: str | None, device: CompiledDevice) -> None:
        if self.scope.applies(request, parent):
            self.stack.pop()

    def describe(self) -> str:
        return f'{self.kind} "{self.attribute}"'

    def _entry(self, attr: AttributeValue) -> Any | None:
        """What the device adds to the stack, or None if it breaks the constraint."""
        raise NotImplementedError


@dataclass(slots=True)
class MatchAttribute(_AttributeConstraint):
    """All devices in scope share one value (or, with list attributes, one common element)."""

    kind: ClassVar[str] = "matchAttribute"

    def _entry(self, attr: AttributeValue) -> Any | None:
        if self.lists:
            # The stack top is what all devices so far have in common.
            current = _as_set(attr)
            if current is None or not self.stack:
                return current
            kind, values = self.stack[-1]
            if kind != current[0] or not (values & current[1]):
                return None
            return (kind, values & current[1])
        if self.stack:
            ref: AttributeValue = self.stack[0]
            if not attr.kind or attr.is_list or ref.is_list or attr.kind != ref.kind:
                return None
            if attr.values != ref.values:
                return None
        return attr

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

    def pin(self) -> tuple[str, tuple[str, tuple[Any, ...]]] | None:
        """(attribute, (kind, values)) a device needs to pass ``rejects``, once fixed.

        A slice whose ``scalar_values(attribute)`` lacks that value has no device
        that ``rejects`` lets through.
        """
        if self.lists or not self.stack:
            return None
        ref: AttributeValue = self.stack[0]
        return self.attribute, (ref.kind, ref.values)


@dataclass(slots=True)
class DistinctAttribute(_AttributeConstraint):
    """Devices in scope have pairwise different values (disjoint sets for lists)."""

    kind: ClassVar[str] = "distinctAttribute"

    def _entry(self, attr: AttributeValue) -> Any | None:
        if self.lists:
            mine = _as_set(attr)
            if mine is None:
                return None
            for other in self.stack:
                theirs = _as_set(other)
                if theirs is not None and theirs[0] == mine[0] and theirs[1] & mine[1]:
                    return None
        else:
            for other in self.stack:
                if not attr.kind or attr.is_list:
                    return None
                if not other.is_list and other.kind == attr.kind and other.values == attr.values:
                    return None
        return attr


Constraint = MatchAttribute | DistinctAttribute


def build_constraint(
    spec: CompiledConstraint, lists: bool, derived: DerivedAttributes | None = None
) -> Constraint | None:
    """The runtime checker for a constraint, or None for an unknown constraint type.
    ``derived``: the claim's derived attributes, if it has any."""
    scope = _Scope(frozenset(spec.requests))
    attribute = spec.match_attribute or spec.distinct_attribute
    if derived is not None and attribute not in derived.names():
        derived = None  # no request derives it: the published attribute, as without
    if spec.match_attribute is not None:
        return MatchAttribute(scope, spec.match_attribute, lists, derived=derived)
    if spec.distinct_attribute is not None:
        return DistinctAttribute(scope, spec.distinct_attribute, lists, derived=derived)
    return None


@dataclass(frozen=True, slots=True)
class AttributePin:
    """Only devices whose attribute has this one scalar value may be taken: a restriction a
    search applies besides the claims' own rules (a gang kept together by a device
    attribute, ``gang.py``). Like a matchAttribute constraint whose value is fixed from the
    start: a device without the attribute, or with a list or another typed value, is out.
    Requests with adminAccess are not held to it (they take no device from anyone)."""

    attribute: str  # fully qualified, as in matchAttribute
    value: tuple[str, tuple[Any, ...]]  # (kind, values), as CompiledSlice.scalar_values

    def admits(self, device: CompiledDevice) -> bool:
        attr = device.lookup_attribute(self.attribute)
        return attr is not None and not attr.is_list and (attr.kind, attr.values) == self.value

    def shown(self) -> str:
        """The value as a user wrote it (true, 3, nvl-0)."""
        return show_value(self.value)


def show_value(value: tuple[str, tuple[Any, ...]]) -> str:
    kind, values = value
    item = values[0] if values else ""
    if kind == "bool":
        return "true" if item else "false"
    return str(item)
