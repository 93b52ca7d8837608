"""CEL types as the static checker sees them, and the rules for assigning one to another.

The checker (``checker``) gives every node of an expression one of these; the
cost estimator and the code generator read them afterwards. The rules follow
CEL's reference checker: ``dyn`` (and ``google.protobuf.Any``) is assignable
both ways, type parameters are bound by unification, lists, maps and opaque
types (``optional_type``) compare their parameters, and the rest must be the
same type. Types are immutable values, so they can be shared and compared.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Type:
    """A CEL type: ``kind`` says which family, ``name`` and ``params`` the rest.

    Kinds: dyn, any, error, null, bool, int, uint, double, string, bytes,
    timestamp, duration, list, map, type, opaque (``optional_type`` and the
    Kubernetes library types), struct (``kubernetes.DRADevice``), param (a type
    parameter of an overload, or a free variable of the checker).
    """

    kind: str
    name: str = ""
    params: tuple[Type, ...] = ()

    def __str__(self) -> str:
        if self.kind == "list":
            return f"list({self.params[0]})"
        if self.kind == "map":
            return f"map({self.params[0]}, {self.params[1]})"
        if self.kind == "type":
            return f"type({self.params[0]})" if self.params else "type"
        if self.kind == "opaque" and self.params:
            return f"{self.name}({', '.join(str(p) for p in self.params)})"
        return self.name or self.kind

    @property
    def is_dyn(self) -> bool:
        """``dyn`` or ``google.protobuf.Any``: checked as anything (cel-go's isDyn)."""
        return self.kind in ("dyn", "any")

    @property
    def is_optional(self) -> bool:
        return self.kind == "opaque" and self.name == "optional_type"


def _primitive(kind: str) -> Type:
    return Type(kind, kind)


DYN: Final = Type("dyn", "dyn")
ANY: Final = Type("any", "google.protobuf.Any")
ERROR: Final = Type("error", "*error*")
NULL: Final = Type("null", "null_type")
BOOL: Final = _primitive("bool")
INT: Final = _primitive("int")
UINT: Final = _primitive("uint")
DOUBLE: Final = _primitive("double")
STRING: Final = _primitive("string")
BYTES: Final = _primitive("bytes")
TIMESTAMP: Final = Type("timestamp", "google.protobuf.Timestamp")
DURATION: Final = Type("duration", "google.protobuf.Duration")
QUANTITY: Final = Type("struct", "kubernetes.Quantity")
SEMVER: Final = Type("struct", "kubernetes.Semver")
IP: Final = Type("opaque", "net.IP")
CIDR: Final = Type("opaque", "net.CIDR")
DEVICE: Final = Type("struct", "kubernetes.DRADevice")
SCALARS: Final = (BOOL, INT, UINT, DOUBLE, STRING, BYTES, TIMESTAMP, DURATION)


def list_of(element: Type) -> Type:
    return Type("list", "list", (element,))


def map_of(key: Type, value: Type) -> Type:
    return Type("map", "map", (key, value))


def optional_of(value: Type) -> Type:
    return Type("opaque", "optional_type", (value,))


def type_of(value: Type) -> Type:
    return Type("type", "type", (value,))


def param(name: str) -> Type:
    return Type("param", name)


_fresh = itertools.count()


def fresh() -> Type:
    """A new free type variable (an empty list literal's element, a fresh overload parameter)."""
    return Type("param", f"_var{next(_fresh)}")


class Mapping:
    """Type-parameter bindings found while checking one expression."""

    __slots__ = ("bound",)

    def __init__(self, bound: dict[Type, Type] | None = None) -> None:
        self.bound: dict[Type, Type] = bound or {}

    def copy(self) -> Mapping:
        return Mapping(dict(self.bound))

    def substitute(self, t: Type, params_to_dyn: bool = False) -> Type:
        seen = 0
        while t in self.bound and seen < 64:
            t = self.bound[t]
            seen += 1
        if t.kind == "param":
            return DYN if params_to_dyn else t
        if t.params:
            return Type(t.kind, t.name, tuple(self.substitute(p, params_to_dyn) for p in t.params))
        return t

    # --- assignability (cel-go's checker/types.go semantics) -------------------------

    def assignable(self, target: Type, value: Type) -> bool:
        """Whether ``value`` may be passed where ``target`` is expected; binds parameters."""
        trial = self.copy()
        if trial._assign(target, value):
            self.bound = trial.bound
            return True
        return False

    def assignable_all(self, targets: tuple[Type, ...], values: tuple[Type, ...]) -> bool:
        if len(targets) != len(values):
            return False
        trial = self.copy()
        if all(trial._assign(t, v) for t, v in zip(targets, values, strict=True)):
            self.bound = trial.bound
            return True
        return False

    def _assign(self, t1: Type, t2: Type) -> bool:
        if t2.kind == "param":
            valid, has_sub = self._substitution(t1, t2)
            if valid:
                return True
            if has_sub:
                return False
        if t1.kind == "param":
            return self._substitution(t2, t1)[0]
        if t1.is_dyn or t2.is_dyn or t1.kind == "error" or t2.kind == "error":
            return True
        if t1.kind == "null":
            return _nullable(t2)
        if t2.kind == "null":
            return _nullable(t1)
        if t1.kind == "type":
            return t2.kind == "type"
        if t1.kind in ("opaque", "list", "map"):
            return (
                t1.kind == t2.kind
                and t1.name == t2.name
                and len(t1.params) == len(t2.params)
                and all(self._assign(a, b) for a, b in zip(t1.params, t2.params, strict=True))
            )
        return t1 == t2

    def _substitution(self, t1: Type, t2: Type) -> tuple[bool, bool]:
        """Can ``t2`` (a parameter) stand for ``t1``? (valid, t2 already had a binding)."""
        if t1 == t2:
            return True, True
        sub = self.bound.get(t2)
        if sub is not None:
            if t1 == sub:
                return True, True
            if self._assign(t1, sub):
                general = most_general(t1, sub)
                if self._not_referenced(t2, general):
                    self.bound[t2] = general
                return True, True
            return False, True
        if self._not_referenced(t2, t1):
            self.bound[t2] = t1
            return True, False
        return False, False

    def _not_referenced(self, t: Type, within: Type) -> bool:
        if t == within:
            return False
        if within.kind == "param":
            sub = self.bound.get(within)
            return True if sub is None else self._not_referenced(t, sub)
        return all(self._not_referenced(t, p) for p in within.params)


def _nullable(t: Type) -> bool:
    return t.kind in ("null", "opaque", "struct", "any", "duration", "timestamp")


def _less_specific(t1: Type, t2: Type) -> bool:
    if t1.is_dyn or t1.kind == "param":
        return True
    if t2.is_dyn or t2.kind == "param" or t1.kind != t2.kind:
        return False
    if t1.kind in ("opaque", "list", "map"):
        return (
            t1.name == t2.name
            and len(t1.params) == len(t2.params)
            and all(_less_specific(a, b) for a, b in zip(t1.params, t2.params, strict=True))
        )
    return t1.kind == "type" or t1 == t2


def most_general(t1: Type, t2: Type) -> Type:
    return t1 if _less_specific(t1, t2) else t2


def equivalent(t1: Type, t2: Type) -> bool:
    """Same type, ignoring the names of type parameters (the homogeneous-literal rule)."""
    if t1.kind == "param" and t2.kind == "param":
        return True
    if t1.kind != t2.kind or t1.name != t2.name or len(t1.params) != len(t2.params):
        return False
    return all(equivalent(a, b) for a, b in zip(t1.params, t2.params, strict=True))


def is_scalar(t: Type) -> bool:
    """Types whose size is 1 for the cost estimator (cel-go's isScalar)."""
    if t.kind in ("bool", "double", "duration", "int", "timestamp", "uint"):
        return True
    return t.is_optional and is_scalar(t.params[0])


__all__ = [
    "ANY",
    "BOOL",
    "BYTES",
    "CIDR",
    "DEVICE",
    "DOUBLE",
    "DURATION",
    "DYN",
    "ERROR",
    "INT",
    "IP",
    "NULL",
    "QUANTITY",
    "SCALARS",
    "SEMVER",
    "STRING",
    "TIMESTAMP",
    "UINT",
    "Mapping",
    "Type",
    "equivalent",
    "fresh",
    "is_scalar",
    "list_of",
    "map_of",
    "most_general",
    "optional_of",
    "param",
    "type_of",
]
