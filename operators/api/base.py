"""The common base of every API model, and the constrained scalar types they share.

Conventions (other packages rely on them):
- Python names are snake_case, JSON names camelCase (`device_class_name` <-> `deviceClassName`);
  both are accepted on input, and `to_kube()` writes the JSON names, leaving out unset fields.
- Models are frozen, and lists are tuples, so a validated object can be shared between the
  cache, the allocator and the controllers without copies. The parsers (``context=
  SHARED_PARTS``) go further: equal repeated parts of different objects are one instance
  (see `Shared`), so the mappings inside a model (opaque parameters, capacity requests) are
  never to be changed in place either.
- Unknown fields are ignored, not rejected (`extra="ignore"`): in-tree objects carry fields
  from newer Kubernetes versions and alpha gates, and a watch event must never fail because
  of a field we do not model. The CRD schemas prune unknown fields on our own group anyway.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import Annotated, Any, Final, Self

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    model_validator,
)
from pydantic.alias_generators import to_camel

from operators.api import limits

# JSON names that are not the plain camelCase of the Python name. Kept here rather than as
# Field(alias=...) so that type checkers see the snake_case names in constructors.
_ALIASES: dict[str, str] = {
    "share_id": "shareID",
    "int_value": "int",
    "bool_value": "bool",
    "string_value": "string",
    "version_value": "version",
}


def json_name(python_name: str) -> str:
    """The Kubernetes JSON field name of a model attribute."""
    return _ALIASES.get(python_name) or to_camel(python_name)


_NULLABLE_DEFAULTS: dict[type, frozenset[str]] = {}
# See KubeModel._share_fields_set.
_FIELDS_SETS: dict[frozenset[str], set[str]] = {}
_MAX_FIELDS_SETS: Final = 4096


class KubeModel(BaseModel):
    """Base of all resource.dralloc.dev/v1 models."""

    model_config = ConfigDict(
        frozen=True,
        populate_by_name=True,
        extra="ignore",
        alias_generator=json_name,
        use_attribute_docstrings=True,
        serialize_by_alias=True,
    )

    @model_validator(mode="after")
    def _share_fields_set(self) -> Self:
        """One set of "fields given" per distinct set, shared by every instance with it.

        pydantic keeps one per instance, and for a model with more than four fields given it
        is the instance's largest part (728 bytes): half of what a cached claim holds.
        Sharing is safe because models are frozen: pydantic changes the set in place only
        on attribute assignment, and copies it for ``model_copy``.
        """
        fields = self.__pydantic_fields_set__
        if len(_FIELDS_SETS) < _MAX_FIELDS_SETS:
            fields = _FIELDS_SETS.setdefault(frozenset(fields), fields)
        else:  # a bound against inputs made to give every combination of fields
            fields = _FIELDS_SETS.get(frozenset(fields), fields)
        object.__setattr__(self, "__pydantic_fields_set__", fields)
        return self

    def to_kube(self) -> dict[str, Any]:
        """The Kubernetes JSON form: camelCase names, unset (None) fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @classmethod
    def from_kube(cls, obj: Any) -> Self:
        return cls.model_validate(obj)


class NullTolerantModel(KubeModel):
    """A model of objects the API server may serve with ``null`` for an empty list.

    Not the base of every model: the before-validator costs a Python call per object
    (a third more for a ResourceSlice's 128 devices), and slices are parsed most often.
    """

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        """``null`` for a field that has a non-null default reads as unset.

        The API server writes ``null`` for Go slices without ``omitempty`` (a claim's
        ``status.devices[].conditions`` once a driver reports device status, the
        ``spec.devices.requests`` of a claim without requests): refusing those would drop
        valid in-tree objects from the cache, and their devices would look free.
        """
        if type(data) is dict and None in data.values():
            unset = _NULLABLE_DEFAULTS.get(cls)
            if unset is None:
                unset = _NULLABLE_DEFAULTS[cls] = frozenset(
                    name
                    for field_name, field in cls.model_fields.items()
                    if not field.is_required()
                    and field.get_default(call_default_factory=True) is not None
                    for name in (field_name, field.alias or field_name)
                )
            if unset:
                data = {k: v for k, v in data.items() if v is not None or k not in unset}
        return data


class SharingContext:
    """The validation context under which :class:`Shared` parts are shared.

    Sharing is opt-in per validation: only the parsers of API objects and annotations pass
    :data:`SHARED_PARTS` (python input, lax, aliases and names as configured). Any other
    validation (a constructor, ``model_validate`` without it, strict or JSON mode, other
    options) validates as usual and neither reads nor fills the tables, so a table only
    ever holds what one fixed kind of validation made of an input.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "SHARED_PARTS"


SHARED_PARTS: Final = SharingContext()
"""Pass as ``context=`` to validate objects whose repeated parts are shared."""

_SCALARS: Final = frozenset({str, int, bool, type(None)})
_JSON_SCALARS: Final = frozenset({str, int, bool, float, type(None)})
_MAX_DEPTH: Final = 64


class Shared:
    """Equal inputs validated once, into one instance that every object holding it shares.

    For the parts of an object that repeat across many objects (a device attribute such as
    ``{"string": "A100"}`` on every device of a model; the spec of every claim made from
    one template): the watch cache keeps thousands of them, and a pydantic instance costs
    hundreds of bytes. Used from a ``mode="wrap"`` model validator, which passes its class,
    input, handler and info.

    A cached instance is returned only where validating the input would give an equal one:
    - only under :data:`SHARED_PARTS` in python mode, never otherwise; in particular never
      from a constructor (pydantic then fills the instance being built, and one returned in
      its place would leave that instance empty);
    - ``key`` maps an input to a hashable that tells apart every two inputs that may validate
      differently: exact types (``1``, ``1.0`` and ``True`` are equal in Python and hash
      alike; an ``int`` key of a mapping is not a ``str`` one), key order kept; it raises
      TypeError (or ValueError) for an input it cannot key, which is then validated as usual;
    - one table per class, so a subclass never gets an instance of its base;
    - only successful validations are kept, so an input that fails fails every time.

    The instances are frozen models. With ``fresh`` (a JSON key), what is validated on a
    miss is ``fresh(key)``, a copy owned by the table, so a shared instance holds nothing of
    one caller's input (``Any`` fields keep their input as is) that the caller could change.
    The table is cleared when full, so it stays small however many distinct values pass.
    """

    def __init__(
        self,
        key: Callable[[dict[str, Any]], Hashable],
        limit: int = 4096,
        fresh: Callable[[Any], dict[str, Any]] | None = None,
    ) -> None:
        self.key = key
        self.limit = limit
        self.fresh = fresh
        self._tables: dict[type, dict[Hashable, Any]] = {}

    def __call__(
        self, cls: type, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        if type(data) is not dict or info.context is not SHARED_PARTS or info.mode != "python":
            return handler(data)
        try:
            key = self.key(data)
            table = self._tables.get(cls)
            found = None if table is None else table.get(key)
        except (TypeError, ValueError, RecursionError):
            return handler(data)
        if found is None:
            found = handler(data if self.fresh is None else self.fresh(key))
            if type(found) is not cls:  # not a plain instance of the class: not shared
                return found
            if table is None:
                table = self._tables[cls] = {}
            elif len(table) >= self.limit:
                table.clear()
            table[key] = found
        return found

    def clear(self) -> None:
        """Forget every shared instance (tests)."""
        self._tables.clear()


def scalar_items(data: dict[str, Any]) -> Hashable:
    """The key of a mapping of str, int, bool or None values (TypeError for any other)."""
    for name, value in data.items():
        if type(name) is not str or type(value) not in _SCALARS:
            raise TypeError(name)
    return tuple((name, type(value), value) for name, value in data.items())


def _check_json(value: Any, depth: int) -> None:
    # Scalars other than floats are checked in the loops, without a call each: most of
    # what is keyed (every pod's tolerations) is strings and integers.
    kind = type(value)
    if kind is dict:
        if depth >= _MAX_DEPTH:
            raise ValueError("too deep to key")
        for name, item in value.items():
            if type(name) is not str:
                raise TypeError(name)
            if type(item) not in _SCALARS:
                _check_json(item, depth + 1)
    elif kind is list:
        if depth >= _MAX_DEPTH:
            raise ValueError("too deep to key")
        for item in value:
            if type(item) not in _SCALARS:
                _check_json(item, depth + 1)
    elif kind is float:
        if not math.isfinite(value):
            raise ValueError("no JSON text for a float that is not finite")
    elif kind not in _JSON_SCALARS:
        raise TypeError(kind)


def json_text(data: Any) -> bytes:
    """The key of a JSON value made of exact ``dict`` (``str`` keys), ``list``, ``str``,
    ``int``, ``bool``, finite ``float`` and ``None``: its JSON text, key order kept; TypeError
    for any other type (a tuple, an ``int`` key, a ``str`` subclass, an integer beyond 64 bits,
    a lone surrogate), ValueError when nested too deep or not finite. On that domain the
    text tells every two values apart, and :func:`json_copy` gives back an equal value of the
    same types. orjson writes it in a tenth of ``json``'s time (every pod's tolerations are
    keyed: ``bench/cache_scale.py``)."""
    _check_json(data, 0)
    return orjson.dumps(data)


def json_copy(key: bytes) -> Any:
    """The value a :func:`json_text` key was made from, as a new object."""
    return orjson.loads(key)


def _constrained(pattern: str, max_length: int, min_length: int | None = None) -> Any:
    return Field(pattern=pattern, max_length=max_length, min_length=min_length)


DNSLabel = Annotated[
    str, _constrained(limits.DNS_LABEL_PATTERN, limits.DNS_LABEL_MAX_LENGTH, min_length=1)
]
DNSSubdomain = Annotated[
    str,
    _constrained(limits.DNS_SUBDOMAIN_PATTERN, limits.DNS_SUBDOMAIN_MAX_LENGTH, min_length=1),
]
DriverName = Annotated[
    str, _constrained(limits.DNS_SUBDOMAIN_PATTERN, limits.DRIVER_NAME_MAX_LENGTH, min_length=1)
]
PoolName = Annotated[
    str, _constrained(limits.POOL_NAME_PATTERN, limits.POOL_NAME_MAX_LENGTH, min_length=1)
]
QualifiedName = Annotated[
    str, _constrained(limits.QUALIFIED_NAME_PATTERN, limits.QUALIFIED_NAME_MAX_LENGTH)
]
FullyQualifiedName = Annotated[
    str, _constrained(limits.FULLY_QUALIFIED_NAME_PATTERN, limits.QUALIFIED_NAME_MAX_LENGTH)
]
RequestReference = Annotated[
    str,
    _constrained(limits.REQUEST_REFERENCE_PATTERN, 2 * limits.DNS_LABEL_MAX_LENGTH + 1),
]
LabelKey = Annotated[str, _constrained(limits.LABEL_KEY_PATTERN, limits.LABEL_KEY_MAX_LENGTH)]
LabelValue = Annotated[str, _constrained(limits.LABEL_VALUE_PATTERN, limits.LABEL_VALUE_MAX_LENGTH)]
ConditionType = LabelKey
AttributeString = Annotated[str, Field(max_length=limits.DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH)]
SemverString = Annotated[
    str, _constrained(limits.SEMVER_PATTERN, limits.DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH)
]
ShareID = Annotated[str, _constrained(limits.UUID_PATTERN, limits.SHARE_ID_LENGTH)]
BindingConditions = Annotated[
    tuple[ConditionType, ...], Field(max_length=limits.BINDING_CONDITIONS_MAX_SIZE)
]
BindingFailureConditions = Annotated[
    tuple[ConditionType, ...], Field(max_length=limits.BINDING_FAILURE_CONDITIONS_MAX_SIZE)
]


def cel_rules(*rules: tuple[str, str]) -> dict[str, Any]:
    """CRD `x-kubernetes-validations` for rules that span fields: (CEL rule, message) pairs.

    They mirror the Python validators so the API server rejects what the operator would;
    each rule must stay cheap on bounded lists (the CRD CEL cost budget).
    """
    return {
        "x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in rules]
    }


def list_map(*keys: str) -> dict[str, Any]:
    """Marks a list as a map keyed by `keys` for server-side apply (upstream listType=map)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


def unique_by(field: str, what: str) -> dict[str, Any]:
    """A CEL rule on a list: no two items share `field`."""
    return cel_rules(
        (f"self.all(x, self.exists_one(y, y.{field} == x.{field}))", f"{what} must be unique")
    )


IMMUTABLE: dict[str, Any] = cel_rules(("self == oldSelf", "field is immutable"))
