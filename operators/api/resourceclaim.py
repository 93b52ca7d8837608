"""ResourceClaim and ResourceClaimTemplate: what a workload asks for, and what it got."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import (
    ConfigDict,
    Field,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    model_validator,
)

from operators.api import limits
from operators.api.base import (
    IMMUTABLE,
    BindingConditions,
    BindingFailureConditions,
    DNSLabel,
    DNSSubdomain,
    DriverName,
    FullyQualifiedName,
    NullTolerantModel,
    PoolName,
    QualifiedName,
    RequestReference,
    Shared,
    ShareID,
    cel_rules,
    json_copy,
    json_text,
    list_map,
    unique_by,
)
from operators.api.common import (
    API_VERSION,
    AllocationMode,
    CapacityRequirements,
    ConfigSource,
    DeviceClaimConfiguration,
    DeviceSelectors,
    DeviceTolerations,
    OpaqueDeviceConfiguration,
    SkipNodeOperations,
    check_skip_node_operations,
    check_unique,
    empty_map,
    empty_tuple,
    json_size,
)
from operators.api.fielderrors import field_error
from operators.api.meta import Condition, NodeSelector, ObjectMeta
from operators.api.quantity import Quantity


class DeviceDerivedAttribute(NullTolerantModel):
    """A value computed per candidate device by CEL, that constraints compare like an attribute."""

    name: FullyQualifiedName
    """The name constraints use; over a published attribute of that name, this value wins for the request."""
    expression: Annotated[
        str, Field(min_length=1, max_length=limits.CEL_SELECTOR_EXPRESSION_MAX_LENGTH)
    ]
    """CEL over `device` (as in selectors) giving a string, int, bool, semver or a list of one of them."""


DeviceDerivedAttributes = Annotated[
    tuple[DeviceDerivedAttribute, ...],
    Field(
        max_length=limits.DEVICE_DERIVED_ATTRIBUTES_MAX_SIZE,
        # Unique names as a list map, which the API server checks for free: a CEL
        # uniqueness rule under every firstAvailable alternative of every request costs
        # more than a CRD's rule budget allows (the API server refused the CRD).
        json_schema_extra=list_map("name"),
    ),
]


class _CountedRequest(NullTolerantModel):
    """What exact requests and firstAvailable alternatives share: allocationMode and count.

    No fields of its own (each subclass declares them, so the CRD keeps upstream's field
    order and each its own descriptions); it holds the count rules, as CRD CEL rules and
    as the matching Python check, and the defaults.
    """

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "!(has(self.allocationMode) && self.allocationMode == 'All') || !has(self.count) || self.count == 0",
                "count must not be set when allocationMode is All",
            ),
            (
                "(has(self.allocationMode) && self.allocationMode == 'All') || !has(self.count) || self.count > 0",
                "count must be greater than zero",
            ),
        )
    )

    if TYPE_CHECKING:
        allocation_mode: AllocationMode | None
        count: int | None
        derived_attributes: tuple[DeviceDerivedAttribute, ...]

    @model_validator(mode="after")
    def _check_count(self) -> Self:
        if self.allocation_mode == "All":
            if self.count:
                raise field_error("count", "must not be set when allocationMode is All")
        elif self.count is not None and self.count <= 0:
            raise field_error("count", "must be greater than zero")
        check_unique((a.name for a in self.derived_attributes), "derivedAttributes", "name")
        return self

    @property
    def effective_allocation_mode(self) -> AllocationMode:
        return self.allocation_mode or "ExactCount"

    @property
    def effective_count(self) -> int:
        """Devices wanted with ExactCount (0 for All)."""
        if self.allocation_mode == "All":
            return 0
        return self.count if self.count is not None else 1


class ExactDeviceRequest(_CountedRequest):
    """A request for devices of one class."""

    device_class_name: DNSSubdomain
    """The DeviceClass the devices must belong to."""
    selectors: DeviceSelectors = empty_tuple()
    """Further criteria, on top of the class's."""
    allocation_mode: AllocationMode | None = None
    """ExactCount (the default): count devices; All: every matching device of a pool."""
    count: Annotated[int, Field(ge=0)] | None = None
    """Number of devices with ExactCount (default 1)."""
    admin_access: bool | None = None
    """Grants access to devices that are in use, for monitoring or maintenance; the namespace needs the admin-access label."""
    tolerations: DeviceTolerations = empty_tuple()
    """Taints this request tolerates."""
    capacity: CapacityRequirements | None = None
    """Consumable capacity needed from each device."""
    derived_attributes: DeviceDerivedAttributes = empty_tuple()
    """Values computed per device for the claim's constraints (alpha, DRADerivedAttributes)."""


class DeviceSubRequest(_CountedRequest):
    """One alternative of a firstAvailable request."""

    name: DNSLabel
    """Name of the alternative; results refer to it as <request>/<subrequest>."""
    device_class_name: DNSSubdomain
    """The DeviceClass the devices must belong to."""
    selectors: DeviceSelectors = empty_tuple()
    """Further criteria, on top of the class's."""
    allocation_mode: AllocationMode | None = None
    """ExactCount (the default) or All."""
    count: Annotated[int, Field(ge=0)] | None = None
    """Number of devices with ExactCount (default 1)."""
    tolerations: DeviceTolerations = empty_tuple()
    """Taints this alternative tolerates."""
    capacity: CapacityRequirements | None = None
    """Consumable capacity needed from each device."""
    derived_attributes: DeviceDerivedAttributes = empty_tuple()
    """Values computed per device for the claim's constraints (alpha, DRADerivedAttributes)."""


class DeviceRequest(NullTolerantModel):
    """A named request: either exactly one kind of device, or an ordered list of alternatives."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "has(self.exactly) != (has(self.firstAvailable) && size(self.firstAvailable) > 0)",
                "exactly one of exactly or firstAvailable must be set",
            )
        )
    )

    name: DNSLabel
    """Name of the request, unique in the claim."""
    exactly: ExactDeviceRequest | None = None
    """The devices wanted. Exactly one of exactly and firstAvailable is set."""
    first_available: Annotated[
        tuple[DeviceSubRequest, ...],
        Field(
            max_length=limits.FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE,
            json_schema_extra=unique_by("name", "subrequest names"),
        ),
    ] = empty_tuple()
    """Alternatives in order of preference; the first that can be allocated is used."""

    @model_validator(mode="after")
    def _check(self) -> DeviceRequest:
        if (self.exactly is None) == (not self.first_available):
            raise field_error("", "exactly one of exactly or firstAvailable must be set")
        check_unique((s.name for s in self.first_available), "firstAvailable", "name")
        return self


class DeviceConstraint(NullTolerantModel):
    """A rule that must hold across the devices of some requests."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "has(self.matchAttribute) != has(self.distinctAttribute)",
                "exactly one of matchAttribute or distinctAttribute must be set",
            )
        )
    )

    requests: Annotated[
        tuple[RequestReference, ...], Field(max_length=limits.DEVICE_REQUESTS_MAX_SIZE)
    ] = empty_tuple()
    """Requests (or request/subrequest) the constraint covers; empty means all."""
    match_attribute: FullyQualifiedName | None = None
    """All devices must have this attribute, with the same value."""
    distinct_attribute: FullyQualifiedName | None = None
    """All devices must have this attribute, each with a different value."""

    @model_validator(mode="after")
    def _check(self) -> DeviceConstraint:
        if (self.match_attribute is None) == (self.distinct_attribute is None):
            raise field_error("", "exactly one of matchAttribute or distinctAttribute must be set")
        return self


class DeviceClaim(NullTolerantModel):
    """The devices a claim asks for."""

    requests: Annotated[
        tuple[DeviceRequest, ...],
        Field(
            max_length=limits.DEVICE_REQUESTS_MAX_SIZE,
            json_schema_extra=unique_by("name", "request names"),
        ),
    ] = empty_tuple()
    """The requests; all must be satisfied."""
    constraints: Annotated[
        tuple[DeviceConstraint, ...], Field(max_length=limits.DEVICE_CONSTRAINTS_MAX_SIZE)
    ] = empty_tuple()
    """Rules across the requests' devices."""
    config: Annotated[
        tuple[DeviceClaimConfiguration, ...], Field(max_length=limits.DEVICE_CONFIG_MAX_SIZE)
    ] = empty_tuple()
    """Configuration for the requests' devices."""

    @model_validator(mode="after")
    def _check(self) -> DeviceClaim:
        check_unique((r.name for r in self.requests), "requests", "name")
        known: set[str] = set()
        for request in self.requests:
            known.add(request.name)
            known.update(f"{request.name}/{sub.name}" for sub in request.first_available)
        for i, constraint in enumerate(self.constraints):
            _check_references(constraint.requests, known, f"constraints[{i}].requests")
        for i, config in enumerate(self.config):
            _check_references(config.requests, known, f"config[{i}].requests")
        self._check_derived_used()
        return self

    def _check_derived_used(self) -> None:
        """A derived attribute no constraint of its request reads would be computed for
        nothing: refused, as the API server refuses it."""
        used: dict[str, set[str]] = {}  # request reference ("" for every request) -> names
        for constraint in self.constraints:
            name = constraint.match_attribute or constraint.distinct_attribute or ""
            for ref in constraint.requests or ("",):
                used.setdefault(ref, set()).add(name)
        everywhere = used.get("", set())
        for i, request in enumerate(self.requests):
            own = used.get(request.name, set())
            if request.exactly is not None:
                for k, attr in enumerate(request.exactly.derived_attributes):
                    if attr.name not in everywhere and attr.name not in own:
                        raise field_error(
                            f"requests[{i}].exactly.derivedAttributes[{k}].name", _UNUSED_DERIVED
                        )
            for j, sub in enumerate(request.first_available):
                mine = used.get(f"{request.name}/{sub.name}", set())
                for k, attr in enumerate(sub.derived_attributes):
                    if attr.name not in everywhere and attr.name not in own | mine:
                        raise field_error(
                            f"requests[{i}].firstAvailable[{j}].derivedAttributes[{k}].name",
                            _UNUSED_DERIVED,
                        )

    def request(self, name: str) -> DeviceRequest | None:
        for request in self.requests:
            if request.name == name:
                return request
        return None


_UNUSED_DERIVED = (
    "must be referenced by at least one matchAttribute or distinctAttribute constraint "
    "targeting this request"
)


def _check_references(refs: tuple[str, ...], known: set[str], path: str) -> None:
    for j, ref in enumerate(refs):
        if ref not in known:
            raise field_error(
                f"{path}[{j}]", f"{ref!r} is not a request or subrequest of the claim"
            )


class ResourceClaimSpec(NullTolerantModel):
    """What a claim asks for. Immutable once created."""

    devices: DeviceClaim = Field(default_factory=DeviceClaim)
    """The devices wanted."""

    @model_validator(mode="wrap")
    @classmethod
    def _shared(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        # Every claim made from one template has the same spec.
        return _SHARED_SPECS(cls, data, handler, info)


_SHARED_SPECS = Shared(json_text, limit=1024, fresh=json_copy)


class DeviceRequestAllocationResult(NullTolerantModel):
    """One device allocated for one request."""

    request: RequestReference
    """The request (or request/subrequest) the device was allocated for."""
    driver: DriverName
    """Driver of the device."""
    pool: PoolName
    """Pool of the device."""
    device: DNSLabel
    """Name of the device in its pool."""
    admin_access: bool | None = None
    """True if allocated with admin access."""
    tolerations: DeviceTolerations = empty_tuple()
    """The request's tolerations at allocation time."""
    binding_conditions: BindingConditions = empty_tuple()
    """Copied from the device: conditions that must be True before the pod is bound."""
    binding_failure_conditions: BindingFailureConditions = empty_tuple()
    """Copied from the device: conditions that, when True, make binding fail."""
    share_id: ShareID | None = None
    """Identifies this share of a device that allows multiple allocations (lowercase UUID)."""
    consumed_capacity: dict[QualifiedName, Quantity] = empty_map()
    """Capacity consumed from a device that allows multiple allocations."""
    skip_node_operations: SkipNodeOperations = empty_tuple()
    """Copied from the device's slice: kubelet calls to the driver skipped for this device (alpha, DRAOptionalNodeOperations)."""

    @model_validator(mode="after")
    def _check_skips(self) -> DeviceRequestAllocationResult:
        if self.skip_node_operations:
            check_skip_node_operations(self.skip_node_operations, "skipNodeOperations")
        return self

    @property
    def device_id(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


class DeviceAllocationConfiguration(NullTolerantModel):
    """Configuration copied into the allocation from the class or the claim."""

    source: ConfigSource
    """FromClass or FromClaim."""
    requests: tuple[RequestReference, ...] = empty_tuple()
    """Requests the configuration applies to; empty means all."""
    opaque: OpaqueDeviceConfiguration
    """Driver-specific configuration."""


class DeviceAllocationResult(NullTolerantModel):
    """The allocated devices and their configuration."""

    results: Annotated[
        tuple[DeviceRequestAllocationResult, ...],
        Field(max_length=limits.ALLOCATION_RESULTS_MAX_SIZE),
    ] = empty_tuple()
    """One entry per allocated device."""
    config: Annotated[
        tuple[DeviceAllocationConfiguration, ...],
        Field(max_length=limits.ALLOCATION_CONFIG_MAX_SIZE),
    ] = empty_tuple()
    """Class configuration first, then claim configuration."""


class AllocationResult(NullTolerantModel):
    """Where and what a claim got allocated."""

    devices: DeviceAllocationResult = Field(default_factory=DeviceAllocationResult)
    """The allocated devices."""
    node_selector: NodeSelector | None = None
    """Nodes where the devices are usable; unset means every node."""
    allocation_timestamp: datetime | None = None
    """When the allocation was made."""


class ResourceClaimConsumerReference(NullTolerantModel):
    """An object (usually a pod) the claim is reserved for."""

    api_group: str | None = None
    """API group of the consumer; empty for core objects such as pods."""
    resource: str
    """Resource type of the consumer, for example pods."""
    name: Annotated[str, Field(max_length=limits.DNS_SUBDOMAIN_MAX_LENGTH)]
    """Name of the consumer (an object name: at most 253 characters, which keeps the CEL rule
    on ``status.reservedForNames`` within the API server's cost budget)."""
    uid: str
    """UID of the consumer."""


class NetworkDeviceData(NullTolerantModel):
    """Network details of an allocated device."""

    interface_name: (
        Annotated[str, Field(max_length=limits.NETWORK_DEVICE_DATA_INTERFACE_NAME_MAX_LENGTH)]
        | None
    ) = None
    """Name of the network interface in the pod."""
    ips: Annotated[tuple[str, ...], Field(max_length=limits.NETWORK_DEVICE_DATA_MAX_IPS)] = (
        empty_tuple()
    )
    """Addresses in CIDR notation, for example 192.0.2.5/24."""
    hardware_address: (
        Annotated[str, Field(max_length=limits.NETWORK_DEVICE_DATA_HARDWARE_ADDRESS_MAX_LENGTH)]
        | None
    ) = None
    """Hardware (MAC) address of the interface."""


class AllocatedDeviceStatus(NullTolerantModel):
    """Status a driver reports for one allocated device."""

    driver: DriverName
    """Driver of the device."""
    pool: PoolName
    """Pool of the device."""
    device: DNSLabel
    """Name of the device."""
    share_id: ShareID | None = None
    """Share of a multi-allocatable device this status is about."""
    conditions: Annotated[
        tuple[Condition, ...],
        Field(
            max_length=limits.ALLOCATED_DEVICE_STATUS_MAX_CONDITIONS,
            json_schema_extra=list_map("type"),
        ),
    ] = empty_tuple()
    """Conditions of the device (for example Ready)."""
    data: Any = None
    """Arbitrary driver-specific JSON, at most 10 KiB."""
    network_data: NetworkDeviceData | None = None
    """Network details of the device."""

    @model_validator(mode="after")
    def _check(self) -> AllocatedDeviceStatus:
        if (
            self.data is not None
            and json_size(self.data) > limits.ALLOCATED_DEVICE_STATUS_DATA_MAX_LENGTH
        ):
            raise field_error(
                "data",
                f"must be at most {limits.ALLOCATED_DEVICE_STATUS_DATA_MAX_LENGTH} bytes of JSON",
            )
        return self


class ResourceClaimStatus(NullTolerantModel):
    """What has been allocated and who uses it."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "!has(self.reservedFor) || size(self.reservedFor) == 0 || has(self.allocation)",
                "reservedFor must be empty while the claim is not allocated",
            ),
            (
                "!has(oldSelf.allocation) || !has(self.allocation) || self.allocation == oldSelf.allocation",
                "allocation cannot be changed once set; it can only be cleared",
            ),
            # The summaries kubectl shows may be absent, never wrong: a write that changes the
            # allocation or reservedFor must rewrite or drop them. Only the API server checks
            # this (no Python mirror): the cache must not drop a claim over its summary.
            (
                "!has(self.allocatedDevices) || (has(self.allocation)"
                " && self.allocatedDevices.split(',').all(n,"
                " self.allocation.devices.results.exists(r, r.device == n))"
                " && self.allocation.devices.results.all(r,"
                " self.allocatedDevices.split(',').exists_one(n, n == r.device)))",
                "allocatedDevices must name each device of status.allocation exactly once,"
                " comma-separated (absent without an allocation)",
            ),
            # Lists computed in CEL (map, transformList) have no element size the cost
            # estimator knows (a join of one counts as unbounded), so the summaries are split
            # and compared element by element, each split once per rule or per result.
            (
                "!has(self.reservedForNames) || (has(self.reservedFor)"
                " && size(self.reservedForNames.split(',')) == size(self.reservedFor)"
                " && self.reservedForNames.split(',').all(i, n, n == self.reservedFor[i].name))",
                "reservedForNames must be the names of status.reservedFor, comma-separated, in"
                " its order",
            ),
        )
    )

    allocation: AllocationResult | None = None
    """The allocation, once made; it can only be cleared (deallocation), never changed."""
    reserved_for: Annotated[
        tuple[ResourceClaimConsumerReference, ...],
        Field(
            max_length=limits.RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE,
            json_schema_extra=list_map("uid"),
        ),
    ] = empty_tuple()
    """Consumers (pods) currently using the claim; only while allocated."""
    devices: Annotated[
        tuple[AllocatedDeviceStatus, ...],
        Field(
            max_length=limits.ALLOCATION_RESULTS_MAX_SIZE,
            json_schema_extra=cel_rules(
                (
                    "self.all(x, self.exists_one(y, y.driver == x.driver && y.pool == x.pool"
                    " && y.device == x.device"
                    " && (has(y.shareID) ? y.shareID : '') == (has(x.shareID) ? x.shareID : '')))",
                    "entries must be unique by driver, pool, device and shareID",
                )
            ),
        ),
    ] = empty_tuple()
    """Status reported by drivers for the allocated devices (one entry per device or share)."""
    conditions: Annotated[
        tuple[Condition, ...],
        Field(
            max_length=limits.RESOURCE_CLAIM_STATUS_MAX_CONDITIONS,
            json_schema_extra=list_map("type"),
        ),
    ] = empty_tuple()
    """dralloc extension (absent in resource.k8s.io/v1): Allocated is False while waiting (why), True once allocated."""
    allocated_devices: (
        Annotated[str, Field(max_length=limits.RESOURCE_CLAIM_STATUS_ALLOCATED_DEVICES_MAX_LENGTH)]
        | None
    ) = None
    """dralloc extension (absent in resource.k8s.io/v1): the allocated devices' names, comma-separated, written with the allocation and cleared with it; what `kubectl get` shows (a printer column shows only the first element of a list)."""
    reserved_for_names: (
        Annotated[str, Field(max_length=limits.RESOURCE_CLAIM_STATUS_RESERVED_FOR_NAMES_MAX_LENGTH)]
        | None
    ) = None
    """dralloc extension (absent in resource.k8s.io/v1): the names in reservedFor, comma-separated, written with every change of reservedFor; what `kubectl get` shows in Reserved For (a printer column shows only the first element of a list)."""

    @model_validator(mode="after")
    def _check(self) -> ResourceClaimStatus:
        if self.reserved_for and self.allocation is None:
            raise field_error("reservedFor", "must be empty while the claim is not allocated")
        check_unique((r.uid for r in self.reserved_for), "reservedFor", "uid")
        check_unique((c.type for c in self.conditions), "conditions", "type")
        if self.devices:
            self._check_device_statuses()
        return self

    def _check_device_statuses(self) -> None:
        allocated = (
            {(r.driver, r.pool, r.device, r.share_id) for r in self.allocation.devices.results}
            if self.allocation is not None
            else set()
        )
        seen: set[tuple[str, str, str, str | None]] = set()
        for i, status in enumerate(self.devices):
            key = (status.driver, status.pool, status.device, status.share_id)
            if key in seen:
                raise field_error(f"devices[{i}]", "duplicate entry for this device and shareID")
            seen.add(key)
            if key not in allocated:
                raise field_error(
                    f"devices[{i}]", "must refer to a device (and shareID) in status.allocation"
                )


class ResourceClaim(NullTolerantModel):
    """A request for devices, and once allocated, the devices it got (namespaced)."""

    api_version: str = API_VERSION
    """resource.dralloc.dev/v1."""
    kind: Literal["ResourceClaim"] = "ResourceClaim"
    """ResourceClaim."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec, json_schema_extra=IMMUTABLE)
    """What is requested. Immutable."""
    status: ResourceClaimStatus | None = None
    """Allocation and reservation state, written by dralloc and drivers."""


class ResourceClaimTemplateSpec(NullTolerantModel):
    """The claim to create for each pod that references the template."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Labels and annotations copied to each generated claim."""
    spec: ResourceClaimSpec
    """Spec of each generated claim."""


class ResourceClaimTemplate(NullTolerantModel):
    """A template from which a claim is generated per pod (namespaced)."""

    api_version: str = API_VERSION
    """resource.dralloc.dev/v1."""
    kind: Literal["ResourceClaimTemplate"] = "ResourceClaimTemplate"
    """ResourceClaimTemplate."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: ResourceClaimTemplateSpec = Field(json_schema_extra=IMMUTABLE)
    """The claim to generate. Immutable."""
