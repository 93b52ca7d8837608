"""The common base of every API model, and the constrained scalar types they share.

Conventions (other packages rely on them):
- Python names are snake_case, JSON names camelCase (`device_class_name` <-> `deviceClassName`);
  both are accepted on input, and `to_kube()` writes the JSON names, leaving out unset fields.
- Models are frozen, and lists are tuples, so a validated object can be shared between the
  cache, the allocator and the controllers without copies.
- Unknown fields are ignored, not rejected (`extra="ignore"`): in-tree objects carry fields
  from newer Kubernetes versions and alpha gates, and a watch event must never fail because
  of a field we do not model. The CRD schemas prune unknown fields on our own group anyway.
"""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
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
