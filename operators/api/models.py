"""Every model of the resource.dralloc.dev/v1 API, importable from one place.

The kinds live in one module each (deviceclass, resourceclaim, resourceslice,
devicetaintrule, devicequota; shared types in common and meta). Type names are the upstream Go names of
resource.k8s.io/v1, and the field set is upstream's, so a manifest ports by changing its
apiVersion. Conventions (see base.KubeModel): snake_case attributes with camelCase JSON
aliases, frozen models, tuples for lists, unknown fields ignored, `to_kube()` for JSON.

Defaults the API server applies (allocationMode ExactCount, count 1, toleration operator
Equal) are NOT filled in, so a round trip reproduces the input; use the `effective_*`
properties. Empty lists and maps are `()`/`{}` (never None) and are left out on output.
"""

from __future__ import annotations

from operators.api.common import (
    API_VERSION,
    GROUP,
    KUBERNETES_API_VERSION,
    KUBERNETES_GROUP,
    VERSION,
    AllocationMode,
    CapacityRequirements,
    CELDeviceSelector,
    ConfigSource,
    DeviceClaimConfiguration,
    DeviceClassConfiguration,
    DeviceSelector,
    DeviceTaint,
    DeviceToleration,
    OpaqueDeviceConfiguration,
    TaintEffect,
    TolerationOperator,
)
from operators.api.deviceclass import DeviceClass, DeviceClassSpec
from operators.api.devicequota import (
    DeviceQuota,
    DeviceQuotaLimits,
    DeviceQuotaSpec,
    DeviceQuotaStatus,
    DeviceQuotaUsage,
)
from operators.api.devicetaintrule import (
    DeviceTaintRule,
    DeviceTaintRuleSpec,
    DeviceTaintRuleStatus,
    DeviceTaintSelector,
)
from operators.api.meta import (
    Condition,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectMeta,
    OwnerReference,
)
from operators.api.quantity import Quantity
from operators.api.resourceclaim import (
    AllocatedDeviceStatus,
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceClaim,
    DeviceConstraint,
    DeviceRequest,
    DeviceRequestAllocationResult,
    DeviceSubRequest,
    ExactDeviceRequest,
    NetworkDeviceData,
    ResourceClaim,
    ResourceClaimConsumerReference,
    ResourceClaimSpec,
    ResourceClaimStatus,
    ResourceClaimTemplate,
    ResourceClaimTemplateSpec,
)
from operators.api.resourceslice import (
    AttributeValue,
    CapacityRequestPolicy,
    CapacityRequestPolicyRange,
    Counter,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceCounterConsumption,
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
)
from operators.api.semver import Semver

__all__ = [
    "API_VERSION",
    "GROUP",
    "KUBERNETES_API_VERSION",
    "KUBERNETES_GROUP",
    "VERSION",
    "AllocatedDeviceStatus",
    "AllocationMode",
    "AllocationResult",
    "AttributeValue",
    "CELDeviceSelector",
    "CapacityRequestPolicy",
    "CapacityRequestPolicyRange",
    "CapacityRequirements",
    "Condition",
    "ConfigSource",
    "Counter",
    "CounterSet",
    "Device",
    "DeviceAllocationConfiguration",
    "DeviceAllocationResult",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceClaim",
    "DeviceClaimConfiguration",
    "DeviceClass",
    "DeviceClassConfiguration",
    "DeviceClassSpec",
    "DeviceConstraint",
    "DeviceCounterConsumption",
    "DeviceQuota",
    "DeviceQuotaLimits",
    "DeviceQuotaSpec",
    "DeviceQuotaStatus",
    "DeviceQuotaUsage",
    "DeviceRequest",
    "DeviceRequestAllocationResult",
    "DeviceSelector",
    "DeviceSubRequest",
    "DeviceTaint",
    "DeviceTaintRule",
    "DeviceTaintRuleSpec",
    "DeviceTaintRuleStatus",
    "DeviceTaintSelector",
    "DeviceToleration",
    "ExactDeviceRequest",
    "NetworkDeviceData",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "ObjectMeta",
    "OpaqueDeviceConfiguration",
    "OwnerReference",
    "Quantity",
    "ResourceClaim",
    "ResourceClaimConsumerReference",
    "ResourceClaimSpec",
    "ResourceClaimStatus",
    "ResourceClaimTemplate",
    "ResourceClaimTemplateSpec",
    "ResourcePool",
    "ResourceSlice",
    "ResourceSliceSpec",
    "Semver",
    "TaintEffect",
    "TolerationOperator",
]
