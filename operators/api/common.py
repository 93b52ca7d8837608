"""Types shared by several kinds: selectors, opaque configuration, tolerations and taints.

Also the API group names and the small helpers the model modules use (empty-collection
defaults that stay out of the serialised form, uniqueness checks with field paths).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import ConfigDict, Field, model_validator

from operators.api import limits
from operators.api.base import (
    DriverName,
    KubeModel,
    LabelKey,
    LabelValue,
    QualifiedName,
    RequestReference,
    cel_rules,
)
from operators.api.fielderrors import field_error
from operators.api.quantity import Quantity
from operators.groups import API_GROUPS as API_GROUPS
from operators.groups import GROUP as GROUP
from operators.groups import KUBERNETES_GROUP as KUBERNETES_GROUP
from operators.groups import VERSION as VERSION

API_VERSION: Final = f"{GROUP}/{VERSION}"
KUBERNETES_API_VERSION: Final = f"{KUBERNETES_GROUP}/{VERSION}"

AllocationMode = Literal["ExactCount", "All"]
TaintEffect = Literal["NoSchedule", "NoExecute", "None"]
TolerationOperator = Literal["Equal", "Exists"]
ConfigSource = Literal["FromClass", "FromClaim"]


def empty_tuple() -> Any:
    """An empty-tuple default that is left out of the serialised form (Go's omitempty)."""
    return Field(default=(), exclude_if=_is_empty)


def empty_map() -> Any:
    """An empty-dict default that is left out of the serialised form."""
    return Field(default_factory=dict, exclude_if=_is_empty)


def _is_empty(value: Any) -> bool:
    return not value


def json_size(value: Any) -> int:
    """Bytes of compact JSON, as the API server measures opaque parameters."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def check_unique(names: Iterable[str], list_path: str, key: str = "") -> None:
    """Raise a field error at the first repeated value (`key` names the item's field)."""
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            path = f"{list_path}[{i}].{key}" if key else f"{list_path}[{i}]"
            raise field_error(path, f"duplicate value {name!r}")
        seen.add(name)


class CELDeviceSelector(KubeModel):
    """A CEL expression that must evaluate to true for a device to be selected."""

    expression: Annotated[
        str, Field(min_length=1, max_length=limits.CEL_SELECTOR_EXPRESSION_MAX_LENGTH)
    ]
    """CEL expression over `device` (driver, attributes, capacity, allowMultipleAllocations); must return a bool."""


class DeviceSelector(KubeModel):
    """One criterion a device must meet; all selectors of a request and its class must hold."""

    cel: CELDeviceSelector
    """A CEL expression that must be true for the device."""


class OpaqueDeviceConfiguration(KubeModel):
    """Driver-specific configuration, passed through to the driver untouched."""

    driver: DriverName
    """The driver the parameters are for (a DNS subdomain)."""
    parameters: dict[str, Any]
    """Arbitrary JSON object for the driver, at most 10 KiB."""

    @model_validator(mode="after")
    def _check_size(self) -> OpaqueDeviceConfiguration:
        if json_size(self.parameters) > limits.OPAQUE_PARAMETERS_MAX_LENGTH:
            raise field_error(
                "parameters",
                f"must be at most {limits.OPAQUE_PARAMETERS_MAX_LENGTH} bytes of JSON",
            )
        return self


class DeviceClassConfiguration(KubeModel):
    """Configuration that applies to every device allocated through a class."""

    opaque: OpaqueDeviceConfiguration
    """Driver-specific configuration."""


class DeviceClaimConfiguration(KubeModel):
    """Configuration for the devices of some (or all) requests of a claim."""

    requests: tuple[RequestReference, ...] = empty_tuple()
    """Names of the requests (or request/subrequest) this applies to; empty means all."""
    opaque: OpaqueDeviceConfiguration
    """Driver-specific configuration."""


class DeviceToleration(KubeModel):
    """Lets a request use devices with a matching taint."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
                "operator must be Exists when key is empty",
            ),
            (
                "!(has(self.operator) && self.operator == 'Exists') || !has(self.value) || self.value == ''",
                "value must be empty when operator is Exists",
            ),
        )
    )

    key: LabelKey | None = None
    """Taint key to tolerate; empty with operator Exists tolerates every taint."""
    operator: TolerationOperator | None = None
    """Equal (the default) or Exists."""
    value: LabelValue | None = None
    """Taint value to match with operator Equal; must be empty with Exists."""
    effect: TaintEffect | None = None
    """Taint effect to match; empty matches every effect."""
    toleration_seconds: int | None = None
    """With NoExecute: how long the allocation may stay after the taint appears; unset means forever, <= 0 means evict at once."""

    @model_validator(mode="after")
    def _check(self) -> DeviceToleration:
        operator = self.operator or "Equal"
        if not self.key and operator != "Exists":
            raise field_error("operator", "must be Exists when key is empty")
        if operator == "Exists" and self.value:
            raise field_error("value", "must be empty when operator is Exists")
        return self

    @property
    def effective_operator(self) -> TolerationOperator:
        return self.operator or "Equal"


DeviceSelectors = Annotated[
    tuple[DeviceSelector, ...], Field(max_length=limits.DEVICE_SELECTORS_MAX_SIZE)
]
DeviceTolerations = Annotated[
    tuple[DeviceToleration, ...], Field(max_length=limits.DEVICE_TOLERATIONS_MAX_LENGTH)
]
# Node operations (the kubelet's gRPC calls to the driver) a slice's devices do without
# (alpha, DRAOptionalNodeOperations). The model reads any string (a newer API server's
# value must not make an in-tree object unreadable; the kubelet ignores what it does not
# know), but dralloc's CRDs, the API server of the CRD mode, accept what upstream's does:
# the three values, each once (upstream's list is a set; dralloc's CRDs keep lists atomic),
# preparing skipped only with unpreparing.
SKIP_ALL_NODE_OPERATIONS = "*"
NODE_OPERATIONS = ("NodePrepareResources", "NodeUnprepareResources", SKIP_ALL_NODE_OPERATIONS)
# Bounded so the CRD's rules stay within the API server's cost budget; room for a longer
# name a newer API server may bring.
NodeOperation = Annotated[str, Field(max_length=63)]
SkipNodeOperations = Annotated[
    tuple[NodeOperation, ...],
    Field(
        max_length=len(NODE_OPERATIONS),
        json_schema_extra=cel_rules(
            (
                f"self.all(x, x in {list(NODE_OPERATIONS)!r})",
                "supported values: " + ", ".join(f'"{v}"' for v in NODE_OPERATIONS),
            ),
            ("self.all(x, self.exists_one(y, y == x))", "must be unique"),
            (
                "!('NodePrepareResources' in self) || 'NodeUnprepareResources' in self "
                "|| '*' in self",
                "NodePrepareResources cannot be skipped unless NodeUnprepareResources is "
                "also skipped",
            ),
        ),
    ),
]


def check_skip_node_operations(operations: tuple[str, ...], path: str) -> None:
    """Each operation once, and preparing never skipped while unpreparing is not (the
    driver would be asked to unprepare what it never prepared)."""
    check_unique(operations, path)
    if (
        "NodePrepareResources" in operations
        and "NodeUnprepareResources" not in operations
        and SKIP_ALL_NODE_OPERATIONS not in operations
    ):
        raise field_error(
            path,
            "NodePrepareResources cannot be skipped unless NodeUnprepareResources is also skipped",
        )


class CapacityRequirements(KubeModel):
    """How much of each consumable capacity a request needs."""

    requests: dict[QualifiedName, Quantity] = empty_map()
    """Minimum amount per capacity name; the device's request policy may round it up."""


class DeviceTaint(KubeModel):
    """A taint on a device; requests must tolerate it to use the device."""

    key: LabelKey
    """Taint key."""
    value: LabelValue | None = None
    """Taint value."""
    effect: TaintEffect
    """NoSchedule (no new allocations), NoExecute (also evict users) or None (informational)."""
    time_added: datetime | None = None
    """When the taint was added; set by dralloc when missing."""
