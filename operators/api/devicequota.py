"""DeviceQuota: a namespace's limit on what the allocator hands out of one DeviceClass.

Unlike a core ResourceQuota (checked at admission on what claims ask for, with an `All`
request counted as 32 and capacity not at all), a DeviceQuota is checked when devices are
chosen, on what is actually allocated: an `All` request counts the devices it got, capacity
(such as memory) is counted, and a multi-allocatable device counts what the claim consumes.
It is dralloc's own kind in both API modes (in-tree mode has no such kind to mirror).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from operators.api import limits
from operators.api.base import DNSSubdomain, KubeModel, list_map
from operators.api.common import API_VERSION, DeviceSelectors, empty_tuple
from operators.api.meta import Condition, ObjectMeta
from operators.api.quantity import Quantity

# Names are plain strings here, checked by the allocator (a quota with a bad name holds
# back what it limits): the CRD cannot check map keys, and a model that refused the name
# would make the cache drop the whole quota, lifting its other limits with it.
CapacityLimits = Annotated[
    dict[str, Quantity], Field(max_length=limits.DEVICE_QUOTA_MAX_CAPACITIES)
]


class DeviceQuotaLimits(KubeModel):
    """Hard limits; an unset limit does not constrain."""

    devices: Annotated[int, Field(ge=0)] | None = None
    """Most devices the namespace's claims may hold at once (adminAccess results are not counted)."""
    claims: Annotated[int, Field(ge=0)] | None = None
    """Most allocated claims holding at least one counted device."""
    capacity: CapacityLimits = Field(default_factory=dict)
    """Most of each device capacity (for example memory: 160Gi), summed over the counted devices: a whole device counts its published capacity, a share of a multi-allocatable device what it consumes. A name without a domain is the device driver's."""


class DeviceQuotaUsage(KubeModel):
    """What the namespace's allocated claims hold of the quota's devices."""

    devices: Annotated[int, Field(ge=0)] = 0
    """Devices counted."""
    claims: Annotated[int, Field(ge=0)] = 0
    """Allocated claims holding counted devices."""
    capacity: dict[str, Quantity] = Field(default_factory=dict)
    """Capacity counted, for each capacity the quota limits."""


class DeviceQuotaSpec(KubeModel):
    """Which devices are counted, and the limits."""

    device_class_name: DNSSubdomain
    """The DeviceClass whose allocated devices are counted (devices requested through it)."""
    selectors: DeviceSelectors = empty_tuple()
    """CEL selectors that narrow the counted devices further (all must be true), for example one GPU model."""
    hard: DeviceQuotaLimits
    """The limits."""


class DeviceQuotaStatus(KubeModel):
    """Usage as the operator computes it from the namespace's claims."""

    used: DeviceQuotaUsage | None = None
    """Current usage (allocated and in-flight claims)."""
    conditions: Annotated[
        tuple[Condition, ...],
        Field(
            max_length=limits.DEVICE_QUOTA_STATUS_MAX_CONDITIONS,
            json_schema_extra=list_map("type"),
        ),
    ] = empty_tuple()
    """Conditions; Valid says whether the quota can be enforced (class exists, selectors compile); Exceeded whether usage is over a limit (the limit was lowered below it, or someone else allocated)."""


class DeviceQuota(KubeModel):
    """Limits what the claims of a namespace may be allocated of one DeviceClass (namespaced)."""

    api_version: str = API_VERSION
    """resource.dralloc.dev/v1."""
    kind: Literal["DeviceQuota"] = "DeviceQuota"
    """DeviceQuota."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: DeviceQuotaSpec
    """Counted devices and limits."""
    status: DeviceQuotaStatus | None = None
    """Usage, kept by the operator."""
