"""The resource.dralloc.dev/v1 API: models, limits, quantities and the pod protocol.

`parse_object` turns a Kubernetes JSON object of either API group (ours, or the in-tree
resource.k8s.io/v1 it mirrors) into the model of its kind, with field-path errors.
"""

# No `from __future__ import annotations` here: it would bind the name `annotations` in this
# package and shadow the `operators.api.annotations` module for `from operators.api import ...`.
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from operators.api.base import SHARED_PARTS
from operators.api.fielderrors import FieldError, InvalidObjectError, describe
from operators.api.models import (
    API_VERSION,
    GROUP,
    KUBERNETES_API_VERSION,
    KUBERNETES_GROUP,
    VERSION,
    DeviceClass,
    DeviceQuota,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from operators.api.quantity import Quantity, QuantityParseError

__all__ = [
    "API_VERSION",
    "API_VERSIONS",
    "GROUP",
    "KINDS",
    "KUBERNETES_API_VERSION",
    "KUBERNETES_GROUP",
    "VERSION",
    "APIObject",
    "DeviceClass",
    "DeviceQuota",
    "DeviceTaintRule",
    "FieldError",
    "InvalidObjectError",
    "Quantity",
    "QuantityParseError",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "parse_object",
]

APIObject = (
    DeviceClass
    | ResourceClaim
    | ResourceClaimTemplate
    | ResourceSlice
    | DeviceTaintRule
    | DeviceQuota
)

KINDS: Final[dict[str, type[APIObject]]] = {
    "DeviceClass": DeviceClass,
    "ResourceClaim": ResourceClaim,
    "ResourceClaimTemplate": ResourceClaimTemplate,
    "ResourceSlice": ResourceSlice,
    "DeviceTaintRule": DeviceTaintRule,
    "DeviceQuota": DeviceQuota,
}

API_VERSIONS: Final = frozenset({API_VERSION, KUBERNETES_API_VERSION})


def _describe_object(obj: Mapping[str, Any]) -> str:
    kind = obj.get("kind") or "object"
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    if name and namespace:
        return f"{kind} {namespace}/{name}"
    return f"{kind} {name}" if name else str(kind)


def parse_object(obj: Mapping[str, Any]) -> APIObject:
    """Validate a Kubernetes object of a DRA kind into its model.

    Accepts apiVersion resource.dralloc.dev/v1 and resource.k8s.io/v1 alike; raises
    InvalidObjectError listing each problem with its field path.
    """
    what = _describe_object(obj)
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or api_version not in API_VERSIONS:
        raise InvalidObjectError(
            what,
            [
                FieldError(
                    "apiVersion", f"must be one of {sorted(API_VERSIONS)}, not {api_version!r}"
                )
            ],
        )
    kind = obj.get("kind")
    model = KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InvalidObjectError(
            what, [FieldError("kind", f"must be one of {sorted(KINDS)}, not {obj.get('kind')!r}")]
        )
    try:
        return model.model_validate(obj, context=SHARED_PARTS)
    except ValidationError as exc:
        raise InvalidObjectError(what, describe(exc)) from None
